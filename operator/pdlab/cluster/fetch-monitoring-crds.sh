#!/usr/bin/env bash
# The prometheus-operator CRDs the chart's monitoring objects need (ServiceMonitor,
# PodMonitor, PrometheusRule; the CRDs alone, no operator), copied byte for byte from the
# prometheus-operator Go module's example/prometheus-operator-crd/ at the version pinned
# in versions.env (PROMETHEUS_OPERATOR_VERSION) into the lab's cache, once:
#   ~/.cache/pdscaler/tools/prometheus-operator-crds-<version>/monitoring.coreos.com_*.yaml
# A VERSION file there records where they came from. tests/lab/test_lab_chart_monitoring.py
# installs them into the lab's API server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
V=$PROMETHEUS_OPERATOR_VERSION
OUT=${1:-${PDSCALER_CACHE:-$HOME/.cache/pdscaler}/tools/prometheus-operator-crds-$V}
FILES="monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml"
have=1; for f in $FILES; do [[ -s "$OUT/$f" ]] || have=0; done
if [[ $have == 1 ]]; then echo "prometheus-operator CRDs $V: $OUT"; exit 0; fi
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod PATH="$PATH:/usr/local/go/bin"
SRC=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@v$V" \
  | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -n "$SRC" ]] || { echo "go mod download prometheus-operator v$V failed" >&2; exit 1; }
mkdir -p "$OUT"
for f in $FILES; do install -m 644 "$SRC/example/prometheus-operator-crd/$f" "$OUT/$f"; done
echo "github.com/prometheus-operator/prometheus-operator v$V example/prometheus-operator-crd/" > "$OUT/VERSION"
echo "prometheus-operator CRDs $V: $OUT"
