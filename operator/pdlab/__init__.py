"""pdlab: a real Kubernetes control plane with fake GPU nodes and a real Prometheus.

No containers: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run
as local processes from binaries built once by `build-bins.sh`; Prometheus is Debian's.
`python -m pdlab up|down|status|env` drives it; `pdlab.cluster.lab.Lab` is the Python API the
tests use. This is a development and test tool: the `pdscaler` product never imports it.
"""
