"""The offline simulator: the serving model, a simulated Prometheus, trace handling, the
closed loop that runs the operator's own policy (and the baselines) on a simulated
clock, the oracle bound and the results. Pure and deterministic for a seed: no clock
reads, no network, no file writes (the CLI and the bench write what it returns).

Modules: ``engine`` (the discrete-event P/D serving model), ``prom`` (what Prometheus
would answer), ``traces`` (Azure CSV / Mooncake JSONL, rate scaling), ``scenarios``
(synthetic loads), ``observe`` (engine + Prometheus -> the policy's ``TickInput``
parts), ``controllers`` (pdscaler and the baselines behind one interface), ``loop``
(the closed loop), ``oracle`` (oracle and work-floor GPU-hours), ``results``
(SLO attainment, percentiles, actions) and ``plot`` (PNG bytes).
"""
