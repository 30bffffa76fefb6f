"""The operator-overhead benchmark (issue 5, item 4): what running pdscaler costs.

One module per concern: ``cli`` (the command line and the report's order), the three
measurements ``policy`` (the pure policy's decision time), ``tick`` (one reconcile tick
against the shared lab) and ``fleet`` (one operator process with 200 PDDeployments in
a private lab), and their plumbing: ``cluster`` (the PDDeployment they create, errors),
``private_lab``, ``process`` (a process's CPU and memory from ``/proc``, the machine's
facts), ``stats`` (percentiles, histogram quantiles, expositions), ``figures`` (the
fleet's arithmetic) and ``report`` (sections rendered as markdown).

    python -m bench.overhead --only policy        # seconds, no cluster
"""
