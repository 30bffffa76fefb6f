"""NVIDIA Dynamo's own planner (ai-dynamo 1.6.1) as a controller of the closed loop:
``RealDynamoController`` drives Dynamo's offline replay adapter
(``dynamo.planner.offline.replay_adapter``: ``initial_tick_ms`` / ``on_tick(result) ->
{target_prefill, target_decode, next_tick_ms}``) the way Dynamo's Rust replay loop
does, in a subprocess on its own virtualenv (``bench/dynamo_worker/worker.py``; ai-dynamo
pins pydantic <= 2.13.5, the operator's venv has a newer one; ``bench/install-dynamo.sh``
makes it).

Owns: the ScalingTick snapshot built from the ``View`` every policy gets (the Prometheus
snapshot and the pool observations), the subprocess protocol, and applying the
planner's targets as a ``Target``. Must not: see the engine or the trace.

What the planner is fed, per call (the keys ``ReplayPlannerAdapter.on_tick`` reads):

* worker counts: ``active_*_count`` = the pool's Ready replicas, ``non_draining_*_count``
  = the replicas asked for (starting + Ready), ``starting_*_count`` the difference, as
  Dynamo's Rust replay loop counts them (active + starting ids);
* ``traffic`` (Dynamo reads it from the frontend's Prometheus series): the window since
  the previous call, ``duration_s``, ``num_req`` = R x duration (R: the request rate of
  the snapshot, over its 2-minute window), ``avg_isl``/``avg_osl`` = the snapshot's mean
  prompt and output tokens, the TTFT/ITL quantiles as the averages (diagnostics only),
  ``avg_kv_hit_rate`` 0 (the simulator has no prefix cache);
* per-worker forward-pass metrics (Dynamo gets them from the workers' event plane; the
  simulated Prometheus has only pool gauges): a pool's waiting and running requests split
  evenly over its Ready workers (decode: each pod's running sequences when the snapshot
  has one per Ready pod), prompt tokens = requests x ISL, decode KV = sequences x (ISL +
  OSL / 2), the same reading as the re-implementation (``pdscaler.sim.dynamo``); the
  scheduled batch's ``wall_time`` is what the engine takes for it (the workers' own
  measurement, which Dynamo tunes its regression with).

The pre-deployment profile is built by Dynamo's own generators from the TRUE engine
(``worker.EngineSession``). ``next_tick_ms`` is honoured: the planner is called at the
first loop tick at or after it (its load interval is the loop's 15 s, so in the bench
every loop tick is a planner tick).

Worked example: a View at t = 30 s with R = 10 req/s, ISL 1,155, OSL 211, 2 Ready
prefill replicas holding 5 waiting + 3 running requests sends two prefill FPMs, worker
``prefill-0`` with 3 queued (3,465 tokens) and 2 scheduled (2,310 tokens, wall time
0.015 + 2,310 / 8,500 + 2 x 1,155^2 / (8,500 x 53,400) = 0.2926 s) and ``prefill-1``
with 2 queued and 1 scheduled, and a traffic window of 15 s x 10 = 150 requests.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdscaler.sim.controllers import Target, View
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.setup import clamp
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, PoolMetrics

#: The policy's name in the bench's tables.
NAME = "dynamo-planner-real"
#: The worker script (run by the dynamo venv's interpreter).
WORKER = Path(__file__).resolve().parent / "dynamo_worker" / "worker.py"
#: Where bench/install-dynamo.sh puts the planner's virtualenv.
DEFAULT_VENV = Path.home() / ".cache" / "pdscaler" / "dynamo-venv"
#: The planner's wall-clock deadlines in the replay (``planner_config``).
REPLAY_DEADLINE_S = 3600.0
#: KV block size of the mocker engine arguments the capabilities are derived from.
BLOCK_SIZE = 16


def dynamo_python() -> Path:
    """The interpreter of the planner's venv: ``PDSCALER_DYNAMO_PYTHON``, else the
    default venv's."""
    env = os.environ.get("PDSCALER_DYNAMO_PYTHON")
    return Path(env) if env else DEFAULT_VENV / "bin" / "python"


def available() -> bool:
    """Whether the planner's venv exists (``bench/install-dynamo.sh`` made it)."""
    return dynamo_python().exists()


@dataclass(frozen=True)
class RealDynamoConfig:
    """The planner's configuration (``PlannerConfig`` fields), as the re-implementation's
    ``DynamoConfig`` sets it: SLA mode, throughput-based every ``throughput_interval_s``
    with load-based scaling on top every loop tick, the constant predictor, scale-down
    sensitivity 80, the TTFT/ITL targets the SLO x ``slo_scale``. ``extra``: further
    ``PlannerConfig`` fields (e.g. Dynamo's defaults ``load_predictor="arima"``,
    ``throughput_adjustment_interval_seconds=180``)."""

    throughput_interval_s: int = 60
    load_based: bool = True
    down_sensitivity: int = 80
    slo_scale: float = 1.0
    load_predictor: str = "constant"
    extra: dict[str, Any] = field(default_factory=dict)


def planner_config(spec: PDDeploymentSpec, config: RealDynamoConfig) -> dict[str, Any]:
    """``PlannerConfig`` fields for ``spec``: 2 s TTFT / 50 ms TPOT at slo_scale 1 ->
    ``ttft_ms`` 2000, ``itl_ms`` 50; the GPU budget and floors from the spec."""
    interval = round(spec.scaling.interval_seconds)
    return {
        "mode": "disagg",
        "environment": "virtual",
        "backend": "vllm",
        "optimization_target": "sla",
        "enable_throughput_scaling": True,
        "enable_load_scaling": config.load_based,
        "throughput_adjustment_interval_seconds": config.throughput_interval_s,
        "load_adjustment_interval_seconds": interval,
        "load_scaling_down_sensitivity": config.down_sensitivity,
        "load_predictor": config.load_predictor,
        "ttft_ms": 1000.0 * spec.slo.ttft_seconds * config.slo_scale,
        "itl_ms": 1000.0 * spec.slo.tpot_seconds * config.slo_scale,
        "max_gpu_budget": spec.scaling.max_gpus,
        "prefill_min_endpoint": spec.prefill.replicas.min,
        "decode_min_endpoint": spec.decode.replicas.min,
        "prefill_engine_num_gpu": spec.prefill.gpus_per_replica,
        "decode_engine_num_gpu": spec.decode.gpus_per_replica,
        "live_dashboard_port": 0,
        "control_api_port": 0,
        "report_interval_hours": None,
        "pre_deployment_sweeping_mode": "none",
        # A replay: no wall-clock deadlines (5 s a plugin call, 30 s a tick by default).
        # ARIMA fits on a busy 2-core machine ran into them, and runs differed.
        "plugin_registration": {"transport": {"request_timeout_seconds": REPLAY_DEADLINE_S}},
        "scheduling": {"tick_max_duration_seconds": REPLAY_DEADLINE_S},
        **config.extra,
    }


def engine_fields(params: EngineParams) -> dict[str, Any]:
    """The engine constants the worker's profile session and capabilities use."""
    names = (
        "prefill_tps",
        "prefill_overhead_s",
        "prefill_token_budget",
        "prefill_attention_tokens",
        "decode_step_base_s",
        "decode_step_per_seq_s",
        "decode_step_per_kv_token_s",
        "decode_max_seqs",
        "decode_kv_tokens",
        "prefill_gpus",
        "decode_gpus",
    )
    return {**{n: getattr(params, n) for n in names}, "block_size": BLOCK_SIZE}


def split(total: float, n: int) -> list[int]:
    """``round(total)`` spread over ``n`` workers, the first ones one more: 5 over 2 ->
    [3, 2]; 0 workers -> []."""
    whole = max(0, round(total))
    if n <= 0:
        return []
    base, extra = divmod(whole, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def fpm(
    worker: str,
    wall_time: float,
    *,
    prefill: tuple[int, int] = (0, 0),
    decode: tuple[int, int] = (0, 0),
    queued_prefill: tuple[int, int] = (0, 0),
    queued_decode: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """One replay FPM snapshot (the keys ``replay_adapter._build_fpm_from_dict``
    reads); each pair is (requests, tokens)."""
    return {
        "worker_id": worker,
        "dp_rank": 0,
        "wall_time": wall_time,
        "num_prefill_requests": prefill[0],
        "sum_prefill_tokens": prefill[1],
        "var_prefill_length": 0.0,
        "sum_prefill_kv_tokens": 0,
        "num_decode_requests": decode[0],
        "sum_decode_kv_tokens": decode[1],
        "var_decode_kv_tokens": 0.0,
        "num_queued_prefill": queued_prefill[0],
        "sum_queued_prefill_tokens": queued_prefill[1],
        "var_queued_prefill_length": 0.0,
        "num_queued_decode": queued_decode[0],
        "sum_queued_decode_kv_tokens": queued_decode[1],
        "var_queued_decode_kv_tokens": 0.0,
    }


def prefill_fpms(
    params: EngineParams, pool: PoolMetrics, ready: int, isl: float
) -> list[dict[str, Any]]:
    """Per Ready prefill worker: its share of the pool's waiting (queued) and running
    (scheduled) requests of ``isl`` tokens each; wall time of the scheduled batch."""
    queued = split(pool.queue_depth or 0.0, ready)
    running = split(pool.running or 0.0, ready)
    out = []
    for i, (q, r) in enumerate(zip(queued, running, strict=True)):
        tokens = round(r * isl)
        wall = params.prefill_seconds(r * isl, r * isl * isl) if r > 0 else 0.0
        out.append(
            fpm(
                f"prefill-{i}",
                wall,
                prefill=(r, tokens),
                queued_prefill=(q, round(q * isl)),
            )
        )
    return out


def decode_fpms(
    params: EngineParams, pool: PoolMetrics, ready: int, isl: float, osl: float
) -> list[dict[str, Any]]:
    """Per Ready decode worker: its running sequences (each pod's own when the snapshot
    has one per Ready pod) at context ISL + OSL / 2, its share of the waiting requests
    (their prompts' KV); wall time of one decode step of its batch."""
    ctx = isl + osl / 2.0
    by_pod = pool.running_by_pod
    if len(by_pod) == ready:
        names = sorted(by_pod)
        running = [round(by_pod[n]) for n in names]
    else:
        names = [f"decode-{i}" for i in range(ready)]
        running = split(pool.running or 0.0, ready)
    queued = split(pool.queue_depth or 0.0, ready)
    out = []
    for name, n, q in zip(names, running, queued, strict=True):
        wall = params.decode_step(n, n * ctx) if n > 0 else 0.0
        out.append(fpm(name, wall, decode=(n, round(n * ctx)), queued_decode=(q, round(q * isl))))
    return out


def traffic(m: MetricsSnapshot, duration: float) -> dict[str, Any] | None:
    """The window's traffic as the replay loop reports it; None without a rate."""
    if m.request_rate is None or duration <= 0:
        return None
    num = m.request_rate * duration
    known = m.prompt_tokens is not None and m.output_tokens is not None
    ttft, itl = m.prefill.latency_seconds, m.decode.latency_seconds
    return {
        "duration_s": duration,
        "num_req": num,
        "shape_count": num if known else 0.0,
        "avg_isl": m.prompt_tokens or 0.0,
        "avg_osl": m.output_tokens or 0.0,
        "ttft_count": num if ttft is not None else 0.0,
        "avg_ttft_ms": 1000.0 * (ttft or 0.0),
        "itl_count": num if itl is not None else 0.0,
        "avg_itl_ms": 1000.0 * (itl or 0.0),
        "hit_rate_count": 0.0,
        "avg_kv_hit_rate": 0.0,
    }


def scaling_tick(view: View, params: EngineParams, ordinal: int, duration: float) -> dict[str, Any]:
    """The ScalingTick snapshot ``ReplayPlannerAdapter.on_tick`` reads, from ``view``."""
    m = view.metrics
    p_ready, d_ready = view.prefill.ready, view.decode.ready
    result: dict[str, Any] = {
        "tick_ordinal": ordinal,
        "now_ms": 1000.0 * view.now,
        "active_prefill_count": p_ready,
        "active_decode_count": d_ready,
        "non_draining_prefill_count": view.prefill.replicas,
        "non_draining_decode_count": view.decode.replicas,
        "starting_prefill_count": max(0, view.prefill.replicas - p_ready),
        "starting_decode_count": max(0, view.decode.replicas - d_ready),
        "prefill_fpm_snapshots": [],
        "decode_fpm_snapshots": [],
    }
    if m is not None and m.prompt_tokens is not None and m.output_tokens is not None:
        result["prefill_fpm_snapshots"] = prefill_fpms(params, m.prefill, p_ready, m.prompt_tokens)
        result["decode_fpm_snapshots"] = decode_fpms(
            params, m.decode, d_ready, m.prompt_tokens, m.output_tokens
        )
    result["active_prefill_ids"] = [f["worker_id"] for f in result["prefill_fpm_snapshots"]] or [
        f"prefill-{i}" for i in range(p_ready)
    ]
    result["active_decode_ids"] = [f["worker_id"] for f in result["decode_fpm_snapshots"]] or [
        f"decode-{i}" for i in range(d_ready)
    ]
    window = traffic(m, duration) if m is not None else None
    if window is not None:
        result["traffic"] = window
    return result


class PlannerProcess:
    """The worker subprocess: one JSON request a line, one answer a line. Its stderr
    (Dynamo's logs, a traceback) is discarded unless ``DYNAMO_WORKER_STDERR`` is set;
    ``DYN_LOG`` (default ``error``) sets Dynamo's log level."""

    def __init__(self, python: Path | None = None) -> None:
        env = {**os.environ, "DYN_LOG": os.environ.get("DYN_LOG", "error")}
        self._proc = subprocess.Popen(
            [str(python or dynamo_python()), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if "DYNAMO_WORKER_STDERR" not in os.environ else None,
            text=True,
            env=env,
        )
        self._finalizer = weakref.finalize(self, _stop, self._proc)

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"dynamo planner worker exited (code {proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"dynamo planner worker: {answer['error']}")
        return answer

    def close(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"op": "close"}) + "\n")
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, AssertionError):
            proc.kill()
            proc.wait()


class RealDynamoController:
    """NVIDIA Dynamo's planner (module docstring); ``name`` ``dynamo-planner-real``.

    The subprocess starts at the first tick; ``close()`` stops it (it is also stopped
    when the controller is collected). ``calls`` counts the planner's ticks, ``seconds``
    the wall time they took (round trips included)."""

    def __init__(
        self,
        spec: PDDeploymentSpec,
        profile: EngineParams,
        config: RealDynamoConfig | None = None,
        python: Path | None = None,
    ) -> None:
        self.spec, self.profile = spec, profile
        self.config = config or RealDynamoConfig()
        self.name = NAME
        self._python = python
        self._proc: PlannerProcess | None = None
        self._next = math.inf
        self._last = 0.0
        self.calls = 0
        #: wall seconds the subprocess took to start (imports, profile, bootstrap)
        self.start_seconds = 0.0
        #: wall seconds spent in the planner's ticks (the subprocess round trips)
        self.seconds = 0.0
        self.bootstrap: dict[str, Any] = {}
        self.last_answer: dict[str, Any] = {}

    def _start(self) -> None:
        t0 = time.perf_counter()
        self._proc = PlannerProcess(self._python)
        answer = self._proc.call(
            {
                "op": "init",
                "planner": planner_config(self.spec, self.config),
                "engine": engine_fields(self.profile),
            }
        )
        self.bootstrap = answer["bootstrap"]
        self._next = float(answer["initial_tick_ms"]) / 1000.0
        self.start_seconds = time.perf_counter() - t0

    def tick(self, view: View) -> Target | None:
        if self._proc is None:
            self._start()
        assert self._proc is not None
        if view.now + 1e-9 < self._next:
            return None
        result = scaling_tick(view, self.profile, self.calls, view.now - self._last)
        t0 = time.perf_counter()
        answer = self._proc.call({"op": "tick", "result": result})
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self._last = view.now
        self.last_answer = answer
        nxt = answer.get("next_tick_ms")
        self._next = math.inf if nxt is None else float(nxt) / 1000.0
        p, d = answer.get("target_prefill"), answer.get("target_decode")
        if p is None and d is None:
            return None
        want_p = view.prefill.replicas if p is None else int(p)
        want_d = view.decode.replicas if d is None else int(d)
        return Target(
            clamp(want_p, self.spec.prefill.replicas.min, self.spec.prefill.replicas.max),
            clamp(want_d, self.spec.decode.replicas.min, self.spec.decode.replicas.max),
            note=f"dynamo planner (real): {want_p}+{want_d}",
        )

    def close(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None
