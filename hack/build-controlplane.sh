#!/usr/bin/env bash
# Builds the upstream control-plane binaries that troupe's integration tests,
# demo and benchmarks run against, from the Go modules pinned in hack/k8s and
# hack/etcd:
#
#   $XDG_CACHE_HOME/troupe/k8s-v$K8S_VERSION/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $XDG_CACHE_HOME/troupe/etcd-v$ETCD_VERSION/bin/etcd
#
# ($XDG_CACHE_HOME defaults to ~/.cache; TROUPE_K8S_BIN_DIR / TROUPE_ETCD_BIN_DIR
# override the directories.) A binary that already exists and reports the
# expected version is skipped. Every binary is built under a temporary name and
# renamed into place, so an interrupted build never leaves a broken binary.
#
# usage: hack/build-controlplane.sh [--force]
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/troupe"
k8s_bin="${TROUPE_K8S_BIN_DIR:-$cache/k8s-v$K8S_VERSION/bin}"
etcd_bin="${TROUPE_ETCD_BIN_DIR:-$cache/etcd-v$ETCD_VERSION/bin}"
logdir="$cache/build-logs"

export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false"

# The versions in the Makefile and the pinned go.mod files must agree.
modver() { awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$1" | head -n1; }
got="$(modver "$root/hack/k8s/go.mod" k8s.io/kubernetes)"
[[ "$got" == "v$K8S_VERSION" ]] || {
  echo "error: hack/k8s/go.mod pins k8s.io/kubernetes $got, expected v$K8S_VERSION (run hack/gen-k8s-gomod.sh $K8S_VERSION)" >&2; exit 1; }
got="$(modver "$root/hack/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ "$got" == "v$ETCD_VERSION" ]] || {
  echo "error: hack/etcd/go.mod pins go.etcd.io/etcd/server/v3 $got, expected v$ETCD_VERSION" >&2; exit 1; }

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# version_ok NAME PATH: the binary exists, runs, and reports the pinned version.
version_ok() {
  local name="$1" bin="$2" out
  [[ -x "$bin" ]] || return 1
  case "$name" in
    kubectl) out="$(timeout 30 "$bin" version --client 2>&1)" || return 1 ;;
    *)       out="$(timeout 30 "$bin" --version 2>&1)" || return 1 ;;
  esac
  case "$name" in
    etcd) [[ "$out" == *"etcd Version: $ETCD_VERSION"* ]] ;;
    *)    [[ "$out" == *"v$K8S_VERSION"* ]] ;;
  esac
}

# progress LABEL TOTAL LOG: consumes `go build -v` output; prints a line every
# 30 s with the number of packages compiled so far, passes anything that is
# not a package name (compiler errors) through, and keeps everything in LOG.
progress() {
  local label="$1" total="$2" log="$3" n=0 dl=0 start=$SECONDS last=$SECONDS line rc
  while :; do
    line=""
    if IFS= read -r -t 5 line; then rc=0; else rc=$?; fi
    if (( rc == 0 )) || { (( rc == 1 )) && [[ -n "$line" ]]; }; then
      printf '%s\n' "$line" >>"$log"
      if [[ "$line" =~ ^[A-Za-z0-9._~/+-]+$ ]]; then n=$((n + 1))
      elif [[ "$line" == "go: downloading "* ]]; then dl=$((dl + 1))
      else printf '    %s\n' "$line"; fi
    fi
    (( rc == 1 )) && break
    if (( SECONDS - last >= 30 )); then
      last=$SECONDS
      printf '  %-23s %s elapsed, %d/%d packages compiled%s\n' "$label" "$(fmt_time $((SECONDS - start)))" \
        "$n" "$total" "$( ((dl)) && echo ", $dl modules downloaded")"
    fi
  done
  printf '  %-23s %d packages compiled\n' "$label" "$n"
}

tmpfiles=()
cleanup() { local f; for f in "${tmpfiles[@]}"; do rm -f "$f"; done; }
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# build NAME MODULE_DIR PACKAGE OUT_DIR LDFLAGS
build() {
  local name="$1" moddir="$2" pkg="$3" outdir="$4" ldflags="$5"
  local out="$outdir/$name" tmp log total start rc
  if (( !force )) && version_ok "$name" "$out"; then
    echo "==> $name: up to date ($out)"
    return 0
  fi
  mkdir -p "$outdir" "$logdir"
  tmp="$outdir/.$name.tmp.$$"
  tmpfiles+=("$tmp")
  log="$logdir/$name.log"
  : >"$log"
  echo "==> building $name ($pkg)"
  total="$(cd "$moddir" && go list -deps "$pkg" 2>>"$log" | wc -l)" || total="?"
  start=$SECONDS
  set +e
  (cd "$moddir" && go build -v -ldflags "$ldflags" -o "$tmp" "$pkg") 2>&1 | progress "$name" "$total" "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if (( rc != 0 )); then
    echo "error: building $name failed (exit $rc); full log: $log" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  if ! version_ok "$name" "$tmp"; then
    echo "error: the freshly built $name does not report the expected version:" >&2
    "$tmp" --version >&2 || true
    exit 1
  fi
  mv -f "$tmp" "$out"
  echo "==> $name built in $(fmt_time $((SECONDS - start))) -> $out"
}

# The k8s build stamps the version the way upstream's hack/lib/version.sh does,
# so /version, `kubectl version` and skew checks see v$K8S_VERSION instead of
# v0.0.0-master. (-X and -s -w only affect linking: the package cache is shared.)
k8s_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=${K8S_VERSION%%.*}"
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  k8s_ldflags+=" -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

# One build at a time per cache, whoever starts it (2-core machines).
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "==> another build-controlplane.sh holds $cache/.build.lock; waiting for it"
  flock 9
fi

need=0
for n in kube-apiserver kube-controller-manager kube-scheduler kubectl; do version_ok "$n" "$k8s_bin/$n" || need=1; done
version_ok etcd "$etcd_bin/etcd" || need=1
if (( need || force )); then
  command -v go >/dev/null || { echo "error: go is not on PATH (need Go >= 1.26)" >&2; exit 1; }
  echo "==> building the control plane (Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION) with $(go version | awk '{print $3}')"
  echo "    the first build compiles ~3300 packages and takes several minutes (~11 min on 2 cores; this machine has $(nproc));"
  echo "    later builds reuse the Go build cache ($(go env GOCACHE)). Logs: $logdir"
fi
build kube-apiserver          "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-apiserver          "$k8s_bin"  "$k8s_ldflags"
build kube-controller-manager "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_bin"  "$k8s_ldflags"
build kube-scheduler          "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-scheduler          "$k8s_bin"  "$k8s_ldflags"
build kubectl                 "$root/hack/k8s"  k8s.io/kubernetes/cmd/kubectl                 "$k8s_bin"  "$k8s_ldflags"
build etcd                    "$root/hack/etcd" troupe.dev/hack/etcd                          "$etcd_bin" "-s -w"
echo "==> control plane ready: $k8s_bin, $etcd_bin"
