"""The lab itself: a Kubernetes cluster on this host, no containers.

Owns: the control plane's processes (``lab.Lab``: etcd, kube-apiserver,
controller-manager, scheduler, kwok's fake GPU nodes, Prometheus; ``config``,
``processes``, ``pki``, ``kubeapi``, ``kwok``, ``prometheus``), the stand-ins for what a
node and the network do (``podrunner``: the kubelet of router and chart pods;
``svcproxy``/``svcdns``: kube-proxy and cluster DNS), the lab's Kubernetes client bundle
(``kubeclient``) and the aiperf load client (``loadclient``). Must not import the engine
simulator (``pdlab.engine``) or the demo (``pdlab.demo``): they run on the lab.
"""
