"""``pdscaler simulate --queue fcfs|deadline``: the engine's queue discipline, the same
for every policy; an unknown one is a one-line error (exit 2). ``--role-flips``: the
role-change actuator offered to pdscaler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pdscaler.sim.scenarios import mix_shift
from support.simulate_cli import as_json, azure_csv, simulate


def test_queue_deadline_runs_and_fcfs_is_the_default(tmp_path: Path) -> None:
    """The same small trace replays under both disciplines; fcfs equals no flag."""
    trace = str(azure_csv(tmp_path / "t.csv", seconds=120.0))
    common = ("--trace", trace, "--policy", "pdscaler", "--no-plot")
    plain = as_json(tmp_path, *common)
    fcfs = as_json(tmp_path, *common, "--queue", "fcfs")
    deadline = as_json(tmp_path, *common, "--queue", "deadline")
    assert fcfs["policies"] == plain["policies"]
    assert deadline["policies"]["pdscaler"]["requests"] == plain["policies"]["pdscaler"]["requests"]


def test_unknown_queue_is_an_error(tmp_path: Path) -> None:
    trace = str(azure_csv(tmp_path / "t.csv", seconds=30.0))
    result = simulate(tmp_path, "--trace", trace, "--queue", "lifo")
    assert result.exit_code == 2
    assert "--queue must be one of fcfs, deadline" in result.output


def test_profile_is_the_default_and_can_be_switched_off(tmp_path: Path) -> None:
    """``--profile`` (the default, as in the bench) gives pdscaler the engine's measured
    profile; ``--no-profile`` sizes with the constant priors; the JSON says which. A
    trace of 8,000-token prompts at 6 req/s: the constant 10,000 tok/s prices prefill
    ~38% above the 7,260 the profile reads there, so the two runs differ."""
    trace = str(azure_csv(tmp_path / "t.csv", seconds=180.0, rate=6.0, prompt=8000))
    common = ("--trace", trace, "--policy", "pdscaler", "--no-plot", "--startup", "30")
    plain = as_json(tmp_path, *common)
    on = as_json(tmp_path, *common, "--profile")
    off = as_json(tmp_path, *common, "--no-profile")
    assert on["policies"] == plain["policies"]
    assert (on["meta"]["profile"], off["meta"]["profile"]) == (True, False)
    assert on["policies"]["pdscaler"] != off["policies"]["pdscaler"]


def test_role_flips_are_off_by_default_and_flip_on_a_mix_shift(tmp_path: Path) -> None:
    """``--role-flips`` offers pdscaler role changes (docs/models.md 5a). On the demo's mix
    shift (10 minutes each of chat, long documents, a chat burst; start-up 300 s) the
    long documents make prefill short while decode has more than it needs, and the burst
    the reverse: replicas change role. Without the flag none do; the JSON says which."""
    shift = mix_shift(minutes=10.0, seed=0)
    t0 = datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t, p, o in zip(shift.arrival, shift.prompt, shift.output, strict=True):
        stamp = (t0 + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        rows.append(f"{stamp},{p},{o}")
    trace = tmp_path / "mix.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    common = ("--trace", str(trace), "--policy", "pdscaler", "--no-plot", "--startup", "300")
    off = as_json(tmp_path, *common)
    on = as_json(tmp_path, *common, "--role-flips")
    assert (off["meta"]["role_flips"], on["meta"]["role_flips"]) == (False, True)
    assert off["policies"]["pdscaler"]["role_flips"] == 0
    assert on["policies"]["pdscaler"]["role_flips"] > 0
    # --reconfigure is the engine's true time, not pdscaler's estimate: at 400 s, above
    # the 300 s start-up, a policy that knew it would never flip; it plans with 9 s.
    slow = as_json(tmp_path, *common, "--role-flips", "--reconfigure", "400")
    assert slow["meta"]["reconfigure_seconds"] == 400
    assert slow["policies"]["pdscaler"]["role_flips"] > 0
    assert slow["policies"]["pdscaler"] != on["policies"]["pdscaler"]
    result = simulate(tmp_path, *common, "--role-flips", "--reconfigure", "-1")
    assert result.exit_code == 2
    assert "--reconfigure must be a finite number of seconds >= 0" in result.output
