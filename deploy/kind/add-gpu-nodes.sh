#!/usr/bin/env bash
# Add fake GPU capacity to a kind cluster (or any cluster you may experiment on): installs
# the kwok controller, pdlab's pod stages (Running at once, Ready after the start-up delay
# from the pod annotation pdscaler.io/startup-delay, default $STARTUP_DELAY_MS ms) and N
# fake nodes with G nvidia.com/gpu each, tainted nvidia.com/gpu=present:NoSchedule.
# Pods on them run no container: they model start-up time and GPU capacity only.
#
#   kind create cluster --config deploy/kind/cluster.yaml
#   NODES=4 GPUS=8 bash deploy/kind/add-gpu-nodes.sh
#   kubectl get nodes -l type=kwok
#
# It cannot be run on the project's build machines (no Docker engine there): it is
# written from the same templates the lab uses (deploy/local/) but untested in CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
local_dir="$here/../local"
# shellcheck source=/dev/null
source "$here/../../operator/pdlab/cluster/versions.env"
NODES=${NODES:-4}
GPUS=${GPUS:-8}
PRODUCT=${PRODUCT:-NVIDIA-H100-80GB-HBM3}
STARTUP_DELAY_MS=${STARTUP_DELAY_MS:-2000}
CONTEXT=${CONTEXT:-kind-pdscaler}
k() { kubectl --context "$CONTEXT" "$@"; }

echo "== kwok v$KWOK_VERSION controller (Stage CRDs enabled) in kube-system"
k apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/v$KWOK_VERSION/kwok.yaml"
k -n kube-system rollout status deployment/kwok-controller --timeout=180s

echo "== pdlab stages (default start-up delay ${STARTUP_DELAY_MS} ms)"
sed "s/@DEFAULT_DELAY_MS@/$STARTUP_DELAY_MS/" "$local_dir/kwok-stages.yaml" | k apply -f -

echo "== $NODES fake GPU nodes x $GPUS nvidia.com/gpu ($PRODUCT)"
for i in $(seq 0 $((NODES - 1))); do
  sed -e "s/gpu-node-0/gpu-node-$i/g" \
      -e "s/NVIDIA-H100-80GB-HBM3/$PRODUCT/" \
      -e "s/nvidia.com\/gpu.count: \"8\"/nvidia.com\/gpu.count: \"$GPUS\"/" \
      -e "s/nvidia.com\/gpu: \"8\"/nvidia.com\/gpu: \"$GPUS\"/g" \
      "$local_dir/gpu-node.yaml" | k apply -f -
done
k wait --for=condition=Ready node -l type=kwok --timeout=120s
k get nodes -l type=kwok -o custom-columns='NAME:.metadata.name,GPU:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product'
