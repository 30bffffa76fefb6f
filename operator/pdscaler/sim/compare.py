"""One trace, several policies: build each controller by name, run them in the closed
loop, and condense the runs with the oracle and the work floor into one comparison.

Owns: the policy names (``POLICIES``, what ``--policy all`` runs, and the extra
``oracle-replay``) and the JSON document of a comparison. Shared by ``pdscaler
simulate`` and the bench. Must not: print, write files or read clocks (``progress``
gets the policy name and the simulated fraction done).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pdscaler.sim import baselines
from pdscaler.sim.controllers import Controller, Decide, PdscalerController, ScheduleController
from pdscaler.sim.loop import LoopConfig, Run, run
from pdscaler.sim.oracle import OracleResult, oracle, work_floor
from pdscaler.sim.results import Summary, result_json, summarize
from pdscaler.sim.traces import Trace

#: ``--policy all``: pdscaler and every baseline.
POLICIES: tuple[str, ...] = (
    "pdscaler",
    "static-peak",
    "static-mean",
    "hpa-queue",
    "fixed-ratio",
    "forecast-only",
)
#: The oracle's schedule replayed in the engine (what SLO the bound would get).
ORACLE_REPLAY = "oracle-replay"
KNOWN = (*POLICIES, ORACLE_REPLAY)


def parse_policies(text: str) -> tuple[str, ...]:
    """``all`` -> POLICIES; ``pdscaler,hpa-queue`` -> both; unknown names: ValueError
    listing the known ones."""
    names = POLICIES if text.strip() == "all" else tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in KNOWN]
    if unknown or not names:
        raise ValueError(
            f"unknown policy {', '.join(unknown) or repr(text)}: use all or one of "
            + ", ".join(KNOWN)
        )
    return tuple(dict.fromkeys(names))


def controller(
    name: str,
    trace: Trace,
    cfg: LoopConfig,
    bound: OracleResult,
    decide: Decide | None = None,
) -> Controller:
    """The controller called ``name`` for this trace and config."""
    spec = cfg.spec
    makers: dict[str, Callable[[], Controller]] = {
        "pdscaler": lambda: PdscalerController(spec, decide),
        "static-peak": lambda: baselines.static_peak(trace, spec),
        "static-mean": lambda: baselines.static_mean(trace, spec),
        "hpa-queue": lambda: baselines.HpaQueueController(spec),
        "fixed-ratio": lambda: baselines.FixedRatioController.profiled(trace, spec),
        "forecast-only": lambda: baselines.ForecastOnlyController(spec),
        ORACLE_REPLAY: lambda: ScheduleController(
            ORACLE_REPLAY,
            bound.schedule.times.tolist(),
            bound.schedule.prefill.tolist(),
            bound.schedule.decode.tolist(),
            lead=cfg.startup_s + spec.scaling.interval_seconds,
        ),
    }
    if name not in makers:
        raise ValueError(f"unknown policy {name}")
    return makers[name]()


@dataclass(frozen=True)
class Comparison:
    trace: Trace
    cfg: LoopConfig
    runs: tuple[Run, ...]
    summaries: tuple[Summary, ...]
    oracle: OracleResult
    work_floor_gpu_hours: float
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return result_json(
            self.summaries,
            oracle_gpu_hours=self.oracle.gpu_hours,
            work_floor_gpu_hours=self.work_floor_gpu_hours,
            meta=self.meta,
        )


def bounds(trace: Trace, cfg: LoopConfig, derate: float = 1.0) -> tuple[OracleResult, float]:
    """The oracle (minimum replicas = the spec's) and the work floor of ``trace``."""
    spec = cfg.spec
    tpot = spec.slo.tpot_seconds
    bound = oracle(
        trace,
        cfg.params,
        startup_s=cfg.startup_s,
        tpot_s=tpot,
        bin_s=spec.scaling.interval_seconds,
        minimum=(spec.prefill.replicas.min, spec.decode.replicas.min),
        derate=derate,
    )
    return bound, work_floor(trace, cfg.params, tpot_s=tpot)


@dataclass(frozen=True)
class FeasibleOracle:
    """The largest tried ``derate`` whose oracle schedule, replayed in the engine, met
    the attainment target (None when none did), with every try (derate, attainment,
    GPU-hours)."""

    derate: float | None
    gpu_hours: float | None
    attainment: float | None
    tries: tuple[tuple[float, float, float], ...]


def feasible_oracle(
    trace: Trace,
    cfg: LoopConfig,
    target: float = 0.99,
    derates: Sequence[float] = (0.85, 0.7, 0.55, 0.4),
) -> FeasibleOracle:
    """Replay the oracle at decreasing derates until the SLO attainment reaches
    ``target``: what the bound costs once it must also meet the SLO."""
    tries = []
    for derate in derates:
        bound, _ = bounds(trace, cfg, derate)
        replay = run(trace, controller(ORACLE_REPLAY, trace, cfg, bound), cfg)
        s = summarize(replay)
        tries.append((derate, s.slo_attainment, s.gpu_hours))
        if s.slo_attainment >= target:
            return FeasibleOracle(derate, s.gpu_hours, s.slo_attainment, tuple(tries))
    return FeasibleOracle(None, None, None, tuple(tries))


def compare(
    trace: Trace,
    names: Sequence[str],
    cfg: LoopConfig,
    *,
    progress: Callable[[str, float], None] | None = None,
    decide: Decide | None = None,
    meta: dict[str, Any] | None = None,
) -> Comparison:
    """Run every policy in ``names`` on ``trace`` with the same config and seed."""
    bound, floor = bounds(trace, cfg)
    runs = []
    for name in names:
        ctrl = controller(name, trace, cfg, bound, decide)
        report = None if progress is None else _named(progress, name)
        runs.append(run(trace, ctrl, cfg, report))
    info = {
        "trace": trace.name,
        "requests": len(trace),
        "span_s": trace.span,
        "startup_s": cfg.startup_s,
        "seed": cfg.seed,
        "slo": {
            "ttft_s": cfg.spec.slo.ttft_seconds,
            "tpot_s": cfg.spec.slo.tpot_seconds,
            "percentile": cfg.spec.slo.percentile,
        },
        "oracle_bin_s": bound.schedule.bin_s,
        **(meta or {}),
    }
    return Comparison(
        trace, cfg, tuple(runs), tuple(summarize(r) for r in runs), bound, floor, info
    )


def _named(progress: Callable[[str, float], None], name: str) -> Callable[[float], None]:
    return lambda fraction: progress(name, fraction)
