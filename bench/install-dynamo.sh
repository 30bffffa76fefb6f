#!/usr/bin/env bash
# The virtualenv NVIDIA Dynamo's planner runs in for the bench (bench/dynamo_real.py):
# ai-dynamo 1.6.1 pins pydantic <= 2.13.5, the operator's venv has a newer one, so the
# planner gets its own venv and is driven as a subprocess (bench/dynamo_worker/worker.py).
#
# ai-dynamo and ai-dynamo-runtime go in with --no-deps: their dependency aisimulate 0.13.0
# is a stub package that downloads its wheel from an index this machine cannot reach
# (bench/dynamo_worker/aisimulate_core stands in for the one piece the planner uses, on
# aiconfigurator-core 0.12.0, see its docstring). The rest are what importing the planner
# and its replay adapter needs (found by importing it), pinned as measured.
#
# Usage: bench/install-dynamo.sh [VENV]   (default ~/.cache/pdscaler/dynamo-venv;
# PYTHON picks the interpreter, default python3.11 or python3). Idempotent: a stamp
# holding this script's hash skips a venv that is already complete.
set -euo pipefail
VENV="${1:-$HOME/.cache/pdscaler/dynamo-venv}"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
HERE="$(cd "$(dirname "$0")" && pwd)"
STAMP="$VENV/.pdscaler-dynamo-stamp"
WANT="$(sha256sum "$0" | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "dynamo venv up to date: $VENV"
  exit 0
fi
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
"${PIP[@]}" --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
"${PIP[@]}" \
  "aiconfigurator-core==0.12.0" \
  "pydantic==2.13.5" "msgspec==0.23.0" "uvloop==0.23.0" "scikit-learn==1.9.1" \
  "numpy==2.4.6" "scipy==1.17.1" "pandas==3.1.1" "pyarrow==26.0.1" "PyYAML==6.0.4" \
  "packaging==26.4" "prometheus-client==0.26.0" "aiohttp==3.14.5" "kubernetes==32.0.1" \
  "plotly==7.1.0" "prometheus-api-client==0.7.2" "pmdarima==2.1.1" "filterpy==2.0.0" \
  "prophet==1.5.0"
# The import check: the planner's replay adapter and the shimmed perf model load.
PYTHONPATH="$HERE/dynamo_worker" DYN_LOG=error "$VENV/bin/python" -c '
import dynamo.planner.offline.replay_adapter, dynamo.replay.planner
from aisimulate_core.sdk import RustForwardPassPerfModel
print("dynamo planner importable")'
echo "$WANT" >"$STAMP"
