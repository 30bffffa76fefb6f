"""The decision-quality matrix's aggregation and verdicts, from ``run_matrix``'s case
documents (or a committed ``quality.json``): mean and min-max over the seeds
(``aggregate``), pdscaler's GPU-hours over the cheapest oracle try reaching its
attainment (``ratio_at_equal``), the best baseline that does not size from the scored
span (``best_online``), and pdscaler's verdict against the targets and every point
measured at seed 0 (``verdict``, ``sim.verdicts``). Pure: no replay, no file. The
diurnal bench reuses ``best_online`` and ``ratio_at_equal``
(``bench.diurnal_verdicts``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.quality import CLAIRVOYANT, ROWS, TARGET_ATTAINMENT, TARGET_ORACLE_RATIO, Group
from pdscaler.sim import verdicts
from pdscaler.sim.compare import (
    ORACLE_REPLAY,
)


def _stats(values: Sequence[float | None]) -> dict[str, float]:
    arr = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(arr) == 0:
        return {"mean": math.nan, "min": math.nan, "max": math.nan}
    return {"mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max())}


def ratio_at_equal(row: dict[str, Any], oracle: dict[str, Any]) -> float | None:
    """A policy's GPU-hours over the cheapest oracle try reaching its attainment
    (``FeasibleOracle.gpu_hours_at``, from the oracle's ``tries`` in the JSON); None when
    no try reached it. Tries (95.1%, 18.2), (99.1%, 21.0), a row at 84.3% / 28.3 ->
    28.3 / 18.2 = 1.55."""
    reached = [h for a, h in oracle.get("tries", ()) if a >= row["slo_attainment"]]
    return row["gpu_hours"] / min(reached) if reached else None


def aggregate(seeds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and min-max over the seeds of every policy's attainment, GPU-hours and
    ratio to the oracle, and of the oracle, bound, floor and ceiling."""
    names = list(seeds[0]["policies"])
    out: dict[str, Any] = {"policies": {}, "preroll": {}}
    for n in names:
        rows = [s["policies"][n] for s in seeds]
        out["policies"][n] = {
            k: _stats([r[k] for r in rows])
            for k in ("slo_attainment", "gpu_hours", "ratio_to_oracle", "slo_attainment_settled")
        }
        out["policies"][n]["ratio_at_equal"] = _stats(
            [ratio_at_equal(s["policies"][n], s["oracle"]) for s in seeds]
        )
        pre = [s.get("preroll", {}).get(n) for s in seeds]
        if all(pre):
            out["preroll"][n] = {
                k: _stats([r[k] for r in pre if r]) for k in ("slo_attainment", "gpu_hours")
            }
    out["oracle"] = {
        "gpu_hours": _stats([s["oracle"]["gpu_hours"] for s in seeds]),
        "slo_attainment": _stats([s["oracle"]["slo_attainment"] for s in seeds]),
        "met": all(s["oracle"]["met"] for s in seeds),
        "repairs": _stats([s["oracle"]["repairs"] for s in seeds]),
    }
    for k in ("lower_bound", "work_floor"):
        out[k] = {"gpu_hours": _stats([s[k]["gpu_hours"] for s in seeds])}
    out["feasibility_ceiling"] = _stats([s["feasibility_ceiling"] for s in seeds])
    out["seconds"] = float(sum(s["seconds"] for s in seeds))
    return out


def case_label(case: dict[str, Any]) -> str:
    """``conv-4x, start-up 90 s``; held out: ``conv-long-1x, ...``."""
    return f"{case['group']}, start-up {case['startup_s']:g} s"


def contenders(agg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The policies of an aggregate without the checks (``oracle-replay``) and the
    ablation rows (``pdscaler ...``)."""
    return {
        n: p
        for n, p in agg["policies"].items()
        if n != "oracle-replay" and (n == "pdscaler" or not n.startswith("pdscaler"))
    }


def seed_zero(case: dict[str, Any]) -> dict[str, Any] | None:
    """The case's seed-0 document (where the tuning and the static sweep ran), if run."""
    return next((d for d in case["seeds"] if d.get("meta", {}).get("seed") == 0), None)


def points(case: dict[str, Any], tuned: dict[str, Any] | None) -> list[verdicts.Point]:
    """Every measured point of a case at seed 0 (``sim.verdicts``): each policy's row
    under FCFS and, when the case was replayed under it, under the deadline queue (else
    the ``pdscaler, deadline queue`` ablation row alone), every static size the
    static-hindsight search replayed (``tuned["static_sweep"]``: static replays do not
    depend on the start-up), and the bound's replay as a bound."""
    doc = seed_zero(case)
    if doc is None:
        return []
    pts = verdicts.comparison_points(doc)
    dl = case.get(verdicts.DEADLINE)
    if dl is not None:
        pts = [p for p in pts if p.discipline == verdicts.FCFS]
        rows = {n: r for n, r in dl["policies"].items() if n in ROWS or n == ORACLE_REPLAY}
        pts += verdicts.policy_points(rows, verdicts.DEADLINE)
    return pts + verdicts.sweep_points((tuned or {}).get("static_sweep", ()))


def judged(pts: list[verdicts.Point], discipline: str) -> dict[str, Any] | None:
    """pdscaler's row under ``discipline`` against every other point, as JSON (None
    without that row)."""
    if not any(p.policy == "pdscaler" and p.discipline == discipline for p in pts):
        return None
    v = verdicts.verdict("pdscaler", pts, discipline)
    best = v.cheapest_as_good
    return {
        "slo_attainment": v.point.slo_attainment,
        "gpu_hours": v.point.gpu_hours,
        "pareto": v.pareto,
        "dominated_by": list(v.labels),
        "cheapest_as_good": None if best is None else best.label,
        "cheapest_as_good_slo_attainment": None if best is None else best.slo_attainment,
        "cheapest_as_good_gpu_hours": None if best is None else best.gpu_hours,
    }


def best_online(agg: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The best baseline that does not size from the scored span (not ``CLAIRVOYANT``,
    seed means): the cheapest with at least pdscaler's attainment, else the one with
    the highest attainment (ties: the cheaper)."""
    pols = contenders(agg)
    att = pols["pdscaler"]["slo_attainment"]["mean"]
    online = {
        n: p for n, p in pols.items() if n != "pdscaler" and n not in CLAIRVOYANT and n in ROWS
    }
    if not online:
        return None
    as_good = {n: p for n, p in online.items() if p["slo_attainment"]["mean"] >= att}
    if as_good:
        n = min(as_good, key=lambda k: as_good[k]["gpu_hours"]["mean"])
    else:
        n = max(
            online,
            key=lambda k: (online[k]["slo_attainment"]["mean"], -online[k]["gpu_hours"]["mean"]),
        )
    return n, online[n]


def verdict(case: dict[str, Any], tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """pdscaler against the targets (seed means) and, at seed 0, against every measured
    point (``points``, ``sim.verdicts``) under FCFS and under the deadline queue.
    ``pareto``/``dominated_by``/``cheapest_as_good`` are the FCFS verdict's (seed
    0; without a seed-0 run: the seed means against the other policies' means);
    ``deadline`` the deadline queue's (None when the case was not replayed under it)."""
    agg = case["aggregate"]
    pols = contenders(agg)
    pd = pols["pdscaler"]
    att, hours = pd["slo_attainment"]["mean"], pd["gpu_hours"]["mean"]
    ratio = pd["ratio_to_oracle"]["mean"]
    pts = points(case, tuned)
    fcfs = judged(pts, verdicts.FCFS)
    if fcfs is None:  # no seed 0: the seed means of the policies' rows
        mean_pts = [
            verdicts.Point(n, p["slo_attainment"]["mean"], p["gpu_hours"]["mean"])
            for n, p in pols.items()
        ]
        fcfs = judged(mean_pts, verdicts.FCFS)
        assert fcfs is not None
    online = best_online(agg)
    return {
        "case": case_label(case),
        "slo_attainment": att,
        "gpu_hours": hours,
        "oracle_ratio": ratio,
        "oracle_ratio_equal": pd.get("ratio_at_equal", {}).get("mean"),
        "meets_attainment": att >= TARGET_ATTAINMENT,
        "meets_cost": ratio <= TARGET_ORACLE_RATIO + 1e-9,
        **fcfs,
        "points": len(pts),
        verdicts.DEADLINE: judged(pts, verdicts.DEADLINE),
        "best_online": None
        if online is None
        else {
            "policy": online[0],
            "slo_attainment": online[1]["slo_attainment"]["mean"],
            "gpu_hours": online[1]["gpu_hours"]["mean"],
        },
    }


def kind(case: dict[str, Any]) -> str:
    """A ``quality.json`` case's label (``Group.kind``): ``conv-4x`` -> ``matrix``,
    ``conv-long-1x`` -> ``held out``, ``mix-1x`` -> ``tuning case``."""
    return Group.of(case).kind
