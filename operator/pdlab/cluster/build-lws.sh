#!/usr/bin/env bash
# Build the LeaderWorkerSet controller-manager (sigs.k8s.io/lws, the version pinned in
# versions.env) from the Go module's source, and copy its CRD, into the lab's cache, once:
#   ~/.cache/pdscaler/tools/lws-<version>/lws-controller-manager
#   ~/.cache/pdscaler/tools/lws-<version>/leaderworkerset.x-k8s.io_leaderworkersets.yaml
# The binary is the module's cmd/ package (the manager the LWS image runs) built with the
# module's own go.mod/go.sum; the CRD is config/crd/bases/ byte for byte. pdlab runs the
# manager against the lab's API server with its webhooks served over the lab's PKI
# (pdlab.cluster.lws). Cold: ~3-5 min on 2 cores (module downloads + build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
V=$LWS_VERSION
OUT=${1:-${PDSCALER_CACHE:-$HOME/.cache/pdscaler}/tools/lws-$V}
CRD=leaderworkerset.x-k8s.io_leaderworkersets.yaml
if [[ -x "$OUT/lws-controller-manager" && -s "$OUT/$CRD" ]]; then
  echo "lws $V: $OUT"; exit 0
fi
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 PATH="$PATH:/usr/local/go/bin"
start=$(date +%s)
SRC=$(go mod download -json "sigs.k8s.io/lws@v$V" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -n "$SRC" ]] || { echo "go mod download sigs.k8s.io/lws v$V failed" >&2; exit 1; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cp -r "$SRC/." "$WORK/"; chmod -R u+w "$WORK"; cd "$WORK"
echo "building lws $V controller-manager from source into $OUT (cold: ~3-5 min)"
mkdir -p "$OUT"
go build -p 2 -trimpath \
  -ldflags="-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=v$V" \
  -o "$OUT/lws-controller-manager.tmp" ./cmd
mv "$OUT/lws-controller-manager.tmp" "$OUT/lws-controller-manager"
install -m 644 "config/crd/bases/$CRD" "$OUT/$CRD"
echo "sigs.k8s.io/lws v$V cmd/ + config/crd/bases/" > "$OUT/VERSION"
echo "lws $V: $OUT (built in $(( $(date +%s) - start ))s)"
