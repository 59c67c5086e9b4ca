#!/usr/bin/env bash
# Builds the real operators that troupe's integration tests run (tests/integration/
# test_operators.py), from their Go modules, the way hack/build-controlplane.sh
# builds the control plane:
#
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/bin/ray-operator
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/crds/ray.io_{rayclusters,rayjobs,rayservices}.yaml
#   $XDG_CACHE_HOME/troupe/kuberay-v$KUBERAY_VERSION/crds/scheduling.x-k8s.io_podgroups.yaml
#   $XDG_CACHE_HOME/troupe/training-operator-v$TRAINING_OPERATOR_VERSION/bin/training-operator.v1
#   $XDG_CACHE_HOME/troupe/training-operator-v$TRAINING_OPERATOR_VERSION/crds/kubeflow.org_pytorchjobs.yaml
#   $XDG_CACHE_HOME/troupe/kueue-v$KUEUE_VERSION/bin/kueue
#   $XDG_CACHE_HOME/troupe/kueue-v$KUEUE_VERSION/crds/kueue.x-k8s.io_*.yaml (11 CRDs)
#   $XDG_CACHE_HOME/troupe/kueue-v$KUEUE_VERSION/webhook/manifests.yaml
#   $XDG_CACHE_HOME/troupe/karpenter-v$KARPENTER_VERSION/bin/karpenter-kwok
#   $XDG_CACHE_HOME/troupe/karpenter-v$KARPENTER_VERSION/crds/karpenter.sh_{nodepools,nodeclaims,nodeoverlays}.yaml
#   $XDG_CACHE_HOME/troupe/karpenter-v$KARPENTER_VERSION/crds/karpenter.kwok.sh_kwoknodeclasses.yaml
#   $XDG_CACHE_HOME/troupe/karpenter-v$KARPENTER_VERSION/crds/autoscaling.x-k8s.io_capacitybuffers.yaml
#   $XDG_CACHE_HOME/troupe/kwok-v$KWOK_VERSION/bin/kwok
#   $XDG_CACHE_HOME/troupe/kwok-v$KWOK_VERSION/stages/{node-initialize,node-heartbeat-with-lease}.yaml
#   $XDG_CACHE_HOME/troupe/kwok-v$KWOK_VERSION/stages/pod-{ready,complete,delete}.yaml
#
# ray-operator is KubeRay's operator, `go install github.com/ray-project/kuberay/
# ray-operator@v$KUBERAY_VERSION`; training-operator.v1 is Kubeflow's training
# operator (PyTorchJob, TFJob, ...), `go install github.com/kubeflow/training-
# operator/cmd/training-operator.v1@v$TRAINING_OPERATOR_VERSION`; kueue is
# Kubernetes' Kueue job-queueing manager, `go install sigs.k8s.io/kueue/cmd/
# kueue@v$KUEUE_VERSION`. Each builds with its module's own go.mod and go.sum
# (the versions its release was tested with). The CRDs come from the module cache
# that build fills: KubeRay's three (its manager starts the RayCluster, RayJob and
# RayService controllers, and each waits for its kind), the scheduler-plugins
# PodGroup CRD (scheduling.x-k8s.io/v1alpha1) of the sigs.k8s.io/scheduler-plugins
# version KubeRay's go.mod requires (the PodGroups both operators write), the
# training operator's PyTorchJob CRD, and every CRD of Kueue's
# config/components/crd/bases/ (its manager exits when a kind it watches is
# missing; the workloads CRD is ~1.4 MB: apply it server-side). Kueue's webhook
# manifest (config/components/webhook/manifests.yaml: the paths and rules the
# tests' own webhook configurations are derived from) is copied too.
#
# karpenter-kwok is Karpenter's controller with its kwok cloud provider (NodeClaims
# become plain Node objects; tests/integration/karpenter.py), `go install
# sigs.k8s.io/karpenter/kwok@v$KARPENTER_VERSION` renamed; v1.15.0's go.mod says
# `go 1.26.9`, so that one build runs with GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN (a
# toolchain the Go module proxy serves; KARPENTER_GOTOOLCHAIN overrides it). Its
# CRDs: karpenter.sh's NodePool, NodeClaim and NodeOverlay and the autoscaling.x-k8s.io
# CapacityBuffer as the kwok chart ships them (kwok/charts/crds: NodePool and
# NodeClaim there also reject labels of the karpenter.kwok.sh domain; the CapacityBuffer
# CRD is pkg/apis/crds' own), and the KWOKNodeClass CRD (kwok/apis/crds).
# kwok is sigs.k8s.io/kwok's controller (`go install sigs.k8s.io/kwok/cmd/kwok@
# v$KWOK_VERSION`), which keeps fake Nodes Ready (their Lease renewed) and the pods
# bound to them Running; outside kwokctl it has no stages of its own (it refuses to
# start without one), so the module's "fast" ones are copied
# (kustomize/stage/{node/fast,node/heartbeat-with-lease,pod/fast}).
#
# ($XDG_CACHE_HOME defaults to ~/.cache; TROUPE_KUBERAY_DIR,
# TROUPE_TRAINING_OPERATOR_DIR, TROUPE_KUEUE_DIR, TROUPE_KARPENTER_DIR and
# TROUPE_KWOK_DIR override the directories.)
# Done once: a stamp records what was built, and a later run with the same stamp
# and files does nothing. A binary is built under a temporary name and renamed
# into place, so an interrupted build never leaves a broken one.
#
# usage: hack/build-operators.sh [--force]
set -euo pipefail

KUBERAY_VERSION="${KUBERAY_VERSION:-1.5.0}"
KUBERAY_MODULE="github.com/ray-project/kuberay/ray-operator"
TRAINING_OPERATOR_VERSION="${TRAINING_OPERATOR_VERSION:-1.8.1}"
TRAINING_OPERATOR_MODULE="github.com/kubeflow/training-operator"
KUEUE_VERSION="${KUEUE_VERSION:-0.17.0}"
KUEUE_MODULE="sigs.k8s.io/kueue"
SCHEDULER_PLUGINS_MODULE="sigs.k8s.io/scheduler-plugins"
KARPENTER_VERSION="${KARPENTER_VERSION:-1.15.0}"
KARPENTER_MODULE="sigs.k8s.io/karpenter"
KARPENTER_GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.26.9}"
KWOK_VERSION="${KWOK_VERSION:-0.8.0}"
KWOK_MODULE="sigs.k8s.io/kwok"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

cache="${XDG_CACHE_HOME:-$HOME/.cache}/troupe"
logdir="$cache/build-logs"

# No toolchain download behind our back: the Go on PATH builds them (their go.mod
# files ask for go 1.24.0, 1.22, 1.25.0 and, kwok's, 1.26.0). A caller may still
# export GOTOOLCHAIN. The one exception is Karpenter (operator_vars: toolchain).
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

# fmt_time, progress
. "$(dirname "${BASH_SOURCE[0]}")/lib-gobuild.sh"

# What each operator is: its module, version, main package, binary (the name it is
# installed under: go install names it after the package's directory, `installed`),
# directory, CRD files (in crds/) and other files (paths in the directory) built_ok
# checks, the function that copies them out of the module cache, extra -ldflags, and
# the GOTOOLCHAIN its build needs (empty: the exported one).
operator_vars() {  # operator_vars NAME: sets module version package binary installed dir crd_files other_files copy_crds ldflags toolchain
  ldflags="" toolchain="" installed="" other_files=()
  case "$1" in
    ray-operator)
      module="$KUBERAY_MODULE" version="$KUBERAY_VERSION" package="$KUBERAY_MODULE" binary=ray-operator
      dir="${TROUPE_KUBERAY_DIR:-$cache/kuberay-v$KUBERAY_VERSION}"
      crd_files=(ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml scheduling.x-k8s.io_podgroups.yaml)
      copy_crds=kuberay_crds packages="~900" minutes="~2" ;;
    training-operator)
      module="$TRAINING_OPERATOR_MODULE" version="$TRAINING_OPERATOR_VERSION"
      package="$TRAINING_OPERATOR_MODULE/cmd/training-operator.v1" binary=training-operator.v1
      dir="${TROUPE_TRAINING_OPERATOR_DIR:-$cache/training-operator-v$TRAINING_OPERATOR_VERSION}"
      crd_files=(kubeflow.org_pytorchjobs.yaml)
      copy_crds=training_operator_crds packages="~600" minutes="~2" ;;
    kueue)
      module="$KUEUE_MODULE" version="$KUEUE_VERSION" package="$KUEUE_MODULE/cmd/kueue" binary=kueue
      dir="${TROUPE_KUEUE_DIR:-$cache/kueue-v$KUEUE_VERSION}"
      crd_files=(kueue.x-k8s.io_{admissionchecks,clusterqueues,cohorts,localqueues,multikueueclusters,multikueueconfigs,provisioningrequestconfigs,resourceflavors,topologies,workloadpriorityclasses,workloads}.yaml)
      # (its log line "Initializing" and its user agent show the version, as in a release build)
      ldflags="-X $KUEUE_MODULE/pkg/version.GitVersion=v$KUEUE_VERSION"
      copy_crds=kueue_crds packages="~1400" minutes="~5" ;;
    karpenter)
      module="$KARPENTER_MODULE" version="$KARPENTER_VERSION" package="$KARPENTER_MODULE/kwok"
      binary=karpenter-kwok installed=kwok toolchain="$KARPENTER_GOTOOLCHAIN"
      dir="${TROUPE_KARPENTER_DIR:-$cache/karpenter-v$KARPENTER_VERSION}"
      crd_files=(karpenter.sh_nodepools.yaml karpenter.sh_nodeclaims.yaml karpenter.sh_nodeoverlays.yaml
                 karpenter.kwok.sh_kwoknodeclasses.yaml autoscaling.x-k8s.io_capacitybuffers.yaml)
      # (build info and the build_info metric's version label, as in a release build)
      ldflags="-X $KARPENTER_MODULE/pkg/operator.Version=v$KARPENTER_VERSION"
      copy_crds=karpenter_crds packages="~1000" minutes="~2" ;;
    kwok)
      module="$KWOK_MODULE" version="$KWOK_VERSION" package="$KWOK_MODULE/cmd/kwok" binary=kwok
      dir="${TROUPE_KWOK_DIR:-$cache/kwok-v$KWOK_VERSION}"
      crd_files=()
      other_files=(stages/node-initialize.yaml stages/node-heartbeat-with-lease.yaml
                   stages/pod-ready.yaml stages/pod-complete.yaml stages/pod-delete.yaml)
      # (its version is in its source: pkg/consts.Version)
      copy_crds=kwok_stages packages="~1000" minutes="~2" ;;
  esac
}

# built_ok NAME: the binary runs, carries the pinned module version in its build
# info, every CRD is there, and the stamp says this version.
built_ok() {
  local f
  operator_vars "$1"
  [[ -x "$dir/bin/$binary" && -f "$dir/.built" ]] || return 1
  [[ "$(head -n1 "$dir/.built")" == "$module@v$version" ]] || return 1
  for f in "${crd_files[@]}"; do [[ -s "$dir/crds/$f" ]] || return 1; done
  for f in "${other_files[@]}"; do [[ -s "$dir/$f" ]] || return 1; done
  go version -m "$dir/bin/$binary" 2>/dev/null | awk -v m="$module" -v v="v$version" \
    '$1 == "mod" && $2 == m && $3 == v {ok = 1} END {exit !ok}'
}

moddir() {  # moddir MODULE VERSION -> the module's directory in the module cache
  local out
  # (with the build's toolchain: a module whose go.mod asks for a newer Go is an error otherwise)
  out="$(GOTOOLCHAIN="${toolchain:-$GOTOOLCHAIN}" go mod download -json "$1@$2" 2>>"$log")" || {
    printf '%s\n' "$out" >>"$log"
    echo "error: go mod download $1@$2 failed; full log: $log" >&2; exit 1; }
  printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}
copy_crd() {  # copy_crd SRC NAME [SUBDIR]: into $dir/${SUBDIR:-crds}/ (the cache is read-only: no mode bits copied)
  local to="$dir/${3:-crds}"
  [[ -s "$1" ]] || { echo "error: $1 not found in the module cache" >&2; exit 1; }
  mkdir -p "$to"
  cp "$1" "$to/.$2.tmp" && chmod 644 "$to/.$2.tmp" && mv -f "$to/.$2.tmp" "$to/$2"
}
kuberay_crds() {  # kuberay_crds MODULE_DIR: KubeRay's CRDs and the scheduler-plugins version it requires
  local f sp_version sp_dir
  for f in ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml; do
    copy_crd "$1/config/crd/bases/$f" "$f"
  done
  # (a `require` block line or a single-line require)
  sp_version="$(awk -v m="$SCHEDULER_PLUGINS_MODULE" '($1 == m && $2 ~ /^v/) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' \
    "$1/go.mod")"
  [[ -n "$sp_version" ]] || { echo "error: $1/go.mod does not require $SCHEDULER_PLUGINS_MODULE" >&2; exit 1; }
  sp_dir="$(moddir "$SCHEDULER_PLUGINS_MODULE" "$sp_version")"
  copy_crd "$sp_dir/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" scheduling.x-k8s.io_podgroups.yaml
  stamp_extra="$SCHEDULER_PLUGINS_MODULE@$sp_version"
}
training_operator_crds() {  # training_operator_crds MODULE_DIR
  copy_crd "$1/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" kubeflow.org_pytorchjobs.yaml
  stamp_extra=""
}
kueue_crds() {  # kueue_crds MODULE_DIR: every CRD of config/components/crd/bases/, and the webhook manifest
  local f bases="$1/config/components/crd/bases" webhook="$1/config/components/webhook/manifests.yaml"
  for f in "$bases"/*.yaml; do
    [[ -e "$f" ]] || { echo "error: no CRDs in $bases" >&2; exit 1; }
    copy_crd "$f" "$(basename "$f")"
  done
  for f in "${crd_files[@]}"; do  # (what built_ok checks: a Kueue version that drops one needs crd_files changed)
    [[ -s "$dir/crds/$f" ]] || { echo "error: $bases has no $f" >&2; exit 1; }
  done
  if [[ -s "$webhook" ]]; then
    mkdir -p "$dir/webhook"
    cp "$webhook" "$dir/webhook/.manifests.yaml.tmp" && chmod 644 "$dir/webhook/.manifests.yaml.tmp" &&
      mv -f "$dir/webhook/.manifests.yaml.tmp" "$dir/webhook/manifests.yaml"
  else
    echo "    warning: $webhook not in the module; no $dir/webhook/manifests.yaml" >&2
  fi
  stamp_extra=""
}

karpenter_crds() {  # karpenter_crds MODULE_DIR: the kwok chart's CRDs and the KWOKNodeClass CRD
  local f
  for f in karpenter.sh_nodepools.yaml karpenter.sh_nodeclaims.yaml karpenter.sh_nodeoverlays.yaml; do
    copy_crd "$1/kwok/charts/crds/$f" "$f"
  done
  copy_crd "$1/pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml" autoscaling.x-k8s.io_capacitybuffers.yaml
  copy_crd "$1/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" karpenter.kwok.sh_kwoknodeclasses.yaml
  stamp_extra=""
}
kwok_stages() {  # kwok_stages MODULE_DIR: the Stages of kwok's kustomize/stage/fast (node/fast, node/heartbeat-with-lease, pod/fast)
  local f stage="$1/kustomize/stage"
  copy_crd "$stage/node/fast/node-initialize.yaml" node-initialize.yaml stages
  copy_crd "$stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" node-heartbeat-with-lease.yaml stages
  for f in pod-ready.yaml pod-complete.yaml pod-delete.yaml; do
    copy_crd "$stage/pod/fast/$f" "$f" stages
  done
  stamp_extra=""
}

build() {  # build NAME
  local name="$1" start rc tmpdir goversion mdir
  operator_vars "$name"
  goversion="$(GOTOOLCHAIN="${toolchain:-$GOTOOLCHAIN}" go version | awk '{print $3}')" || {
    echo "error: cannot run Go toolchain ${toolchain:-$GOTOOLCHAIN} (a GOTOOLCHAIN other than local comes from" \
      "the Go module proxy, GOPROXY=$(go env GOPROXY), the first time)" >&2
    exit 1; }
  log="$logdir/$binary-v$version.log"
  tmpdir="$(mktemp -d "${TMPDIR:-/tmp}/troupe-$name-build.XXXXXX")"
  mkdir -p "$dir/bin" "$logdir"  # (copy_crd makes crds/ and the like)
  rm -f "$dir/.built"
  : >"$log"
  echo "==> building $binary v$version ($package@v$version) with $goversion"
  echo "    $packages packages, $minutes min on 2 cores the first time; log: $log"
  start=$SECONDS
  set +e
  # go install PACKAGE@VERSION builds with the module's own go.mod/go.sum (neither
  # has replace directives); the downloads are checked against the checksum database.
  # (GOTOOLCHAIN set for this command only: the others keep the exported one)
  GOTOOLCHAIN="${toolchain:-$GOTOOLCHAIN}" GOBIN="$tmpdir" \
    go install -v -trimpath -ldflags "-s -w${ldflags:+ $ldflags}" "$package@v$version" 2>&1 | progress "$binary" "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [[ -z "$installed" || ! -x "$tmpdir/$installed" ]] || mv -f "$tmpdir/$installed" "$tmpdir/$binary"
  if (( rc != 0 )) || [[ ! -x "$tmpdir/$binary" ]]; then
    rm -rf "$tmpdir"
    echo "error: building $binary v$version failed (exit $rc); full log: $log" >&2
    tail -n 30 "$log" >&2
    echo "    it needs the Go module proxy (GOPROXY=$(go env GOPROXY)) for the first build;" \
      "run 'make operators' again once it is reachable" >&2
    exit 1
  fi
  mdir="$(moddir "$module" "v$version")" || { rm -rf "$tmpdir"; exit 1; }
  "$copy_crds" "$mdir"
  mv -f "$tmpdir/$binary" "$dir/bin/$binary"
  rm -rf "$tmpdir"
  { echo "$module@v$version"; [[ -z "$stamp_extra" ]] || echo "$stamp_extra"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $goversion"; } >"$dir/.built"
  built_ok "$name" || { echo "error: the freshly built $dir/bin/$binary does not carry $module v$version in its build info" >&2; exit 1; }
  echo "==> $binary v$version built in $(fmt_time $((SECONDS - start))) ($(du -h "$dir/bin/$binary" | cut -f1)) -> $dir/bin/$binary"
  (( ${#crd_files[@]} == 0 )) || echo "    CRDs (${crd_files[*]}) -> $dir/crds"
  (( ${#other_files[@]} == 0 )) || echo "    ${other_files[*]} -> $dir"
  [[ ! -s "$dir/webhook/manifests.yaml" ]] || echo "    webhook manifest -> $dir/webhook/manifests.yaml"
}

command -v go >/dev/null || {
  echo "error: go is not on PATH (need Go >= 1.24 to build KubeRay v$KUBERAY_VERSION, >= 1.25 for Kueue" \
    "v$KUEUE_VERSION, >= 1.26 for kwok v$KWOK_VERSION (Karpenter v$KARPENTER_VERSION: $KARPENTER_GOTOOLCHAIN, fetched" \
    "through GOTOOLCHAIN); the control plane needs >= 1.26)" >&2
  exit 1; }

up_to_date() {  # up_to_date NAME: built already (and not --force); says so
  (( !force )) && built_ok "$1" && echo "==> $binary v$version: up to date ($dir)"
}

todo=()
for name in ray-operator training-operator kueue karpenter kwok; do
  up_to_date "$name" || todo+=("$name")
done
(( ${#todo[@]} )) || exit 0

# One build at a time per cache, shared with hack/build-controlplane.sh (2-core machines).
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "==> another build holds $cache/.build.lock; waiting for it"
  flock 9
fi
trap 'echo "interrupted" >&2; exit 130' INT TERM
for name in "${todo[@]}"; do
  up_to_date "$name" || build "$name"  # (built meanwhile, by the holder of the lock)
done
