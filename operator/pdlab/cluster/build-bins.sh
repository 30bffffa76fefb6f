#!/usr/bin/env bash
# Build the lab's control-plane binaries from the Go module proxy, once, into a cache
# outside the repository. Rebuilds only what is missing. Versions are pinned in
# operator/pdlab/cluster/versions.env (the one place they live).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
CACHE=${PDSCALER_CACHE:-$HOME/.cache/pdscaler}
BIN="$CACHE/lab/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"
WORK="$CACHE/lab/build"
HELM_BIN="$CACHE/tools/helm-$HELM_VERSION"
mkdir -p "$BIN" "$WORK" "$HELM_BIN"
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
export GOPATH=${GOPATH:-$HOME/go}
export PATH="$PATH:/usr/local/go/bin"
start=$(date +%s)
step() { echo "[pdlab build +$(( $(date +%s) - start ))s] $*"; }
fail() { echo "[pdlab build] FAILED at step: $1 (see output above)" >&2; exit 1; }

# true if any of the named binaries is missing from the cache
need() { for b in "$@"; do [ -x "$BIN/$b" ] || return 0; done; return 1; }

if ! need kube-apiserver kube-controller-manager kube-scheduler etcd kwok kwok.ip-no-reuse && [ -x "$HELM_BIN/helm" ]; then
  echo "[pdlab build] cached: $BIN, $HELM_BIN"
  bash "$here/build-prometheus.sh" || fail "build prometheus"
  bash "$here/fetch-monitoring-crds.sh" || fail "fetch the prometheus-operator CRDs"
  bash "$here/build-lws.sh" || fail "build the LWS controller"
  exit 0
fi
# One build at a time per cache: a second caller waits for the first, then reuses it.
exec 9>"$CACHE/lab/build.lock"
if ! flock -n 9; then
  echo "[pdlab build] another build into $CACHE/lab is running; waiting for it"
  flock 9
fi
command -v go >/dev/null || fail "find the go toolchain (PATH, /usr/local/go/bin)"
command -v jq >/dev/null || fail "find jq (apt-get install jq)"

if need kube-apiserver kube-controller-manager kube-scheduler; then
  step "kubernetes v$KUBE_VERSION: preparing wrapper module"
  d="$WORK/k8s-$KUBE_VERSION"; rm -rf "$d"; mkdir -p "$d"; cd "$d"
  SV=0.${KUBE_VERSION#1.}
  KGOMOD=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | jq -r .GoMod) || fail "download k8s.io/kubernetes"
  STAGING=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$KGOMOD")
  go mod init local/k8s-bins >/dev/null 2>&1
  go mod edit -go="$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$KGOMOD")"
  grep '^godebug' "$KGOMOD" >> go.mod || true
  for m in $STAGING; do go mod edit -replace="$m=$m@v$SV"; done
  PKGS="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler"
  step "kubernetes: go get (module downloads)"
  # shellcheck disable=SC2046
  go get $(for p in $PKGS; do printf '%s@v%s ' "$p" "$KUBE_VERSION"; done) || fail "go get kubernetes"
  MINOR=$(echo "$KUBE_VERSION" | cut -d. -f2); LD="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"; done
  step "kubernetes: go build kube-apiserver, kube-controller-manager, kube-scheduler (slow, cold ~15 min)"
  # shellcheck disable=SC2086
  go build -p 2 -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$LD" -o "$BIN/" $PKGS || fail "go build kubernetes"
fi

if need etcd; then
  step "etcd v$ETCD_VERSION"
  d="$WORK/etcd-$ETCD_VERSION"; rm -rf "$d"; mkdir -p "$d"; cd "$d"
  go mod init local/etcd-bin >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" || fail "go get etcd"
  go build -trimpath -ldflags="-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3 || fail "go build etcd"
fi

if need kwok kwok.ip-no-reuse; then
  # kwok 0.8.0 can release a deleted pod's IP twice, so two live pods end up with one
  # address (seen in the lab: a decode and a router pod both at 127.70.0.1). The lab
  # builds kwok with one line changed: a released IP is never handed out again (a /16
  # holds 65k addresses, far more than a lab session creates).
  step "kwok v$KWOK_VERSION (pod IPs never reused)"
  d="$WORK/kwok-$KWOK_VERSION"; rm -rf "$d"; mkdir -p "$d"
  SRC=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -n "$SRC" ] || fail "go mod download kwok"
  cp -r "$SRC/." "$d/"; chmod -R u+w "$d"; cd "$d"
  f=pkg/kwok/controllers/utils.go
  grep -q '^func (i \*ipPool) Put(ip string) {$' "$f" || fail "patch kwok: ipPool.Put not found"
  sed -i 's/^func (i \*ipPool) Put(ip string) {$/func (i *ipPool) Put(ip string) { \/\/ pdlab: never reuse\n\tif ip != "" {\n\t\treturn\n\t}/' "$f"
  go build -trimpath -ldflags="-s -w" -o "$BIN/kwok" ./cmd/kwok || fail "go build kwok"
  install -m 755 /dev/null "$BIN/kwok.ip-no-reuse"  # a stamp (need() looks for executables)
fi

if [ ! -x "$HELM_BIN/helm" ]; then
  step "helm v$HELM_VERSION (for the chart's lab test; ~3 min cold)"
  GOBIN="$HELM_BIN" go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" || fail "go install helm"
fi

step "prometheus (with Kubernetes service discovery) and promtool (~5-10 min cold each)"
bash "$here/build-prometheus.sh" || fail "build prometheus"
step "prometheus-operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule)"
bash "$here/fetch-monitoring-crds.sh" || fail "fetch the prometheus-operator CRDs"

step "LeaderWorkerSet controller and CRD (sigs.k8s.io/lws, from source; ~3-5 min cold)"
bash "$here/build-lws.sh" || fail "build the LWS controller"

step "done: $BIN (cold build took $(( $(date +%s) - start ))s)"
ls -la "$BIN"
