#!/usr/bin/env bash
# Build Prometheus with Kubernetes service discovery, and promtool, into the lab's cache
# (once each; a missing one is built, a present one reused).
#
# Debian's prometheus package (2.42) is built without kubernetes_sd_configs, and the lab's
# Prometheus must find pods through the API server as a cluster's does. Prometheus' Go
# module is tagged v0.<major*100+minor>.<patch> (3.13.5 -> v0.313.5); it is built from a
# wrapper module with only the Kubernetes discovery plugin (build tags remove_all_sd,
# enable_kubernetes_sd) and no embedded web UI (the HTTP API is all the lab uses).
# promtool (same version, same tags) runs the chart's alerting-rule unit tests
# (`promtool test rules`, tests/unit/test_chart_alerts.py).
# Usage: build-prometheus.sh [OUT_DIR]   (default ~/.cache/pdscaler/tools/prometheus-3.13.5)
set -euo pipefail
VERSION=${PROMETHEUS_VERSION:-3.13.5}
MAJOR=${VERSION%%.*}; REST=${VERSION#*.}; MINOR=${REST%%.*}; PATCH=${REST#*.}
MODV="v0.$((MAJOR * 100 + MINOR)).$PATCH"
OUT=${1:-${PDSCALER_CACHE:-$HOME/.cache/pdscaler}/tools/prometheus-$VERSION}
if [[ -x "$OUT/prometheus" && -x "$OUT/promtool" ]]; then
  echo "prometheus $VERSION: $OUT/prometheus, $OUT/promtool"; exit 0
fi
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; cd "$WORK"
echo "building prometheus $VERSION ($MODV) with kubernetes_sd, and promtool, into $OUT (cold: ~5-10 min each)"
go mod init local/pdlab-prometheus >/dev/null 2>&1
SRC=$(go mod download -json "github.com/prometheus/prometheus@$MODV" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
go mod edit -go="$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$SRC/go.mod")"
grep '^godebug' "$SRC/go.mod" >> go.mod || true
go get "github.com/prometheus/prometheus/cmd/prometheus@$MODV" \
  "github.com/prometheus/prometheus/cmd/promtool@$MODV"
mkdir -p "$OUT"
for tool in prometheus promtool; do
  [[ -x "$OUT/$tool" ]] && continue
  go build -p 2 -trimpath -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags="-s -w -X github.com/prometheus/common/version.Version=$VERSION" \
    -o "$OUT/$tool.tmp" "github.com/prometheus/prometheus/cmd/$tool"
  mv "$OUT/$tool.tmp" "$OUT/$tool"
  "$OUT/$tool" --version | head -1
done
