"""The simulator's speed on the diurnal bench's traffic: requests replayed per second,
pure Python and compiled (bench/native.py), for pdscaler and a static policy, and
where the time goes. ``python -m bench.speed`` writes ``bench/results/speed.md``.

Owns: the measurement (``measure``: one policy on one slice in a fresh process, so its
peak memory is its own), the profile (cProfile of pdscaler on the same slice, pure,
summed per module) and the report. Must not: report a figure it did not measure; the
day figures are the measured rate applied to a day's requests, and say so.

The slice: the busiest hour of the ServeGen week (hour 27, day 1 03:00-04:00) at the
diurnal bench's scale (bench.diurnal_plan.bench_scale: x70 on the hand-made engine), 829,010
requests, the pools at their largest; pdscaler starts it cold (the warm start), the
static policy at static-peak's size for that hour. Issue 26's target: a day at the
bench's scale (day 1: 9.40 million requests) replays per policy in well under a minute
on 2 cores (30 s: 313,000 requests/s). ``--day`` also replays day 1 whole, compiled,
per policy, and reports the seconds measured. The diurnal matrix itself
(bench/results/diurnal.json) need not score a whole day: ``make bench-diurnal`` runs a
cut plan (e.g. day 0's last 0.5 h as the pre-roll, the 2 h from day 1's start scored),
so the report reads the spans, the cuts and the replays' own requests/s from that file
(``diurnal_note``). ``--render`` re-renders speed.md from speed.json and diurnal.json
without measuring.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import native, provenance
from bench.markdown import diurnal_span, table

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
#: The slice: hour 27 of the week (the busiest), one hour.
PEAK_HOUR = 27
#: ``--day``: day 1 of the week (hours 24-48), the day the diurnal bench scores from
#: (its cut plan scores only the first hours of it: ``diurnal_note``).
DAY_HOUR = 24
#: The diurnal matrix's results, whose spans and replay rates the report quotes.
DIURNAL = RESULTS / "diurnal.json"
SLICE_HOURS = 1.0
POLICIES = ("static-peak", "pdscaler")
#: The issue's target, requests/s: a 9.4-million-request day in under a minute.
TARGET_DAY_S = 60.0
#: Modules of the simulator whose share of the profile is reported.
MODULES = ("engine", "loop", "observe", "prom", "results", "traces", "policy", "other")


def _slice(hour: int, hours: float) -> tuple[Any, Any, int, int]:
    """(trace, LoopConfig, scale, requests of day 1 at the scale) of the slice."""
    from bench import diurnal_plan
    from pdscaler.sim.traces import days, load_diurnal, scale_rate

    plan = diurnal_plan.Plan()
    week = load_diurnal(Path(plan.trace_path))
    engine = diurnal_plan.ENGINES[diurnal_plan.HAND_MADE]()
    scale, _ = diurnal_plan.scale_for(plan, week, engine.params)
    start = hour * 3600.0
    trace = scale_rate(week.window(start, start + hours * 3600.0), scale, seed=0)
    return trace, diurnal_plan.loop_config(engine, 90.0, 0), scale, len(days(week, 1)) * scale


def _controller(name: str, trace: Any, cfg: Any) -> Any:
    from pdscaler.sim.baselines import kv_capacity, static_peak
    from pdscaler.sim.controllers import PdscalerController

    if name == "pdscaler":
        return PdscalerController(cfg.spec)
    return static_peak(trace, cfg.spec, kv_capacity(cfg.spec, cfg.params))


def _module(filename: str) -> str:
    if "/pdscaler/policy/" in filename or "/pdscaler/models/" in filename:
        return "policy"
    for m in MODULES[:-2]:
        if filename.endswith(f"/sim/{m}.py"):
            return m
    return "other"


def measure(policy: str, profile: bool = False, day: bool = False) -> dict[str, Any]:
    """Replay ``policy`` on the slice in this process: seconds, requests/s, peak RSS,
    and with ``profile`` the cProfile seconds per module and the top functions."""
    from pdscaler.sim.loop import run
    from pdscaler.sim.results import summarize

    trace, cfg, scale, day_requests = _slice(
        *((DAY_HOUR, 24.0) if day else (PEAK_HOUR, SLICE_HOURS))
    )
    ctrl = _controller(policy, trace, cfg)
    prof = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    result = run(trace, ctrl, cfg)
    s = summarize(result)
    if prof is not None:
        prof.disable()
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    out: dict[str, Any] = {
        "policy": policy,
        "engine": provenance.engine_label(),
        "requests": len(trace),
        "scale": scale,
        "day_requests": day_requests,
        "whole_day": day,
        "seconds": seconds,
        "cpu_s": cpu,
        "requests_per_s": len(trace) / seconds,
        "requests_per_cpu_s": len(trace) / cpu,
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "slo_attainment": s.slo_attainment,
        "gpu_hours": s.gpu_hours,
        "size": list(getattr(ctrl, "initial", ()) or ()),
        "profiled": profile,
    }
    if prof is not None:
        stats = pstats.Stats(prof)
        entries = stats.stats  # type: ignore[attr-defined]
        per_module: dict[str, float] = dict.fromkeys(MODULES, 0.0)
        top = []
        for (filename, line, func), (_, _, tottime, cumtime, _) in entries.items():
            per_module[_module(filename)] += tottime
            top.append((tottime, cumtime, f"{Path(filename).name}:{line}({func})"))
        top.sort(reverse=True)
        out["profile_by_module_s"] = per_module
        out["profile_top"] = [[name, tt, ct] for tt, ct, name in top[:12]]
    return out


def _child(policy: str, profile: bool, build: Path | None, day: bool = False) -> dict[str, Any]:
    """``measure`` in a fresh process on the pure modules or the compiled ``build``."""
    env = {**os.environ, native.MARKER: str(build) if build else "off"}
    env["PYTHONPATH"] = os.pathsep.join([str(build), str(REPO)] if build else [str(REPO)])
    code = (
        "import json; from bench.speed import measure; "
        f"print(json.dumps(measure({policy!r}, {profile!r}, {day!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(" ".join(done.stderr.split()[-40:]))
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def diurnal_note(doc: dict[str, Any] | None) -> str:
    """What the diurnal matrix (``diurnal.json``) replays and how fast its own replays
    ran, from the file: its plan's spans (``markdown.diurnal_span``), its cuts and the
    range of its rows' requests/s (wall, pre-roll and oracle tries included; the
    hindsight bound's row, replayed by its search, has none)."""
    if doc is None:
        return "The diurnal matrix: not measured (no diurnal.json)."
    from bench import diurnal_plan  # the simulator's modules: only when rendering

    rates = [
        r["requests_per_s"]
        for r in doc["rows"]
        if r.get("requests_per_s") is not None and math.isfinite(r["requests_per_s"])
    ]
    cut = doc.get("cuts") or ""
    stamp = doc.get(provenance.KEY) or {}
    return (
        f"In the diurnal matrix ([diurnal.md](diurnal.md), from diurnal.json measured at "
        f"commit {stamp.get('commit', 'not recorded')}): "
        f"{diurnal_span(doc['plan'], diurnal_plan.WARMUP_DAY)}"
        + (f"; CUT from the full matrix: {cut}" if cut else "; nothing cut")
        + (
            f"; its own replays ran at {min(rates):,.0f}-{max(rates):,.0f} requests/s "
            f"(wall, pre-roll and the oracle's tries included, shared cores, {doc['engine']})."
            if rates
            else "."
        )
    )


def report(
    rows: list[dict[str, Any]],
    stamp: dict[str, str],
    command: str,
    diurnal_doc: dict[str, Any] | None = None,
) -> str:
    first = rows[0]
    day = first["day_requests"]
    lines = [
        "# Simulator speed",
        "",
        provenance.line(stamp),
        "",
        f"Generated by `{command}` on this machine (2 cores, shared with other jobs while "
        f"it ran). The slice: hour {PEAK_HOUR} of the ServeGen week (the busiest) at the "
        f"diurnal bench's scale x{first['scale']}: {first['requests']:,} requests. A day "
        f"at that scale (day 1) is {day:,} requests: 'a day' is that count divided by "
        "the slice's measured rate"
        + (
            "; the day itself, replayed whole, is the second table (measured: fewer "
            "requests per CPU-second than the busiest hour)"
            if any(r.get("whole_day") for r in rows)
            else " (not replayed here; `--day` replays it)"
        )
        + f". Target (issue 26): well under {TARGET_DAY_S:.0f} s a day per policy. "
        + diurnal_note(diurnal_doc),
        "",
    ]
    body = []
    for r in rows:
        if r["profiled"] or r.get("whole_day"):
            continue
        day_s = day / r["requests_per_cpu_s"]
        body.append(
            [
                r["engine"],
                r["policy"],
                f"{r['cpu_s']:.1f} s ({r['seconds']:.1f} s wall)",
                f"{r['requests_per_cpu_s']:,.0f} ({r['requests_per_s']:,.0f} wall)",
                f"{day_s:.0f} s",
                "yes" if day_s < TARGET_DAY_S else "no",
                f"{r['max_rss_gb']:.2f} GB",
            ]
        )
    lines += [
        "Rates are per CPU-second of the replay's process (the replay is one thread; the "
        "wall-clock figures, in brackets, include the time other jobs had the cores).",
        "",
        table(
            [
                "simulator",
                "policy",
                "slice replay, CPU",
                "requests/s",
                "a day",
                "meets",
                "peak RSS",
            ],
            body,
        ),
        "",
    ]
    whole = [r for r in rows if r.get("whole_day")]
    if whole:
        lines += [
            f"A whole day replayed (day 1 of the week at x{whole[0]['scale']}: "
            f"{whole[0]['requests']:,} requests, start-up 90 s; static-peak at day 1's "
            "busiest minute's size, pdscaler from the warm start, no pre-roll):",
            "",
            table(
                ["simulator", "policy", "replay, CPU", "requests/s", "peak RSS"],
                [
                    [
                        r["engine"],
                        r["policy"],
                        f"{r['cpu_s']:.1f} s ({r['seconds']:.1f} s wall)",
                        f"{r['requests_per_cpu_s']:,.0f} ({r['requests_per_s']:,.0f} wall)",
                        f"{r['max_rss_gb']:.2f} GB",
                    ]
                    for r in whole
                ],
            ),
            "",
        ]
    prof = next((r for r in rows if r["profiled"]), None)
    if prof is not None:
        total = sum(prof["profile_by_module_s"].values())
        shares = ", ".join(
            f"{m} {v / total:.0%}" for m, v in prof["profile_by_module_s"].items() if v > 0
        )
        lines += [
            f"Profile (cProfile, pure, {prof['policy']} on the slice, {prof['seconds']:.0f} s "
            f"under the profiler): own time by module: {shares}.",
            "",
            table(
                ["function", "own s", "cumulative s"],
                [[name, f"{tt:.1f}", f"{ct:.1f}"] for name, tt, ct in prof["profile_top"]],
            ),
            "",
        ]
    lines += [ENGINE_NOTE, ""]
    return "\n".join(lines)


#: What was done to engine.py for issue 26's speed target, and what is left. Every step
#: keeps the replays bit-identical (tests/unit/test_sim_identity.py: SHA-256 goldens of
#: every request's timings, every scrape, the timeline and the summaries, recorded
#: before the first step).
ENGINE_NOTE = """What the engine does per request now (issue 26, item 7; each step its own commit
with its measured gain, every replay bit-identical to the engine before them:
tests/unit/test_sim_identity.py): decode completions are no longer heap events (each
decode replica holds its next completion with the (time, seq) an entry would have had,
and the loop takes the first of them, found again by a scan only when it moved later);
hand-offs have their own small heap; the event loop reads module constants instead of
enum attributes; `_pick_decode` is one native loop instead of `min()` with an
attrgetter; the pool queues are a list read from an index instead of a deque; the
histogram buckets are a native binary search instead of `bisect` (faster compiled,
slower pure); the trace is converted by numpy on the way in and out. Left: each
request still costs a hand-off heap push and pop, about five float boxings into the
per-request columns, and the columns' conversion to arrays at the end; the pure-Python
build is slower than the compiled one by 3-4x and is only the fall-back."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS / "speed.md")
    p.add_argument("--no-compiled", action="store_true", help="pure Python only")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    p.add_argument("--render", action="store_true", help="re-render speed.md from speed.json")
    p.add_argument("--day", action="store_true", help="also replay day 1 whole (compiled)")
    args = p.parse_args(argv)
    day_doc = json.loads(DIURNAL.read_text(encoding="utf-8")) if DIURNAL.exists() else None
    if args.render:
        doc = json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8"))
        text = report(doc["rows"], doc[provenance.KEY], doc["command"], day_doc)
        args.out.write_text(text, "utf-8")
        return 0
    build = None if args.no_compiled else native.ensure()
    rows = []
    for target in (None, build) if build else (None,):
        for policy in POLICIES:
            rows.append(_child(policy, False, target))
            r = rows[-1]
            print(f"bench speed: {r['engine']}, {policy}: {r['requests_per_cpu_s']:,.0f}/CPU-s")
    if args.day and build:
        for policy in POLICIES:
            rows.append(_child(policy, False, build, day=True))
            r = rows[-1]
            print(f"bench speed: a whole day, {policy}: {r['cpu_s']:.1f} CPU-s")
    if not args.no_profile:
        rows.append(_child("pdscaler", True, None))
    stamp = provenance.measured_at()
    command = " ".join(["python -m bench.speed", *(argv or sys.argv[1:])])
    text = report(rows, stamp, command, day_doc)
    args.out.write_text(text, encoding="utf-8")
    args.out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "command": command, provenance.KEY: stamp}, indent=1) + "\n",
        encoding="utf-8",
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
