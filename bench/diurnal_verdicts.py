"""The diurnal matrix's verdicts (``case_verdicts``): per (engine, start-up, seed),
pdscaler against every other row and every size the hindsight search replayed
(``sim.verdicts``, FCFS; the oracle a bound), the best non-clairvoyant baseline and the
tight oracle. Pure: from a ``diurnal.json`` document's rows and tuning alone, so
``run_matrix`` and ``bench.readme`` compute the same verdicts."""

from __future__ import annotations

from typing import Any

from bench.diurnal_plan import CLAIRVOYANT, ORACLE
from bench.quality_verdicts import best_online, ratio_at_equal
from pdscaler.sim import verdicts

_FIGURES = ("slo_attainment", "gpu_hours")


def case_verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (engine, start-up, seed) with a pdscaler row: pdscaler against every other
    row and every size the hindsight search replayed (``sim.verdicts``, FCFS; the oracle
    a bound), the best non-clairvoyant baseline (``bench.quality_verdicts.best_online``: the
    cheapest with at least pdscaler's attainment, else the highest attainment) and the
    tight oracle (GPU-h ratio, and at equal attainment: the cheapest oracle try
    reaching pdscaler's)."""
    out = []
    cases: dict[tuple[str, float, int], dict[str, dict[str, Any]]] = {}
    for r in doc["rows"]:
        cases.setdefault((r["engine"], r["startup_s"], r["seed"]), {})[r["policy"]] = r
    for (engine, startup, seed), rows in cases.items():
        if "pdscaler" not in rows:
            continue
        scored = {n: r["scored"] for n, r in rows.items()}
        sweep = doc["tuning"].get(f"{engine}/{seed}", {}).get("static_sweep", ())
        pts = verdicts.policy_points(scored, bounds=(ORACLE,)) + verdicts.sweep_points(sweep)
        v = verdicts.verdict("pdscaler", pts)
        agg = {
            "policies": {
                n: {
                    "slo_attainment": {"mean": s["slo_attainment"]},
                    "gpu_hours": {"mean": s["gpu_hours"]},
                }
                for n, s in scored.items()
                if n not in CLAIRVOYANT
            }
        }
        online = best_online(agg)
        pd = scored["pdscaler"]
        oracle = rows.get(ORACLE, {}).get("oracle")
        out.append(
            {
                "engine": engine,
                "startup_s": startup,
                "seed": seed,
                "pdscaler": {"slo_attainment": pd["slo_attainment"], "gpu_hours": pd["gpu_hours"]},
                "best_online": None
                if online is None
                else {"policy": online[0], **{k: online[1][k]["mean"] for k in _FIGURES}},
                "oracle": None
                if oracle is None
                else {
                    "slo_attainment": oracle["slo_attainment"],
                    "gpu_hours": oracle["gpu_hours"],
                    "met": oracle["met"],
                    "repairs": oracle["repairs"],
                    "ratio": pd["gpu_hours"] / oracle["gpu_hours"],
                    "ratio_at_equal": ratio_at_equal(pd, oracle),
                },
                "pareto": v.pareto,
                "dominated_by": list(v.labels),
                "points": len(pts),
                "policies_missing": [p for p in doc["plan"]["policies"] if p not in rows],
            }
        )
    return out
