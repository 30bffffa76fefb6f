"""The offline simulator: the serving model, a simulated Prometheus, trace handling, the
closed loop that runs the operator's own policy (and the baselines) on a simulated
clock, the SLO-feasible oracle and the lower bounds, and the results. Pure and
deterministic for a seed: no clock reads, no network, no file writes (the CLI and the
bench write what it returns).

Modules:

* ``engine``: the discrete-event P/D serving model (also driven in wall-clock time by
  the lab's engine simulator: see its docstring, "Driving it");
* ``prom``: what Prometheus would answer (rate, histogram_quantile, gauges, lag);
* ``observe``: scrapes -> the policy's ``MetricsSnapshot`` (vLLM preset semantics) and
  the API server's ``PoolObservation``;
* ``traces`` (Azure CSV / Mooncake JSONL, rate scaling) and ``scenarios`` (synthetic
  loads: step, mix shift);
* ``setup``: the simulated PDDeployment spec (priors off the truth) and the warm start;
* ``controllers`` (the interface, pdscaler's policy, schedule replay) and
  ``baselines`` (static sizes, HPA on queue length naive and tuned, fixed ratio,
  forecast-only); ``dynamo``: a Dynamo-style SLA planner (throughput-based floor,
  load-based on top); ``tuning``: the static-best and tuned-HPA searches;
* ``loop``: the closed loop; ``oracle``: the oracle's repair, the lower bound, the
  work floor and the feasibility ceiling; ``profiles``: the capacity profile measured
  on the true engine before deploying (prefill over the prompt length, decode over the
  context);
* ``results``: SLO attainment, percentiles, actions, reversals, Pareto front, JSON;
* ``compare``: several policies on one trace and the SLO-feasible oracle search;
  ``plot``: the PNG (bytes).

Typical use::

    trace = scale_rate(load_trace(Path("data/traces/AzureLLMInferenceTrace_conv.csv")), 10)
    cfg = LoopConfig(spec=sim_spec(startup_s=90), startup_s=90)
    comparison = compare(trace, POLICIES, cfg)
    comparison.to_json()["policies"]["pdscaler"]["slo_attainment"]
"""
