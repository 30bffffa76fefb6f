"""The simulator's speed on the diurnal bench's traffic: requests replayed per second,
pure Python and compiled (bench/native.py), for pdscaler and a static policy, and
where the time goes. ``python -m bench.speed`` writes ``bench/results/speed.md``.

Owns: the measurement (``measure``: one policy on one slice in a fresh process, so its
peak memory is its own), the profile (cProfile of pdscaler on the same slice, pure,
summed per module) and the report. Must not: report a figure it did not measure; the
day figures are the measured rate applied to a day's requests, and say so.

The slice: the busiest hour of the ServeGen week (hour 27, day 1 03:00-04:00) at the
diurnal bench's scale (bench.diurnal.bench_scale: x70 on the default engine), 829,010
requests, the pools at their largest; pdscaler starts it cold (the warm start), the
static policy at static-peak's size for that hour. Issue 26's target: a day at the
bench's scale (day 1: 9.40 million requests) replays per policy in well under a minute
on 2 cores, i.e. about 160,000 requests/s or more.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import native, provenance
from bench.markdown import table

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
#: The slice: hour 27 of the week (the busiest), one hour.
PEAK_HOUR = 27
SLICE_HOURS = 1.0
POLICIES = ("static-peak", "pdscaler")
#: The issue's target, requests/s: a 9.4-million-request day in under a minute.
TARGET_DAY_S = 60.0
#: Modules of the simulator whose share of the profile is reported.
MODULES = ("engine", "loop", "observe", "prom", "results", "traces", "policy", "other")


def _slice(hour: int, hours: float) -> tuple[Any, Any, int, int]:
    """(trace, LoopConfig, scale, requests of day 1 at the scale) of the slice."""
    from bench import diurnal
    from pdscaler.sim.traces import days, load_diurnal, scale_rate

    plan = diurnal.Plan()
    week = load_diurnal(Path(plan.trace_path))
    params = diurnal.ENGINES["default"]()
    scale, _ = diurnal.scale_for(plan, week, params)
    start = hour * 3600.0
    trace = scale_rate(week.window(start, start + hours * 3600.0), scale, seed=0)
    return trace, diurnal.loop_config(params, 90.0, 0), scale, len(days(week, 1)) * scale


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


def measure(policy: str, profile: bool = False) -> dict[str, Any]:
    """Replay ``policy`` on the slice in this process: seconds, requests/s, peak RSS,
    and with ``profile`` the cProfile seconds per module and the top functions."""
    from pdscaler.sim.loop import run
    from pdscaler.sim.results import summarize

    trace, cfg, scale, day = _slice(PEAK_HOUR, SLICE_HOURS)
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
        "engine": native.engine_label(),
        "requests": len(trace),
        "scale": scale,
        "day_requests": day,
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


def _child(policy: str, profile: bool, build: Path | None) -> dict[str, Any]:
    """``measure`` in a fresh process on the pure modules or the compiled ``build``."""
    env = {**os.environ, native.MARKER: str(build) if build else "off"}
    env["PYTHONPATH"] = os.pathsep.join([str(build), str(REPO)] if build else [str(REPO)])
    code = (
        "import json; from bench.speed import measure; "
        f"print(json.dumps(measure({policy!r}, {profile!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(" ".join(done.stderr.split()[-40:]))
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def report(rows: list[dict[str, Any]], stamp: dict[str, str], command: str) -> str:
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
        f"at that scale (day 1) is {day:,} requests: 'day' is that count divided by the "
        "measured rate (not replayed here; bench/results/diurnal.json has the full-day "
        f"replays). Target (issue 26): well under {TARGET_DAY_S:.0f} s a day per policy.",
        "",
    ]
    body = []
    for r in rows:
        if r["profiled"]:
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


#: What the profile says about engine.py (another part of issue 26 extends it, so it is
#: not changed here): where the time goes and what would take it away.
ENGINE_NOTE = """Where the time goes: the engine's event loop, not the replay loop (loop, observe,
prom, results and traces are under 1% together; since commit 84d0f32, after this
profile, `loop` builds the requests' times once per replay instead of twice). Per
request the engine takes its arrival from the sorted trace, shares a prefill-done
event with its batch, pops its own KV hand-off event, and re-arms its decode
replica's completion event at admission and at completion, leaving the old one in the
heap to be popped and dropped. What would take the time away, all in engine.py: (1)
hand the KV of a whole prefill batch off in one event (one batch's hand-offs are 5 ms +
20 us/token apart) and admit them in one `_dispatch_decode`, which today runs once per
request, each time with `_pick_decode`'s `min` over every ready decode replica (keep
them in a heap by reserved KV); (2) re-arm a replica's completion event only when its
next completion moves earlier (a later one lets the pending event fire, advance and
re-arm), about half the heap traffic of `_reschedule` and `_decode_event`; (3) keep the
FCFS queues as plain deques (`_Queue.__bool__` is a Python call per check in the pure
build: 2.4 million on this slice). Estimate, not measured: halving the engine's work
per request brings a compiled day from ~65 s to ~35 s, inside a minute but not well
under it; more needs fewer Python-level steps per request."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS / "speed.md")
    p.add_argument("--no-compiled", action="store_true", help="pure Python only")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    p.add_argument("--render", action="store_true", help="re-render speed.md from speed.json")
    args = p.parse_args(argv)
    if args.render:
        doc = json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8"))
        args.out.write_text(report(doc["rows"], doc[provenance.KEY], doc["command"]), "utf-8")
        return 0
    build = None if args.no_compiled else native.ensure()
    rows = []
    for target in (None, build) if build else (None,):
        for policy in POLICIES:
            rows.append(_child(policy, False, target))
            r = rows[-1]
            print(f"bench speed: {r['engine']}, {policy}: {r['requests_per_cpu_s']:,.0f}/CPU-s")
    if not args.no_profile:
        rows.append(_child("pdscaler", True, None))
    stamp = provenance.measured_at()
    command = " ".join(["python -m bench.speed", *(argv or sys.argv[1:])])
    text = report(rows, stamp, command)
    args.out.write_text(text, encoding="utf-8")
    args.out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "command": command, provenance.KEY: stamp}, indent=1) + "\n",
        encoding="utf-8",
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
