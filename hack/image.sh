#!/usr/bin/env bash
# Builds the troupe-scheduler image from the Dockerfile and tags it
#
#   ghcr.io/troupe-dev/troupe-scheduler:<pyproject.toml's version>
#
# the image manifests/04-deployment.yaml names. It uses the first of docker,
# podman and buildah that is installed and can build: a docker client alone
# (no engine answering `docker info`) cannot. When none can, it says what each
# lacks and exits 2.
#
# TROUPE_IMAGE_BUILDERS: the builders to try, in order (default "docker podman buildah").
# TROUPE_IMAGE: the repository to tag (default ghcr.io/troupe-dev/troupe-scheduler).
#
# usage: hack/image.sh
set -euo pipefail

cd "$(dirname "$0")/.."
builders="${TROUPE_IMAGE_BUILDERS:-docker podman buildah}"
repository="${TROUPE_IMAGE:-ghcr.io/troupe-dev/troupe-scheduler}"

say() { echo "make image: $*"; }

version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
if [[ -z "$version" ]]; then
  say "no version = \"...\" in pyproject.toml's [project]" >&2
  exit 1
fi
image="$repository:$version"
deployed=$(sed -n 's/^ *image: *\([^ ]*\).*/\1/p' manifests/04-deployment.yaml | head -n 1)
if [[ -n "$deployed" && "$deployed" != "$image" && -z "${TROUPE_IMAGE:-}" ]]; then
  say "warning: manifests/04-deployment.yaml names $deployed, not $image" >&2
fi

# The first line of a failed `<tool> info`, to say why the tool cannot build.
why_not() {
  local out rc=0
  out=$(timeout 30 "$@" 2>&1 >/dev/null) || rc=$?
  if ((rc == 0)); then
    return 0
  fi
  out=$(printf '%s\n' "$out" | grep -v '^ *$' | tail -n 1 || true)
  echo "${out:-exit status $rc, no message}"
  return 1
}

tool=""
problems=()
for candidate in $builders; do
  case "$candidate" in
    docker | podman | buildah) ;;
    *) say "unknown builder $candidate in TROUPE_IMAGE_BUILDERS (docker, podman, buildah)" >&2; exit 2 ;;
  esac
  if ! command -v "$candidate" >/dev/null 2>&1; then
    problems+=("$candidate: not installed")
    continue
  fi
  if reason=$(why_not "$candidate" info); then
    tool="$candidate"
    break
  fi
  case "$candidate" in
    docker) problems+=("docker: installed ($(command -v docker)), but no engine answers (docker info: $reason)") ;;
    *) problems+=("$candidate: installed ($(command -v "$candidate")), but cannot run ($candidate info: $reason)") ;;
  esac
done

if [[ -z "$tool" ]]; then
  {
    say "cannot build $image: no usable container builder."
    for p in "${problems[@]}"; do
      echo "  $p"
    done
    echo "Start the Docker daemon (or set DOCKER_HOST to an engine that answers), or install podman or buildah"
    echo "(Debian/Ubuntu: apt-get install podman), then run make image again."
    echo "What can be checked without a builder: make image-check (the wheel, installed in a fresh venv, run as uid 65532)."
  } >&2
  exit 2
fi

say "building $image from Dockerfile with $tool ($(command -v "$tool"))"
start=$SECONDS
case "$tool" in
  buildah) buildah bud --tag "$image" --file Dockerfile . ;;
  *) "$tool" build --tag "$image" --file Dockerfile . ;;
esac

# The tag must now name an image: a builder that exits 0 without one is a failure.
case "$tool" in
  buildah) id=$(buildah images --noheading --quiet "$image" | head -n 1) ;;
  *) id=$("$tool" image inspect --format '{{.Id}}' "$image") ;;
esac
if [[ -z "$id" ]]; then
  say "$tool build succeeded but $image names no image" >&2
  exit 1
fi
say "built $image ($id) in $((SECONDS - start))s"
say "load it where the cluster pulls from (e.g. $tool push $image, or kind load docker-image $image)"
