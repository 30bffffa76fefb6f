#!/usr/bin/env bash
# Build (and with PUSH=1 push) the two images a cluster needs, neither of which is
# published: the operator (./Dockerfile) and the P/D router every cell runs
# (deploy/router/Dockerfile: vllm-router from PyPI, the vllm preset's default). `make
# images` runs this script.
#
#   REGISTRY=registry.example.com/you PUSH=1 bash deploy/router/build-images.sh
#     -> registry.example.com/you/pdscaler:<chart appVersion>  (set image.repository)
#        registry.example.com/you/vllm-router:0.1.17           (set spec.router.image)
#
# The builder: $BUILDER if set, else the first of podman, buildah, docker that works here
# (podman and buildah need no daemon; docker needs a running engine). DRY_RUN=1 only
# prints the commands. With no working builder it prints them too, and exits 2: run them
# where a builder works (this project's own machines have none, and cannot pull the
# python:3.11-slim base image either).
set -euo pipefail
cd "$(dirname "$0")/../.."
REGISTRY=${REGISTRY:?set REGISTRY, e.g. REGISTRY=registry.example.com/you}
REGISTRY=${REGISTRY%/}
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/pdscaler/Chart.yaml)
ROUTER_VERSION=$(sed -n 's/^ARG ROUTER_PACKAGE=vllm-router==\(.*\)$/\1/p' deploy/router/Dockerfile)
OPERATOR="$REGISTRY/pdscaler:$VERSION"
ROUTER="$REGISTRY/vllm-router:$ROUTER_VERSION"

works() {
  case "$1" in
    podman) podman info >/dev/null 2>&1 ;;
    buildah) buildah version >/dev/null 2>&1 ;;
    docker) docker info >/dev/null 2>&1 ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

builder=${BUILDER:-}
if [ -z "$builder" ] && [ "${DRY_RUN:-0}" != 1 ]; then
  for b in podman buildah docker; do
    if works "$b"; then builder=$b; break; fi
  done
fi
tool=${builder:-docker}
build=(build)
[ "$tool" = buildah ] && build=(bud)
commands=(
  "$tool ${build[*]} -t $OPERATOR ."
  "$tool ${build[*]} -t $ROUTER deploy/router"
)
if [ "${PUSH:-0}" = 1 ]; then
  commands+=("$tool push $OPERATOR" "$tool push $ROUTER")
fi

if [ "${DRY_RUN:-0}" = 1 ] || [ -z "$builder" ]; then
  [ -z "$builder" ] && [ "${DRY_RUN:-0}" != 1 ] &&
    echo "make images: no working container builder here (podman, buildah, or docker with a running engine); run:" >&2
  printf '%s\n' "${commands[@]}"
  [ "${DRY_RUN:-0}" = 1 ] && exit 0
  exit 2
fi
for c in "${commands[@]}"; do
  echo "+ $c"
  $c
done
echo "images: $OPERATOR (chart: --set image.repository=$REGISTRY/pdscaler), $ROUTER (spec.router.image)"
