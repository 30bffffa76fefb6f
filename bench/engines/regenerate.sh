#!/usr/bin/env bash
# Re-measure the committed engines from aiconfigurator's database (the profiles extra:
# pip install -e '.[profiles]'); about 15 s each, no GPU. Writes <name>.json (the answers,
# the fit, its error, EngineParams) and <name>.profile.yaml (the PDDeployment profile at a
# 50 ms TPOT) beside this script.
set -euo pipefail
cd "$(dirname "$0")"
PDSCALER=${PDSCALER:-pdscaler}
measure() {
  local name=$1; shift
  "$PDSCALER" plan profile "$@" --tpot-ms 50 --name "$name" \
    -o "$name.profile.yaml" --engine-out "$name.json"
}
measure qwen3-8b-h100-vllm-tp1 --model Qwen/Qwen3-8B --system h100_sxm --backend vllm --tp 1
measure qwen3-32b-h200-vllm-tp2 --model Qwen/Qwen3-32B --system h200_sxm --backend vllm --tp 2
measure qwen3-30b-a3b-h200-vllm-tp1 --model Qwen/Qwen3-30B-A3B --system h200_sxm --backend vllm --tp 1
