# mypy: ignore-errors
"""NVIDIA Dynamo's planner (ai-dynamo 1.6.1), run for the pdscaler simulator: one JSON
message a line on stdin, one answer a line on stdout. Runs in its own virtualenv
(bench/install-dynamo.sh: ai-dynamo pins pydantic <= 2.13.5, the operator's venv has a
newer one), with this directory first on ``sys.path`` for the ``aisimulate_core`` /
``aisimulate`` import shims (their docstrings say what they replace).

Everything that decides is Dynamo's own code: ``create_replay_planner_adapter`` (the
builtin local-planner orchestrator behind ``ReplayPlannerAdapter``), its
``initial_tick_ms`` / ``on_tick``, ``install_benchmark_fpms``, and the pre-deployment
profile generators of ``dynamo.replay.planner`` (``_generate_ais_prefill_fpms``,
``_generate_ais_decode_fpms``, ``_engine_caps``), which ask an AISimulate session for
single-request TTFTs and decode-step ITLs. That session is the one piece we supply
(``EngineSession``): it answers with the TRUE latencies of the simulated engine
(``EngineParams``), as the pdscaler bench's profile does for every policy.

Protocol (each message a JSON object on one line):

* ``{"op": "init", "planner": {...PlannerConfig fields}, "engine": {...}, "granularity": 8}``
  -> ``{"initial_tick_ms": float, "bootstrap": {...}}``. ``engine``: the
  ``EngineParams`` fields the session uses, plus ``block_size``.
* ``{"op": "tick", "result": {...}}`` (the replay loop's ScalingTick snapshot, the keys
  ``ReplayPlannerAdapter.on_tick`` reads) -> ``{"target_prefill", "target_decode",
  "next_tick_ms", "diag": {...}}``.
* ``{"op": "close"}`` -> ``{"closed": true}``, then exit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from importlib import metadata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dynamo.mocker.config import normalize_mocker_config
from dynamo.planner.config.planner_config import PlannerConfig
from dynamo.planner.core.types import WorkerCapabilities
from dynamo.planner.offline.replay_adapter import create_replay_planner_adapter
from dynamo.replay import planner as replay_planner

#: Distributions whose versions the init answer reports.
VERSIONED = ("ai-dynamo", "ai-dynamo-runtime", "aiconfigurator-core", "pydantic")


class EngineSession:
    """The AISimulate session the profile generators query, answering with the
    simulated engine's true latencies in ms (pdscaler.sim.engine.EngineParams):

    * ``predict_prefill(1, isl, 0)``: one prompt of ``isl`` tokens alone,
      ``prefill_overhead_s + isl / prefill_tps + isl^2 / (prefill_tps *
      prefill_attention_tokens)`` (1,155 tokens: 15 + 135.9 + 2.9 = 153.8 ms);
    * ``predict_decode(bs, ctx, osl)``: one decode step of ``bs`` sequences of
      ``ctx`` tokens each, ``decode_step_base_s + bs * decode_step_per_seq_s + bs * ctx
      * decode_step_per_kv_token_s`` (64 x 1,260: 12 + 6.4 + 20.2 = 38.6 ms).
    """

    def __init__(self, engine: dict) -> None:
        self.e = engine

    def prefill_s(self, tokens: float, square_tokens: float) -> float:
        e = self.e
        attention = square_tokens / (e["prefill_tps"] * e["prefill_attention_tokens"])
        return e["prefill_overhead_s"] + tokens / e["prefill_tps"] + attention

    def decode_s(self, batch: float, kv_tokens: float) -> float:
        e = self.e
        return (
            e["decode_step_base_s"]
            + e["decode_step_per_seq_s"] * batch
            + e["decode_step_per_kv_token_s"] * kv_tokens
        )

    def predict_prefill(self, bs: int, isl: int, prefix: int) -> float:
        return 1000.0 * self.prefill_s(bs * (isl - prefix), bs * (isl - prefix) ** 2)

    def predict_decode(self, bs: int, ctx: int, osl: int) -> float:
        return 1000.0 * self.decode_s(bs, bs * ctx)


def engine_args(engine: dict, role: str) -> dict:
    """The mocker engine arguments Dynamo's replay derives capabilities from."""
    block = int(engine["block_size"])
    return normalize_mocker_config(
        {
            "engine": {
                "num_gpu_blocks": int(engine["decode_kv_tokens"]) // block,
                "block_size": block,
                "max_num_batched_tokens": int(engine["prefill_token_budget"]),
                "max_num_seqs": int(engine["decode_max_seqs"]),
                "worker_type": role,
            },
            "tensor_parallel_size": int(engine[f"{role}_gpus"]),
        }
    )


class Planner:
    def __init__(self, msg: dict) -> None:
        engine = msg["engine"]
        config = PlannerConfig(**msg["planner"])
        config.advisory = True  # as prepare_planner_replay: the loop applies targets
        p_args, d_args = engine_args(engine, "prefill"), engine_args(engine, "decode")
        caps = WorkerCapabilities(
            prefill=replay_planner._engine_caps(p_args),
            decode=replay_planner._engine_caps(d_args),
        )
        self.adapter = create_replay_planner_adapter(
            planner_config=config,
            capabilities=caps,
            benchmark_granularity=msg.get("granularity", 8),
            capture_details=False,
        )
        granularity = msg.get("granularity", 8)
        session = EngineSession(engine)
        prefill = replay_planner._generate_ais_prefill_fpms(session, p_args, granularity)
        decode = replay_planner._generate_ais_decode_fpms(session, d_args, granularity)
        self.adapter.install_benchmark_fpms(prefill_fpms=prefill, decode_fpms=decode)
        self.bootstrap = {
            "versions": {n: metadata.version(n) for n in VERSIONED},
            "status": "installed",
            "prefill_fpm_count": len(prefill),
            "decode_fpm_count": len(decode),
            "fpm_sha256": replay_planner._ais_fpm_digest(prefill, decode),
        }
        self.adapter.set_bootstrap_metadata(self.bootstrap)
        # Keep each tick's PlannerEffects for the diagnostics we return (a read-only
        # wrapper around the engine's tick; on_tick itself is untouched).
        self.effects = None
        inner = self.adapter._engine.tick

        async def tick(scheduled, tick_input):
            self.effects = await inner(scheduled, tick_input)
            return self.effects

        self.adapter._engine.tick = tick
        self.adapter.__enter__()
        self.first_ms = self.adapter.initial_tick_ms()

    def tick(self, result: dict) -> dict:
        decision = self.adapter.on_tick(result)
        d = self.effects.diagnostics if self.effects is not None else None
        keep = (
            "throughput_lower_bound_prefill",
            "throughput_lower_bound_decode",
            "engine_rps_prefill",
            "engine_rps_decode",
            "estimated_ttft_ms",
            "estimated_itl_ms",
            "predicted_num_req",
            "load_decision_reason",
            "throughput_decision_reason",
        )
        diag = {k: getattr(d, k) for k in keep} if d is not None else {}
        return {**decision, "diag": diag}


def main() -> None:
    logging.basicConfig(level=os.environ.get("DYNAMO_WORKER_LOG", "ERROR"), stream=sys.stderr)
    planner = None
    # The protocol owns the real stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "init":
            planner = Planner(msg)
            answer = {"initial_tick_ms": planner.first_ms, "bootstrap": planner.bootstrap}
        elif op == "tick":
            answer = planner.tick(msg["result"])
        elif op == "close":
            if planner is not None:
                planner.adapter.close()
            out.write(json.dumps({"closed": True}) + "\n")
            out.flush()
            return
        else:
            answer = {"error": f"unknown op {op!r}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
