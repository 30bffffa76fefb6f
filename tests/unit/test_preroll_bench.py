"""Issue 26, set-up error 2 on the hour bench (bench/quality.py): "every dynamic policy
starts from one warm start made from the constant priors, without the profile or the
KV term, while static-best and the oracle start at their own size". Fair starts: the
config the bench replays its dynamic policies with pre-rolls 10 minutes of the hour's
own traffic (``LoopConfig.preroll_s`` with ``traces.with_preroll``), scored apart.

This test FAILS on the bench as of the commit that added it (``quality.config`` sets no
pre-roll: preroll_s 0.0); it passes once bench/quality.py replays its dynamic policies
with one (its owner's change)."""

from __future__ import annotations

from bench import quality

#: The hour traces' pre-roll (issue 26 item 4): 10 minutes before the scored hour.
HOUR_PREROLL_S = 600.0


def test_the_hour_bench_pre_rolls_its_dynamic_policies() -> None:
    group = quality.Group("conv", 4.0)
    for startup in (30.0, 90.0, 300.0):
        cfg = quality.config(group, startup, 0)
        assert cfg.preroll_s >= HOUR_PREROLL_S, (startup, cfg.preroll_s)
