#!/usr/bin/env bash
# Builds the upstream control-plane binaries that troupe's integration tests,
# demo and benchmarks run against, from the Go modules pinned in hack/k8s,
# hack/k8s-1.36 and hack/etcd:
#
#   $XDG_CACHE_HOME/troupe/k8s-v$K8S_VERSION/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $XDG_CACHE_HOME/troupe/k8s-v$K8S_136_VERSION/bin/kube-apiserver   (v1alpha2 Workload API tests)
#   $XDG_CACHE_HOME/troupe/k8s-v$K8S_138_VERSION/bin/{kube-apiserver,kube-scheduler}   (1.38 beta tests;
#       built with Go $GO_138_TOOLCHAIN, which the go command fetches from the module proxy)
#   $XDG_CACHE_HOME/troupe/etcd-v$ETCD_VERSION/bin/etcd
#
# ($XDG_CACHE_HOME defaults to ~/.cache; TROUPE_K8S_BIN_DIR / TROUPE_K8S_136_BIN_DIR /
# TROUPE_ETCD_BIN_DIR override the directories.) A binary that already exists and
# reports the expected version is skipped. Every binary is built under a temporary
# name and renamed into place, so an interrupted build never leaves a broken binary.
#
# usage: hack/build-controlplane.sh [--force]
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
# Only kube-apiserver of this release is built (it serves scheduling.k8s.io/v1alpha2,
# which 1.37 dropped); kubectl, etcd and the rest stay the ones above.
K8S_136_VERSION="${K8S_136_VERSION:-1.36.3}"
# kube-apiserver and kube-scheduler of the next release's beta (the 1.38 tests:
# CompositePodGroups at v1beta1). It needs Go >= 1.27, newer than this
# machine's: the go command fetches that toolchain (GOTOOLCHAIN, ~76 MB) for
# these two builds only.
K8S_138_VERSION="${K8S_138_VERSION:-1.38.0-beta.0}"
GO_138_TOOLCHAIN="${GO_138_TOOLCHAIN:-go1.27.3}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/troupe"
k8s_bin="${TROUPE_K8S_BIN_DIR:-$cache/k8s-v$K8S_VERSION/bin}"
k8s_136_bin="${TROUPE_K8S_136_BIN_DIR:-$cache/k8s-v$K8S_136_VERSION/bin}"
k8s_138_bin="${TROUPE_K8S_138_BIN_DIR:-$cache/k8s-v$K8S_138_VERSION/bin}"
etcd_bin="${TROUPE_ETCD_BIN_DIR:-$cache/etcd-v$ETCD_VERSION/bin}"
logdir="$cache/build-logs"

export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false"

# The versions in the Makefile and the pinned go.mod files must agree.
modver() { awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$1" | head -n1; }
got="$(modver "$root/hack/k8s/go.mod" k8s.io/kubernetes)"
[[ "$got" == "v$K8S_VERSION" ]] || {
  echo "error: hack/k8s/go.mod pins k8s.io/kubernetes $got, expected v$K8S_VERSION (run hack/gen-k8s-gomod.sh $K8S_VERSION)" >&2; exit 1; }
got="$(modver "$root/hack/k8s-1.36/go.mod" k8s.io/kubernetes)"
[[ "$got" == "v$K8S_136_VERSION" ]] || {
  echo "error: hack/k8s-1.36/go.mod pins k8s.io/kubernetes $got, expected v$K8S_136_VERSION" \
    "(run hack/gen-k8s-gomod.sh $K8S_136_VERSION hack/k8s-1.36 kube-apiserver)" >&2; exit 1; }
got="$(modver "$root/hack/k8s-1.38/go.mod" k8s.io/kubernetes)"
[[ "$got" == "v$K8S_138_VERSION" ]] || {
  echo "error: hack/k8s-1.38/go.mod pins k8s.io/kubernetes $got, expected v$K8S_138_VERSION" \
    "(run GOTOOLCHAIN=$GO_138_TOOLCHAIN hack/gen-k8s-gomod.sh $K8S_138_VERSION hack/k8s-1.38 kube-apiserver kube-scheduler)" >&2
  exit 1
}
got="$(modver "$root/hack/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ "$got" == "v$ETCD_VERSION" ]] || {
  echo "error: hack/etcd/go.mod pins go.etcd.io/etcd/server/v3 $got, expected v$ETCD_VERSION" >&2; exit 1; }

# fmt_time, progress
. "$(dirname "${BASH_SOURCE[0]}")/lib-gobuild.sh"

# version_ok NAME PATH [K8S_VERSION]: the binary exists, runs, and reports the
# pinned version (a Kubernetes binary: K8S_VERSION, $K8S_VERSION by default).
version_ok() {
  local name="$1" bin="$2" kver="${3:-$K8S_VERSION}" out
  [[ -x "$bin" ]] || return 1
  case "$name" in
    kubectl) out="$(timeout 30 "$bin" version --client 2>&1)" || return 1 ;;
    *)       out="$(timeout 30 "$bin" --version 2>&1)" || return 1 ;;
  esac
  case "$name" in
    etcd) [[ "$out" == *"etcd Version: $ETCD_VERSION"* ]] ;;
    *)    [[ "$out" == *"v$kver"* ]] ;;
  esac
}

tmpfiles=()
cleanup() { local f; for f in "${tmpfiles[@]}"; do rm -f "$f"; done; }
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# build NAME MODULE_DIR PACKAGE OUT_DIR LDFLAGS [K8S_VERSION [LABEL]]
# (K8S_VERSION: the version the binary must report, $K8S_VERSION by default;
# LABEL: the name in messages, log and temporary file, NAME by default.)
build() {
  local name="$1" moddir="$2" pkg="$3" outdir="$4" ldflags="$5" kver="${6:-$K8S_VERSION}" label="${7:-$1}"
  local out="$outdir/$name" tmp log total start rc
  if (( !force )) && version_ok "$name" "$out" "$kver"; then
    echo "==> $label: up to date ($out)"
    return 0
  fi
  mkdir -p "$outdir" "$logdir"
  tmp="$outdir/.$name.tmp.$$"
  tmpfiles+=("$tmp")
  log="$logdir/$label.log"
  : >"$log"
  echo "==> building $label ($pkg)"
  total="$(cd "$moddir" && go list -deps "$pkg" 2>>"$log" | wc -l)" || total="?"
  start=$SECONDS
  set +e
  (cd "$moddir" && go build -v -ldflags "$ldflags" -o "$tmp" "$pkg") 2>&1 | progress "$label" "$log" "$total"
  rc=${PIPESTATUS[0]}
  set -e
  if (( rc != 0 )); then
    echo "error: building $label failed (exit $rc); full log: $log" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  if ! version_ok "$name" "$tmp" "$kver"; then
    echo "error: the freshly built $label does not report the expected version:" >&2
    "$tmp" --version >&2 || true
    exit 1
  fi
  mv -f "$tmp" "$out"
  echo "==> $label built in $(fmt_time $((SECONDS - start))) -> $out"
}

# The k8s build stamps the version the way upstream's hack/lib/version.sh does,
# so /version, `kubectl version` and skew checks see v$K8S_VERSION instead of
# v0.0.0-master. (-X and -s -w only affect linking: the package cache is shared.)
# k8s_ldflags_for VERSION
k8s_ldflags_for() {
  local v="$1" p minor flags="-s -w"
  minor="${v#*.}"; minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=v$v -X $p.gitMajor=${v%%.*}"
    flags+=" -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  printf '%s' "$flags"
}
k8s_ldflags="$(k8s_ldflags_for "$K8S_VERSION")"
k8s_136_ldflags="$(k8s_ldflags_for "$K8S_136_VERSION")"
k8s_138_ldflags="$(k8s_ldflags_for "$K8S_138_VERSION")"

# One build at a time per cache, whoever starts it (2-core machines).
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "==> another build-controlplane.sh holds $cache/.build.lock; waiting for it"
  flock 9
fi

need=0 need_136=0 need_138=0
for n in kube-apiserver kube-controller-manager kube-scheduler kubectl; do version_ok "$n" "$k8s_bin/$n" || need=1; done
version_ok etcd "$etcd_bin/etcd" || need=1
version_ok kube-apiserver "$k8s_136_bin/kube-apiserver" "$K8S_136_VERSION" || need_136=1
for n in kube-apiserver kube-scheduler; do version_ok "$n" "$k8s_138_bin/$n" "$K8S_138_VERSION" || need_138=1; done
if (( need || need_136 || need_138 || force )); then
  command -v go >/dev/null || { echo "error: go is not on PATH (need Go >= 1.26)" >&2; exit 1; }
fi
if (( need || force )); then
  echo "==> building the control plane (Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION) with $(go version | awk '{print $3}')"
  echo "    the first build compiles ~3300 packages and takes several minutes (~11 min on 2 cores; this machine has $(nproc));"
  echo "    later builds reuse the Go build cache ($(go env GOCACHE)). Logs: $logdir"
fi
if (( need_136 || force )); then
  echo "==> then kube-apiserver v$K8S_136_VERSION (for the scheduling.k8s.io/v1alpha2 tests): ~1700 more packages"
  echo "    (~3 min on 2 cores; what it shares with v$K8S_VERSION comes from the build cache)"
fi
if (( need_138 || force )); then
  echo "==> then kube-apiserver and kube-scheduler v$K8S_138_VERSION with Go $GO_138_TOOLCHAIN (fetched from the"
  echo "    module proxy once): a new compiler shares no build cache, so this compiles again (see the timings below)"
fi
build kube-apiserver          "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-apiserver          "$k8s_bin"  "$k8s_ldflags"
build kube-controller-manager "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_bin"  "$k8s_ldflags"
build kube-scheduler          "$root/hack/k8s"  k8s.io/kubernetes/cmd/kube-scheduler          "$k8s_bin"  "$k8s_ldflags"
build kubectl                 "$root/hack/k8s"  k8s.io/kubernetes/cmd/kubectl                 "$k8s_bin"  "$k8s_ldflags"
build etcd                    "$root/hack/etcd" troupe.dev/hack/etcd                          "$etcd_bin" "-s -w"
build kube-apiserver     "$root/hack/k8s-1.36" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_136_bin" "$k8s_136_ldflags" \
  "$K8S_136_VERSION" "kube-apiserver-v$K8S_136_VERSION"
GOTOOLCHAIN="$GO_138_TOOLCHAIN" build kube-apiserver "$root/hack/k8s-1.38" k8s.io/kubernetes/cmd/kube-apiserver \
  "$k8s_138_bin" "$k8s_138_ldflags" "$K8S_138_VERSION" "kube-apiserver-v$K8S_138_VERSION"
GOTOOLCHAIN="$GO_138_TOOLCHAIN" build kube-scheduler "$root/hack/k8s-1.38" k8s.io/kubernetes/cmd/kube-scheduler \
  "$k8s_138_bin" "$k8s_138_ldflags" "$K8S_138_VERSION" "kube-scheduler-v$K8S_138_VERSION"
echo "==> control plane ready: $k8s_bin, $etcd_bin"
echo "    kube-apiserver v$K8S_136_VERSION: $k8s_136_bin"
echo "    kube-apiserver, kube-scheduler v$K8S_138_VERSION: $k8s_138_bin"
