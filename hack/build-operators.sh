#!/usr/bin/env bash
# Builds the real operators that troupe's integration tests run (tests/integration/
# test_operators.py), from their Go modules, the way hack/build-controlplane.sh
# builds the control plane:
#
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/bin/ray-operator
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/crds/ray.io_{rayclusters,rayjobs,rayservices}.yaml
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/crds/scheduling.x-k8s.io_podgroups.yaml
#
# ray-operator is KubeRay's operator, `go install github.com/ray-project/kuberay/
# ray-operator@v$KUBERAY_VERSION` (the module's own go.mod and go.sum: the
# versions its release was tested with). The CRDs come from the module cache that
# build fills: KubeRay's three (its manager starts the RayCluster, RayJob and
# RayService controllers, and each waits for its CRD), and the scheduler-plugins
# PodGroup CRD (scheduling.x-k8s.io/v1alpha1) of the sigs.k8s.io/scheduler-plugins
# version KubeRay's go.mod requires: the PodGroups its scheduler-plugins backend writes.
#
# ($XDG_CACHE_HOME defaults to ~/.cache; TROUPE_KUBERAY_DIR overrides the directory.)
# Done once: a stamp records what was built, and a later run with the same
# stamp and files does nothing. The binary is built under a temporary name and
# renamed into place, so an interrupted build never leaves a broken one.
#
# usage: hack/build-operators.sh [--force]
set -euo pipefail

KUBERAY_VERSION="${KUBERAY_VERSION:-1.5.0}"
KUBERAY_MODULE="github.com/ray-project/kuberay/ray-operator"
SCHEDULER_PLUGINS_MODULE="sigs.k8s.io/scheduler-plugins"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

cache="${XDG_CACHE_HOME:-$HOME/.cache}/troupe"
dir="${TROUPE_KUBERAY_DIR:-$cache/kuberay-v$KUBERAY_VERSION}"
bin="$dir/bin/ray-operator"
crds="$dir/crds"
stamp="$dir/.built"
logdir="$cache/build-logs"
log="$logdir/ray-operator-v$KUBERAY_VERSION.log"
crd_files=(ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml scheduling.x-k8s.io_podgroups.yaml)

# No toolchain download behind our back: the Go on PATH builds it (KubeRay
# v1.5.0's go.mod asks for go 1.24.0). A caller may still export GOTOOLCHAIN.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

# fmt_time, progress
. "$(dirname "${BASH_SOURCE[0]}")/lib-gobuild.sh"

want_stamp() { printf '%s@v%s\n' "$KUBERAY_MODULE" "$KUBERAY_VERSION"; }

# built_ok: the binary runs, carries the pinned module version in its build
# info, every CRD is there, and the stamp says this version.
built_ok() {
  local f
  [[ -x "$bin" && -f "$stamp" ]] || return 1
  [[ "$(head -n1 "$stamp")" == "$(want_stamp)" ]] || return 1
  for f in "${crd_files[@]}"; do [[ -s "$crds/$f" ]] || return 1; done
  go version -m "$bin" 2>/dev/null | awk -v m="$KUBERAY_MODULE" -v v="v$KUBERAY_VERSION" \
    '$1 == "mod" && $2 == m && $3 == v {ok = 1} END {exit !ok}'
}

command -v go >/dev/null || {
  echo "error: go is not on PATH (need Go >= 1.24 to build KubeRay v$KUBERAY_VERSION; the control plane needs >= 1.26)" >&2
  exit 1; }

if (( !force )) && built_ok; then
  echo "==> ray-operator v$KUBERAY_VERSION: up to date ($dir)"
  exit 0
fi

# One build at a time per cache, shared with hack/build-controlplane.sh (2-core machines).
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "==> another build holds $cache/.build.lock; waiting for it"
  flock 9
  if (( !force )) && built_ok; then
    echo "==> ray-operator v$KUBERAY_VERSION: up to date ($dir)"
    exit 0
  fi
fi

tmpdir="$(mktemp -d "${TMPDIR:-/tmp}/troupe-kuberay-build.XXXXXX")"
trap 'rm -rf "$tmpdir"' EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM
mkdir -p "$dir/bin" "$crds" "$logdir"
rm -f "$stamp"
: >"$log"

echo "==> building ray-operator v$KUBERAY_VERSION ($KUBERAY_MODULE@v$KUBERAY_VERSION) with $(go version | awk '{print $3}')"
echo "    ~900 packages, ~2 min on 2 cores the first time (45 MB); log: $log"
start=$SECONDS
set +e
# go install MODULE@VERSION builds with the module's own go.mod/go.sum (it has no
# replace directives); the downloads are checked against the checksum database.
GOBIN="$tmpdir" go install -v -trimpath -ldflags "-s -w" "$KUBERAY_MODULE@v$KUBERAY_VERSION" 2>&1 |
  progress ray-operator "$log"
rc=${PIPESTATUS[0]}
set -e
if (( rc != 0 )) || [[ ! -x "$tmpdir/ray-operator" ]]; then
  echo "error: building ray-operator v$KUBERAY_VERSION failed (exit $rc); full log: $log" >&2
  tail -n 30 "$log" >&2
  echo "    it needs the Go module proxy (GOPROXY=$(go env GOPROXY)) for the first build;" \
    "run 'make operators' again once it is reachable" >&2
  exit 1
fi

# The CRDs, from the module cache the build just filled.
moddir() {  # moddir MODULE VERSION -> the module's directory in the module cache
  local out
  out="$(go mod download -json "$1@$2" 2>>"$log")" || {
    echo "error: go mod download $1@$2 failed; full log: $log" >&2; exit 1; }
  printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}
kuberay_dir="$(moddir "$KUBERAY_MODULE" "v$KUBERAY_VERSION")"
# The scheduler-plugins version KubeRay requires (a `require` block line or a single-line require).
sp_version="$(awk -v m="$SCHEDULER_PLUGINS_MODULE" '($1 == m && $2 ~ /^v/) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' \
  "$kuberay_dir/go.mod")"
[[ -n "$sp_version" ]] || { echo "error: $kuberay_dir/go.mod does not require $SCHEDULER_PLUGINS_MODULE" >&2; exit 1; }
sp_dir="$(moddir "$SCHEDULER_PLUGINS_MODULE" "$sp_version")"
copy_crd() {  # copy_crd SRC NAME: into crds/ (the cache is read-only: no mode bits copied)
  [[ -s "$1" ]] || { echo "error: $1 not found in the module cache" >&2; exit 1; }
  cp "$1" "$crds/.$2.tmp" && chmod 644 "$crds/.$2.tmp" && mv -f "$crds/.$2.tmp" "$crds/$2"
}
for f in ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml; do
  copy_crd "$kuberay_dir/config/crd/bases/$f" "$f"
done
copy_crd "$sp_dir/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" scheduling.x-k8s.io_podgroups.yaml

mv -f "$tmpdir/ray-operator" "$bin"
{ want_stamp; echo "$SCHEDULER_PLUGINS_MODULE@$sp_version"; echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go version | awk '{print $3}')"; } >"$stamp"
built_ok || { echo "error: the freshly built $bin does not carry $KUBERAY_MODULE v$KUBERAY_VERSION in its build info" >&2; exit 1; }
echo "==> ray-operator v$KUBERAY_VERSION built in $(fmt_time $((SECONDS - start))) ($(du -h "$bin" | cut -f1)) -> $bin"
echo "    CRDs ($KUBERAY_MODULE v$KUBERAY_VERSION, $SCHEDULER_PLUGINS_MODULE $sp_version) -> $crds"
