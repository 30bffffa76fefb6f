"""The engine simulator: the stand-in for vLLM, SGLang and Dynamo at pod addresses.

Owns: one HTTP server per Ready engine pod (``serve``: the OpenAI-compatible API, the
P/D hand-off in the pod's protocol, ``dialect``; its prefill and decode in wall-clock
time, ``timing``; the pod's ``/metrics``, ``expo``), the Dynamo frontend's ``/metrics``
(``frontend``), the pods as the engines see them (``pods``), synthetic load
(``scenarios``) and the ``engine-sim`` process (``sim``).
May use the lab (``pdlab.cluster``) only in ``engine-sim``'s process: its kubeconfig, and
the pod runner for router pods. Must not import the demo (``pdlab.demo``).
"""
