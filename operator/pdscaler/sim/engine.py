"""The serving model: a discrete-event simulation of one P/D disaggregated deployment.

Owns: prefill replicas (one FIFO pool queue, batches up to a token budget, fixed
per-batch overhead + tokens / throughput + each prompt's attention, quadratic in its own
length: ``EngineParams.prefill_seconds``), the KV hand-off latency, decode replicas
(continuous batching, step time ``a + b*batch + c*kv_tokens``, admission limited by
sequence slots and KV tokens, FIFO head-of-line wait when no slot is free), replica
life cycle (requested -> ready after the start-up time -> draining -> gone; or, for a
role change, ready -> draining -> ready in the other pool after the reconfiguration
time, ``Engine.flip``),
per-request timings, per-pod vLLM-like counters/gauges/histograms (summed per pool for
the simulated Prometheus), and GPU-seconds billed from the moment a replica is
requested until it is gone.
A request whose whole context (prompt + output) exceeds one decode replica's KV can
never be served: it is rejected on arrival (``RequestTimes.rejected``, its finish the
arrival, its first token never), counted (``Engine.unservable``) and never queued, so
it holds up nothing behind it.

Queue discipline (``EngineParams.queue_discipline``, both pools, every policy alike):
``fcfs`` serves in arrival order. ``deadline`` serves first the requests that can still
meet the TTFT (``ttft_deadline_s``): a request at the head of a queue whose wait plus
its own prefill time exceeds it is set aside on a late line (FIFO), served only when no
request that can still make it waits. With a 2 s TTFT, a prefill replica busy for 3 s
and requests arriving at 0 s and 2.5 s, ``fcfs`` serves the first (late: TTFT > 3 s)
then the second; ``deadline`` serves the second first.

Must not: read clocks, draw unseeded randomness, or import kopf, kubernetes,
prometheus_client or HTTP clients. Time is a float in seconds on the engine's clock.

Decode is event-driven, not stepped: between two events (an admission or a
completion) the batch is constant, so every running sequence gains one token per step
and a replica's cumulative step count ``S`` advances at ``1 / step_time``. A sequence
admitted at ``S0`` with ``L`` output tokens finishes when ``S = S0 + L``; the next
completion is one heap look-up away. Events per request are O(1): an hour of the
Azure conversation trace (19k requests) replays in about 0.4 s per policy.

Default calibration (TRUE engine, deliberately not the PDDeployment's priors): a
Llama-2-7B-class model in vLLM on one A100-80GB, from published profiles: prefill is
compute-bound and roughly linear in tokens (DistServe, OSDI'24, Fig. 2; Splitwise,
ISCA'24, §3) plus attention, quadratic in each prompt's own length; decode is
memory-bound, its step time growing with batch and context (vLLM, SOSP'23, §6;
Splitwise Fig. 6: TBT 20-45 ms at batch 32-128 for 7-13B models).

* Prefill: ~14 GFLOP per token at ~40% of 312 TFLOPS -> 8,500 prompt tokens/s, with a
  15 ms per-batch scheduling overhead and an 8,192-token batch budget (vLLM's
  ``max_num_batched_tokens`` order of magnitude). Attention
  (``prefill_attention_tokens``): a prompt of L tokens costs
  ``L / 8,500 * (1 + L / 53,400)`` seconds. Llama-2-7B has 32 layers of width
  d = 4,096; attention over a prompt is 2 * layers * d * L^2 = 262,144 L^2 FLOP (QK^T
  and AV, 2 L^2 d each per layer, halved by the causal mask) against the weights'
  ~14e9 L, so the quadratic term equals the linear one at L = 14e9 / 262,144 ~ 53,400
  tokens: +2.2% at 1,155 tokens (the chat mean), +22% at 12k, +30% at 16k, +236% at
  126k. ``math.inf`` switches it off (the linear cost). A batch pays the sum of its
  prompts' squares (each attends to itself only): 8 prompts of 1,024 tokens take
  15 + 964 + 18 = 997 ms, i.e. 8,215 tokens/s; one of 16,384 takes 15 + 1,928 + 591 =
  2,534 ms, i.e. 6,466 tokens/s (``prefill_profile_tps``). With short prompts a full
  8,192-token batch takes 15 + 964 = 979 ms, i.e. 8,370 tokens/s effective
  (``prefill_batch_tps``, the attention-free part).
* KV hand-off: 5 ms + 20 us/token (0.5 MB of fp16 KV per token over ~25 GB/s).
* Decode: step = 12 ms (reading 14 GB of weights at ~2 TB/s plus launch overhead)
  + 0.1 ms per sequence + 0.25 us per KV token in the batch (attention reads 0.5 MB
  per cached token at 2 TB/s); at most 256 sequences and 100,000 KV tokens (about
  60 GB of cache after weights). At 64 sequences x 1,260 context tokens a step takes
  12 + 6.4 + 20.2 = 38.6 ms -> ~1,660 output tokens/s.

The simulator's PDDeployment priors (``pdscaler.sim.setup``) are 10,000 prefill
tokens/s (the true 8,500 is 15% lower) and 1,400 decode tokens/s (the true ~1,700 at
the chat mix is ~20% higher), so the operator's online refinement matters.

These defaults are the hand-made engine. The measured ones (``pdscaler.sim.measured``,
``bench/engines/``: Qwen3-8B on an H100, Qwen3-32B on two H200s, Qwen3-30B-A3B on an
H200) are fitted to NVIDIA aiconfigurator's performance database and also set three
terms that are off here: a prefill floor, a decode compute line and a MoE experts term
(``measured_decode_step``; docs/models.md §2e).

Driving it. Offline (``pdscaler.sim.loop``): build with the whole trace, then alternate
``run_until(t)``, ``sample(t)`` and ``scale_to(role, n, t)``. Live, in wall-clock time
(the lab's engine simulator): build with ``initial=(0, 0)`` and an empty or partial
trace, then on each wall tick ``t = time.time() - t0`` call ``add_requests`` for the new
arrivals (at or after ``t``), ``add_replica(role, t, name=pod, ready_at=t)`` for a pod
that became Ready, ``remove_replica(pod, t)`` for one that went away, ``run_until(t)``
and ``pod_stats(t)`` for the per-pod series to export. Never call ``run_until`` with a
time earlier than ``now``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from heapq import heappop, heappush
from typing import Final

import numpy as np
import numpy.typing as npt

from pdscaler.models.profile import decode_context, prompt_for_context
from pdscaler.types import Role

#: vLLM's TTFT histogram buckets (``vllm:time_to_first_token_seconds``), seconds.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.inf,
)  # fmt: skip
#: vLLM's inter-token latency buckets (``vllm:inter_token_latency_seconds``).
TPOT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, math.inf,
)  # fmt: skip


def _bucket(bounds: tuple[float, ...], x: float) -> int:
    """``bisect.bisect_left(bounds, x)``: the histogram bucket of ``x`` (the first
    bound >= x; 0.3 s in ``TTFT_BUCKETS``: 9, the 0.5 s bucket). A binary search the
    compiled engine runs on native floats: on the busiest 15 minutes of the diurnal
    bench (5 searches per request) the compiled replay is 12% faster than with
    ``bisect`` (a call into C with a rich comparison per step), the pure one 12%
    slower."""
    lo = 0
    hi = len(bounds)
    while lo < hi:
        mid = (lo + hi) // 2
        if bounds[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: The queue disciplines of ``EngineParams.queue_discipline``.
QUEUE_DISCIPLINES = ("fcfs", "deadline")


@dataclass(frozen=True)
class EngineParams:
    """The TRUE capacities of one replica of each pool (see the module docstring)."""

    prefill_tps: float = 8500.0
    prefill_overhead_s: float = 0.015
    prefill_token_budget: int = 8192
    #: The prompt length at which a prompt's attention costs as much as its weights: a
    #: prompt of L tokens takes ``L / prefill_tps * (1 + L / prefill_attention_tokens)``
    #: seconds of compute (module docstring, Llama-2-7B: 53,400); ``math.inf``: linear.
    prefill_attention_tokens: float = 53_400.0
    kv_handoff_base_s: float = 0.005
    kv_handoff_s_per_token: float = 2e-5
    decode_step_base_s: float = 0.012
    decode_step_per_seq_s: float = 1e-4
    decode_step_per_kv_token_s: float = 2.5e-7
    decode_max_seqs: int = 256
    decode_kv_tokens: int = 100_000
    #: Measured engines only (``pdscaler.sim.measured``; 0 here: off, the hand-made
    #: engine is unchanged). A prefill batch of T tokens takes at least
    #: ``prefill_floor_s + prefill_floor_s_per_token * T`` besides attention: small
    #: batches are bound by reading the weights, not by compute (Qwen3-32B TP2 on H200:
    #: 128 tokens 15.4 ms where the closed form fitted alone says 12.9 ms).
    prefill_floor_s: float = 0.0
    prefill_floor_s_per_token: float = 0.0
    #: Measured MoE engines only (0 and 1 here: off). A decode step also reads the
    #: routed experts its batch activates: ``decode_step_moe_s * (1 - decode_moe_miss **
    #: batch)``, where ``decode_moe_miss`` is 1 - top_k / experts (Qwen3-30B-A3B: 1 - 8
    #: / 128 = 0.9375; a batch of 8 activates 1 - 0.9375^8 = 40% of the experts, one of
    #: 64 98%) and ``decode_step_moe_s`` the seconds to read them all.
    decode_step_moe_s: float = 0.0
    decode_moe_miss: float = 1.0
    #: Measured engines only (0 here: off). A large decode batch is compute-bound: its
    #: step, besides the KV, takes at least ``decode_step_compute_s_per_seq * batch``
    #: (Qwen3-32B TP2 on H200: 1,024 sequences of 288 tokens 62 ms a step, where the
    #: memory-bound line of the small batches says 46 ms).
    decode_step_compute_s_per_seq: float = 0.0
    prefill_gpus: int = 1
    decode_gpus: int = 1
    #: start-up time of a replica = startup * (1 + jitter * U(-1, 1)), seeded.
    startup_jitter: float = 0.1
    #: The order both pool queues serve in (``QUEUE_DISCIPLINES``): ``fcfs`` (arrival
    #: order) or ``deadline`` (a request that can no longer meet ``ttft_deadline_s``
    #: yields to one that can, module docstring). The same for every policy.
    queue_discipline: str = "fcfs"
    #: The TTFT the ``deadline`` discipline serves for (the scenario's TTFT SLO).
    ttft_deadline_s: float = 2.0
    #: Decode pods export their KV capacity (``decode_kv_tokens``) as vLLM does, in the
    #: labels of ``vllm:cache_config_info`` (``num_gpu_blocks`` x ``block_size``); False:
    #: an engine that does not (the policy's memory term is then off unless the spec
    #: sets ``decode.kvCacheTokens``).
    export_kv_capacity: bool = True

    def __post_init__(self) -> None:
        if self.queue_discipline not in QUEUE_DISCIPLINES:
            known = ", ".join(QUEUE_DISCIPLINES)
            raise ValueError(
                f"queue_discipline must be one of {known}, got {self.queue_discipline!r}"
            )
        if not self.ttft_deadline_s > 0:
            raise ValueError(f"ttft_deadline_s must be > 0, got {self.ttft_deadline_s!r}")
        if not self.prefill_attention_tokens > 0:  # NaN fails too; inf: no attention term
            raise ValueError(
                f"prefill_attention_tokens must be > 0 (inf: none), "
                f"got {self.prefill_attention_tokens!r}"
            )
        if not 0.0 <= self.decode_moe_miss <= 1.0:
            raise ValueError(f"decode_moe_miss must be in [0, 1], got {self.decode_moe_miss!r}")
        extra = {
            "prefill_floor_s": self.prefill_floor_s,
            "prefill_floor_s_per_token": self.prefill_floor_s_per_token,
            "decode_step_moe_s": self.decode_step_moe_s,
            "decode_step_compute_s_per_seq": self.decode_step_compute_s_per_seq,
        }
        for name, value in extra.items():
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether a request's whole context fits one decode replica's KV
        (docs/models.md §2b): 99,700 + 300 fits 100,000; 126,000 + 300 never does."""
        return prompt_tokens + output_tokens <= self.decode_kv_tokens

    def gpus(self, role: Role) -> int:
        return {Role.PREFILL: self.prefill_gpus, Role.DECODE: self.decode_gpus}[role]

    def decode_step(self, batch: int, kv_tokens: float) -> float:
        """Seconds per decode step: 64 sequences, 80,640 KV tokens -> 0.0386 s. A
        measured engine's extra terms: ``measured_decode_step``."""
        if self.decode_step_moe_s > 0.0 or self.decode_step_compute_s_per_seq > 0.0:
            return self.measured_decode_step(batch, kv_tokens)
        return (
            self.decode_step_base_s
            + self.decode_step_per_seq_s * batch
            + self.decode_step_per_kv_token_s * kv_tokens
        )

    def measured_decode_step(self, batch: int, kv_tokens: float) -> float:
        """A measured engine's decode step: the weights read (base, per sequence and,
        for a MoE model, the experts the batch activates) or, when larger, the batch's
        compute, plus the KV read. Qwen3-30B-A3B on H200: 8 sequences activate 1 -
        0.9375^8 = 40% of the experts."""
        memory = self.decode_step_base_s + self.decode_step_per_seq_s * batch
        if self.decode_step_moe_s > 0.0:
            memory += self.decode_step_moe_s * (1.0 - self.decode_moe_miss**batch)
        compute = self.decode_step_compute_s_per_seq * batch
        return max(memory, compute) + self.decode_step_per_kv_token_s * kv_tokens

    def prefill_seconds(self, tokens: float, square_tokens: float) -> float:
        """Seconds one prefill batch takes: the overhead, its ``tokens`` (the sum of its
        prompts' lengths) at ``prefill_tps`` and the attention of each prompt over
        itself (``square_tokens``: the sum of the squared lengths). One 16,000-token
        prompt: 0.015 + 1.882 + 16,000^2 / (8,500 x 53,400) = 0.015 + 1.882 + 0.564 =
        2.461 s; two of 4,000 in one batch: 0.015 + 0.941 + 0.071 = 1.027 s."""
        return self.prefill_linear_s(tokens) + self.prefill_attention_s(square_tokens)

    def prefill_linear_s(self, tokens: float) -> float:
        """Seconds of a prefill batch of ``tokens`` without attention: the overhead plus
        the tokens at ``prefill_tps``, at least the floor (measured engines): 8,192
        tokens 0.015 + 0.964 = 0.979 s with the defaults."""
        linear = self.prefill_overhead_s + tokens / self.prefill_tps
        floor = self.prefill_floor_s + self.prefill_floor_s_per_token * tokens
        return floor if floor > linear else linear

    def prefill_batch_tps(self) -> float:
        """Prompt tokens/s of one replica running full batches, without the attention
        term (short prompts; ``prefill_attention_s`` adds it): 8192 / (0.015 + 8192 /
        8500) = 8,370 tokens/s with the defaults."""
        budget = float(self.prefill_token_budget)
        return budget / self.prefill_linear_s(budget)

    def prefill_work_s(self, tokens: float, square_tokens: float) -> float:
        """Replica-seconds of prefill for prompts of ``tokens`` in all (squared lengths
        summing to ``square_tokens``) served in full batches: tokens / 8,370 plus their
        attention. One 16,000-token prompt: 1.912 + 0.564 = 2.476 s; per token of a
        1,155-token prompt: 1 / 8,370 + 1,155 / (8,500 x 53,400) = 1.2202e-4 s."""
        return tokens / self.prefill_batch_tps() + self.prefill_attention_s(square_tokens)

    def prefill_attention_s(self, square_tokens: float) -> float:
        """Seconds of attention of prompts whose squared lengths sum to
        ``square_tokens``: a 16,000-token prompt 16,000^2 / (8,500 x 53,400) = 0.564 s;
        0 with ``prefill_attention_tokens`` inf."""
        return square_tokens / (self.prefill_tps * self.prefill_attention_tokens)

    def prefill_profile_tps(self, prompt_tokens: float) -> float:
        """Prompt tokens/s of one replica serving full batches of prompts of
        ``prompt_tokens`` each (``k = max(1, budget // L)`` per batch), as a profiler
        sweeping the prompt length measures it: 1,024 tokens (8 a batch) 8,192 /
        (0.015 + 0.964 + 0.018) = 8,215 tokens/s; 8,192 (1) 8,192 / (0.015 + 0.964 +
        0.148) = 7,271; 16,384 (1) 16,384 / (0.015 + 1.928 + 0.591) = 6,466; 131,072
        2,460. Linear (inf): 8,370 at every length that packs the budget exactly."""
        length = max(1.0, float(prompt_tokens))
        k = max(1, int(self.prefill_token_budget // length))
        return k * length / self.prefill_seconds(k * length, k * length * length)

    def decode_operating_point(
        self, prompt_tokens: float, output_tokens: float, tpot_cap: float
    ) -> tuple[int, float]:
        """(batch, step seconds) of one decode replica at full load for a request mix:
        the largest batch that fits the KV (prompt + output reserved per sequence) and
        the sequence slots, with a step time <= ``tpot_cap``. Chat mix (1,155 + 211
        tokens, cap 50 ms): 73 sequences, step 12 + 7.3 + 22.9 = 42.2 ms."""
        ctx = max(1.0, decode_context(prompt_tokens, output_tokens))
        per_seq = max(1.0, prompt_tokens + output_tokens)
        batch = min(self.decode_max_seqs, max(1, int(self.decode_kv_tokens // per_seq)))
        while batch > 1 and self.decode_step(batch, batch * ctx) > tpot_cap:
            batch -= 1
        return batch, self.decode_step(batch, batch * ctx)

    def decode_tps(self, prompt_tokens: float, output_tokens: float, tpot_cap: float) -> float:
        """Sustainable output tokens/s of one decode replica for a request mix: batch /
        step at the operating point. Chat mix, 50 ms: 73 / 0.0422 = ~1,730 tokens/s.
        Used by the oracle and the work floor."""
        batch, step = self.decode_operating_point(prompt_tokens, output_tokens, tpot_cap)
        return batch / step

    def decode_profile_tps(
        self, context_tokens: float, tpot_cap: float, output_tokens: float = 256.0
    ) -> float:
        """Output tokens/s of one decode replica whose sequences hold a mean context of
        ``context_tokens`` (prompt + output / 2), as a profiler sweeping the context
        measures it: ``decode_tps`` at a prompt of ``context_tokens - output_tokens / 2``
        (at least 1). Cap 50 ms, 256 output tokens: 1,024 (prompt 896, 86 sequences by
        the KV, step 12 + 8.6 + 22.0 = 42.6 ms) 2,018 tokens/s; 8,192 (12, 37.8 ms) 318;
        65,536 (1, 12 + 0.1 + 16.4 = 28.5 ms) 35.1."""
        prompt = max(1.0, prompt_for_context(context_tokens, output_tokens))
        return self.decode_tps(prompt, output_tokens, tpot_cap)


class State(IntEnum):
    STARTING = 0
    READY = 1
    DRAINING = 2
    GONE = 3


def _zeros(n: int) -> list[float]:
    return [0.0] * n


@dataclass
class PodStats:
    """One pod's vLLM series (cumulative counters and histograms, current gauges).

    Names as vLLM exports them: ``request_success`` (``vllm:request_success_total``;
    on a prefill pod a request succeeds when its prefill is done, as vLLM's P/D proxy
    runs prefill with ``max_tokens=1``), ``prompt_tokens``/``generation_tokens``
    (``vllm:prompt_tokens_total``/``vllm:generation_tokens_total``), the per-request
    ``request_prompt_tokens``/``request_generation_tokens`` histograms as sum/count,
    ``ttft_*`` (``vllm:time_to_first_token_seconds``: on a prefill pod arrival ->
    prefill done; on a decode pod hand-off -> first token), ``itl_*``
    (``vllm:inter_token_latency_seconds``, one observation per token),
    ``request_tpot_*`` (``vllm:request_time_per_output_token_seconds``, one observation
    per finished request of more than one output token), and the gauges ``waiting``, ``running``
    and ``kv_usage`` (0-1). Histogram counts are per bucket (``TTFT_BUCKETS``/
    ``TPOT_BUCKETS``), not yet cumulative over ``le``. ``kv_capacity_tokens`` is the
    tokens of KV the pod holds (vLLM's ``num_gpu_blocks * block_size``, exported in the
    labels of ``vllm:cache_config_info``); 0: not exported.
    """

    request_success: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    request_prompt_tokens_sum: float = 0.0
    request_generation_tokens_sum: float = 0.0
    ttft_counts: list[float] = field(default_factory=lambda: _zeros(len(TTFT_BUCKETS)))
    ttft_sum: float = 0.0
    itl_counts: list[float] = field(default_factory=lambda: _zeros(len(TPOT_BUCKETS)))
    itl_sum: float = 0.0
    request_tpot_counts: list[float] = field(default_factory=lambda: _zeros(len(TPOT_BUCKETS)))
    request_tpot_sum: float = 0.0
    busy_s: float = 0.0
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    kv_capacity_tokens: float = 0.0

    def plus(self, other: PodStats | None) -> PodStats:
        """A new PodStats of this pod's series and ``other``'s load on the same pod (a
        served pod's real requests plus its synthetic ones): counters and the
        ``waiting``/``running`` gauges summed, KV usage summed up to 1, the KV capacity
        the pod's own (the larger: the same engine)."""
        out = PodStats()
        out.add(self)
        extra = other or PodStats()
        out.add(extra)
        out.waiting = self.waiting + extra.waiting
        out.running = self.running + extra.running
        out.kv_usage = min(1.0, self.kv_usage + extra.kv_usage)
        out.kv_capacity_tokens = max(self.kv_capacity_tokens, extra.kv_capacity_tokens)
        return out

    def add(self, other: PodStats) -> None:
        """Fold ``other``'s counters into this one (gauges are not summed)."""
        self.request_success += other.request_success
        self.prompt_tokens += other.prompt_tokens
        self.generation_tokens += other.generation_tokens
        self.request_prompt_tokens_sum += other.request_prompt_tokens_sum
        self.request_generation_tokens_sum += other.request_generation_tokens_sum
        self.ttft_sum += other.ttft_sum
        self.itl_sum += other.itl_sum
        self.busy_s += other.busy_s
        for i, c in enumerate(other.ttft_counts):
            self.ttft_counts[i] += c
        for i, c in enumerate(other.itl_counts):
            self.itl_counts[i] += c
        self.request_tpot_sum += other.request_tpot_sum
        for i, c in enumerate(other.request_tpot_counts):
            self.request_tpot_counts[i] += c


@dataclass
class Replica:
    """One replica of either pool; ``gone_at`` is None while it is billed."""

    ident: int
    name: str
    role: Role
    requested_at: float
    ready_at: float
    state: State = State.STARTING
    gone_at: float | None = None
    stats: PodStats = field(default_factory=PodStats)
    # prefill: the batch in progress
    batch: list[int] = field(default_factory=list)
    batch_tokens: int = 0
    # decode: cumulative step count and the running sequences (finish step, request)
    steps: float = 0.0
    last_t: float = 0.0
    kv_tokens: float = 0.0
    kv_reserved: int = 0
    step_s: float = 0.0
    finishing: list[tuple[float, int]] = field(default_factory=list)
    #: prefill: bumped to void the pending PREFILL_DONE
    version: int = 0
    #: decode: the next completion event, (time, seq) as it orders among the events of
    #: the heap (inf: none; ``Engine._reschedule``)
    armed_t: float = math.inf
    armed_seq: int = 0
    #: decode: the last ``Engine._dispatch_decode`` that admitted to it, and its step
    #: time after that call's admissions
    touched: int = 0
    admit_step_s: float = 0.0
    #: draining to change role (``Engine.flip``): the pool it joins, and the seconds
    #: from empty to serving there; ``flipped``: it came from the other pool (its
    #: readiness is no start-up sample)
    flip_to: Role | None = None
    flip_s: float = 0.0
    flipped: bool = False

    @property
    def work(self) -> int:
        """Requests held: the prefill batch or the running decode sequences."""
        return len(self.batch) if self.role is _PREFILL else len(self.finishing)


#: The kinds of the event heap's entries (hand-offs and decode completions are not on
#: it: ``Engine.run_until``, ``Engine._reschedule``). Module constants, not an enum:
#: the compiled engine reads them without an attribute look-up.
_READY_EV: Final = 0
_PREFILL_EV: Final = 1
#: Where ``run_until``'s next event comes from: the heap, the hand-offs' own heap
#: (``Engine._handoffs``: (time, seq, request), a few entries where the event heap
#: holds a batch per prefill replica) or the decode replicas' completions.
_HEAP: Final = 0
_HANDOFFS: Final = 1
_DECODES: Final = 2
#: ``State`` members, read in the event loop (likewise).
_STARTING: Final = State.STARTING
_READY: Final = State.READY
_DRAINING: Final = State.DRAINING
_PREFILL: Final = Role.PREFILL


@dataclass(frozen=True)
class RequestTimes:
    """Per-request timings (seconds on the engine's clock; NaN = never happened)."""

    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    prefill_start: FloatArray
    prefill_end: FloatArray
    decode_admit: FloatArray
    first_token: FloatArray
    finish: FloatArray
    #: Requests rejected on arrival because their context (prompt + output) does not
    #: fit one decode replica's KV: never servable (first token NaN, finish = arrival,
    #: the moment they were answered with an error). None: none was.
    rejected: BoolArray | None = None

    @property
    def unservable(self) -> int:
        """How many requests were rejected as unservable."""
        return 0 if self.rejected is None else int(np.sum(self.rejected))

    @property
    def ttft(self) -> FloatArray:
        return self.first_token - self.arrival

    @property
    def tpot(self) -> FloatArray:
        """(finish - first token) / (output - 1); 0 for one-token outputs."""
        steps = np.maximum(self.output - 1, 1).astype(np.float64)
        tp = (self.finish - self.first_token) / steps
        return np.where(self.output <= 1, np.where(np.isnan(self.finish), np.nan, 0.0), tp)

    @property
    def e2e(self) -> FloatArray:
        return self.finish - self.arrival


@dataclass(frozen=True)
class Sample:
    """What a Prometheus scrape of every pod would return at one instant, summed per
    pool (``prefill``/``decode``: counters over every pod the pool ever had, so they
    never go backwards; gauges over the live pods). ``requests_arrived`` is what a
    router in front would count (vLLM itself does not); ``client_ttft_hist`` is the
    end-to-end TTFT a frontend would observe (arrival -> first decode token)."""

    time: float
    requests_arrived: float
    prefill: PodStats
    decode: PodStats
    client_ttft_hist: FloatArray
    kv_usage: float
    prefill_ready: int
    decode_ready: int
    prefill_desired: int
    decode_desired: int
    decode_running_by_pod: dict[str, float]
    #: The smallest KV capacity the Ready decode pods export (0: none exports one).
    decode_kv_capacity_tokens: float = 0.0
    #: The sum of the end-to-end TTFTs counted in ``client_ttft_hist``, seconds.
    client_ttft_sum: float = 0.0


def _least_work_first(rep: Replica) -> tuple[int, int]:
    """The order replicas leave a pool in (drained or flipped): the least work held
    first, the newest among equals."""
    return (rep.work, -rep.ident)


def _no_cost(_: int) -> float:
    return 0.0


class _Queue:
    """One pool's queue of request indices, in the order ``EngineParams.
    queue_discipline`` serves them (module docstring). ``head(now)`` is the request to
    serve next, ``popleft()`` takes it (call ``head`` first). With a ``deadline`` a
    request at the head whose wait plus ``cost`` (its own service time) exceeds it is
    moved to the late line, served only when no request that can still make it waits:
    deadlines are arrival + TTFT, so arrival order is deadline order and lateness is
    checked at the head. Without a deadline: one FIFO.

    The on-time line is a list read from ``_pos`` (the served prefix is cut off once it
    is half the list and at least ``CUT`` long): the compiled engine indexes a list
    natively where a deque is a Python object to call."""

    CUT: Final = 4096

    def __init__(
        self, arrival: list[float], deadline: float | None, cost: Callable[[int], float]
    ) -> None:
        self._arrival = arrival
        self._deadline = deadline
        self._cost = cost
        self._on_time: list[int] = []
        self._pos = 0
        self._late: deque[int] = deque()
        self._from_late = False

    def __len__(self) -> int:
        return len(self._on_time) - self._pos + len(self._late)

    def waiting(self) -> bool:
        """Whether a request waits (a method, not ``__bool__``: the compiled engine
        calls it natively where a truth test goes through Python's protocol)."""
        return self._pos < len(self._on_time) or len(self._late) > 0

    def append(self, i: int) -> None:
        self._on_time.append(i)

    def appendleft(self, i: int) -> None:
        """Back to the front (work a lost replica held)."""
        if self._pos > 0:
            self._pos -= 1
            self._on_time[self._pos] = i
        else:
            self._on_time.insert(0, i)

    def head(self, now: float) -> int:
        """The next request to serve (the queue must not be empty)."""
        on_time = self._on_time
        if self._deadline is not None:
            arrival, cost, deadline = self._arrival, self._cost, self._deadline
            while self._pos < len(on_time):
                first = on_time[self._pos]
                if now - arrival[first] + cost(first) <= deadline:
                    break
                self._late.append(first)
                self._pos += 1
        self._from_late = self._pos >= len(on_time)
        return self._late[0] if self._from_late else on_time[self._pos]

    def popleft(self) -> int:
        """Take the request ``head`` returned."""
        if self._from_late:
            return self._late.popleft()
        pos = self._pos
        i = self._on_time[pos]
        pos += 1
        if pos >= self.CUT and 2 * pos >= len(self._on_time):
            del self._on_time[:pos]
            pos = 0
        self._pos = pos
        return i


class Engine:
    """The P/D system. Drive it with :meth:`run_until`, :meth:`scale_to` (or
    :meth:`add_replica`/:meth:`remove_replica`) and :meth:`sample`; it processes the
    trace's arrivals itself.

    ``startup_s`` is the true mean start-up time of a new replica. Initial replicas
    (``initial``: prefill, decode) are ready at t=0 and billed from t=0.
    """

    def __init__(
        self,
        arrival: Sequence[float] | FloatArray,
        prompt: Sequence[int] | IntArray,
        output: Sequence[int] | IntArray,
        params: EngineParams,
        *,
        startup_s: float,
        initial: tuple[int, int] = (1, 1),
        seed: int = 0,
    ) -> None:
        self.p = params
        self.startup_s = startup_s
        self._rng = random.Random(seed)
        self._arr: list[float] = []
        self._prompt: list[int] = []
        self._out: list[int] = []
        self._pf_start: list[float] = []
        self._pf_end: list[float] = []
        self._handoff: list[float] = []
        self._admit: list[float] = []
        self._first: list[float] = []
        self._finish: list[float] = []
        self._next_arrival = 0
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._handoffs: list[tuple[float, int, int]] = []
        self._seq = 0
        self.replicas: list[Replica] = []
        self._by_name: dict[str, Replica] = {}
        deadline = params.ttft_deadline_s if params.queue_discipline == "deadline" else None
        self._pf_queue = _Queue(self._arr, deadline, self._prefill_cost)
        self._dc_queue = _Queue(self._arr, deadline, _no_cost)
        self._rejected: list[bool] = []
        self._idle_prefill: list[Replica] = []
        self._ready_decode: list[Replica] = []
        self._live: dict[Role, list[Replica]] = {Role.PREFILL: [], Role.DECODE: []}
        self._live_decode = self._live[Role.DECODE]
        #: The decode replica whose completion comes first, its (time, seq); stale when
        #: ``_dmin_dirty`` (``_decode_next`` finds it again).
        self._dmin: Replica | None = None
        self._dmin_t = math.inf
        self._dmin_seq = 0
        self._dmin_dirty = False
        self._dispatches = 0
        self._retired: dict[Role, PodStats] = {Role.PREFILL: PodStats(), Role.DECODE: PodStats()}
        self._c_arrived = 0
        self._c_finished = 0
        self._client_ttft = _zeros(len(TTFT_BUCKETS))
        self._client_ttft_sum = 0.0
        self.startup_samples: dict[Role, list[float]] = {Role.PREFILL: [], Role.DECODE: []}
        self.add_requests(arrival, prompt, output)
        for role, count in ((Role.PREFILL, initial[0]), (Role.DECODE, initial[1])):
            for _ in range(count):
                self.add_replica(role, 0.0, ready_at=0.0)

    # ---------------------------------------------------------------- requests
    def add_requests(
        self,
        arrival: Sequence[float] | FloatArray,
        prompt: Sequence[int] | IntArray,
        output: Sequence[int] | IntArray,
    ) -> None:
        """Append requests (sorted, none earlier than the last one already added nor
        than ``now``). Outputs below 1 token count as 1. (Converted by numpy: the
        same floats and ints as ``float(x)``/``int(x)`` item by item, in a tenth of
        the time on a day's millions.)"""
        if not len(arrival) == len(prompt) == len(output):
            raise ValueError("arrival, prompt and output must have the same length")
        times = np.asarray(arrival, dtype=np.float64)
        new: list[float] = times.tolist()
        floor = max(self._arr[-1] if self._arr else -math.inf, self.now)
        if new and (new[0] < floor or bool(np.any(times[1:] < times[:-1]))):
            raise ValueError("arrivals must be sorted and not earlier than the engine's clock")
        n = len(new)
        self._arr.extend(new)
        self._prompt.extend(_ints(prompt).tolist())
        self._out.extend(np.maximum(_ints(output), 1).tolist())
        self._rejected.extend([False] * n)
        for column in (
            self._pf_start,
            self._pf_end,
            self._handoff,
            self._admit,
            self._first,
            self._finish,
        ):
            column.extend([math.nan] * n)

    @property
    def requests(self) -> int:
        return len(self._arr)

    # ---------------------------------------------------------------- life cycle
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heappush(self._events, (t, self._seq, kind, a, b))

    def add_replica(
        self,
        role: Role,
        now: float,
        *,
        name: str | None = None,
        ready_at: float | None = None,
    ) -> Replica:
        """Request one replica at ``now``; it serves from ``ready_at`` (default: after a
        jittered start-up time). ``name`` defaults to ``prefill-3``/``decode-7``."""
        if ready_at is None:
            jitter = self.p.startup_jitter * (2.0 * self._rng.random() - 1.0)
            ready_at = now + max(0.0, self.startup_s * (1.0 + jitter))
        ident = len(self.replicas)
        name = name if name is not None else f"{role.value}-{ident}"
        if name in self._by_name and self._by_name[name].state is not State.GONE:
            raise ValueError(f"replica {name} already exists")
        rep = Replica(ident, name, role, now, ready_at, last_t=now)
        self.replicas.append(rep)
        self._by_name[name] = rep
        self._live[role].append(rep)
        if ready_at <= now:
            self._make_ready(rep, record=now > 0.0 and ready_at > rep.requested_at)
        else:
            self._push(ready_at, _READY_EV, ident)
        return rep

    def _decode_next(self) -> None:
        """Find the decode replica whose completion comes first (least (time, seq))."""
        best: Replica | None = None
        best_t = math.inf
        best_seq = 0
        for r in self._live_decode:
            rt = r.armed_t
            if rt < best_t or (rt == best_t and rt < math.inf and r.armed_seq < best_seq):
                best, best_t, best_seq = r, rt, r.armed_seq
        self._dmin, self._dmin_t, self._dmin_seq = best, best_t, best_seq
        self._dmin_dirty = False

    def _make_ready(self, rep: Replica, *, record: bool = True) -> None:
        rep.state = State.READY
        rep.last_t = rep.ready_at
        if record and not rep.flipped:
            self.startup_samples[rep.role].append(rep.ready_at - rep.requested_at)
        if rep.role is _PREFILL:
            self._idle_prefill.append(rep)
            self._dispatch_prefill(rep.ready_at)
        else:
            self._ready_decode.append(rep)
            self._dispatch_decode(rep.ready_at)

    def _gone(self, rep: Replica, now: float) -> None:
        rep.state = State.GONE
        rep.gone_at = now
        rep.stats.waiting = rep.stats.running = rep.stats.kv_usage = 0.0
        self._live[rep.role].remove(rep)
        self._retired[rep.role].add(rep.stats)
        if rep.flip_to is not None:  # empty: it serves the other pool after flip_s
            new = self.add_replica(rep.flip_to, now, name=rep.name, ready_at=now + rep.flip_s)
            new.flipped = True

    def _stop_taking_work(self, rep: Replica) -> None:
        if rep in self._idle_prefill:
            self._idle_prefill.remove(rep)
        if rep in self._ready_decode:
            self._ready_decode.remove(rep)

    def remove_replica(self, name: str, now: float, *, lose: bool = False) -> None:
        """Take one replica away at ``now``. A starting one is cancelled; a ready one
        drains (takes no new work, is gone when what it holds is done) or, with
        ``lose=True`` (the pod died), is gone at once and its requests go back to the
        front of their pool's queue (decode ones are re-admitted from scratch)."""
        self.run_until(now)
        rep = self._by_name.get(name)
        if rep is None or rep.state is State.GONE:
            raise KeyError(f"no live replica named {name}")
        rep.flip_to = None  # taken away: it does not change role any more
        if rep.state is State.STARTING:
            self._gone(rep, now)
            return
        self._stop_taking_work(rep)
        rep.state = State.DRAINING
        if lose:
            self._lose_work(rep, now)
        if rep.work == 0:
            self._gone(rep, now)
        self._dispatch_prefill(now)
        self._dispatch_decode(now)

    def _lose_work(self, rep: Replica, now: float) -> None:
        if rep.role is Role.PREFILL:
            for i in reversed(rep.batch):
                self._pf_start[i] = math.nan
                self._pf_queue.appendleft(i)
            rep.batch = []
            rep.batch_tokens = 0
            rep.version += 1  # voids the pending PREFILL_DONE
            return
        self._advance(rep, now)
        for _, i in sorted(rep.finishing, reverse=True):
            self._admit[i] = self._first[i] = math.nan
            self._dc_queue.appendleft(i)
        rep.finishing = []
        rep.kv_tokens = 0.0
        rep.kv_reserved = 0
        rep.armed_t = math.inf
        if rep is self._dmin:
            self._dmin_dirty = True

    def pool(self, role: Role) -> list[Replica]:
        """Replicas of ``role`` that are not gone (starting, ready, draining)."""
        return list(self._live[role])

    def desired(self, role: Role) -> int:
        """Replicas asked for: starting + ready, and those draining from the other pool
        to join this one (``flip``); other draining ones are on their way out."""
        return sum(1 for r in self._live[role] if r.state in (State.STARTING, State.READY)) + len(
            self._flipping_to(role)
        )

    def _flipping_to(self, role: Role) -> list[Replica]:
        return [r for r in self._live[role.other] if r.flip_to is role]

    def flip(self, source: Role, n: int, now: float, reconfigure_s: float) -> int:
        """Move ``n`` ready replicas of ``source`` to the other pool (a role change, no
        cold start; docs/models.md §5a): the ones holding the least work stop taking
        new work at once, and each, once empty (decode: its sequences finished;
        prefill: its batch done), serves the other pool ``reconfigure_s`` later. It is
        billed throughout, in one pool then the other. Returns how many flip (at most
        the ready ones)."""
        self.run_until(now)
        ready = sorted(
            (r for r in self._live[source] if r.state is State.READY),
            key=_least_work_first,
        )[: max(0, n)]
        target = source.other
        for rep in ready:
            self._stop_taking_work(rep)
            rep.state = State.DRAINING
            rep.flip_to, rep.flip_s = target, reconfigure_s
            if rep.work == 0:
                self._gone(rep, now)
        self._dispatch_prefill(now)
        self._dispatch_decode(now)
        return len(ready)

    def ready(self, role: Role) -> int:
        return sum(1 for r in self._live[role] if r.state is State.READY)

    def queued(self, role: Role) -> int:
        """Requests waiting in the pool's queue (prefill: arrived; decode: handed off)."""
        return len({Role.PREFILL: self._pf_queue, Role.DECODE: self._dc_queue}[role])

    def scale_to(self, role: Role, n: int, now: float) -> None:
        """Ask for ``n`` replicas of ``role``. Up: new replicas start now and serve after
        the start-up time (replicas flipping in from the other pool count as asked
        for). Down: cancel starting replicas first (newest first), then the flips in
        (they drain away instead of joining), then drain the ready ones holding the
        least work (pod-deletion-cost, newest first among equals); a draining replica
        takes no new work and is gone when its work is done."""
        self.run_until(now)
        live = [r for r in self._live[role] if r.state in (State.STARTING, State.READY)]
        joining = self._flipping_to(role)
        for _ in range(n - len(live) - len(joining)):
            self.add_replica(role, now)
        remove = len(live) + len(joining) - n
        if remove <= 0:
            return
        starting = sorted(
            (r for r in live if r.state is State.STARTING), key=lambda r: -r.requested_at
        )
        for rep in starting[:remove]:
            self._gone(rep, now)
        remove -= min(remove, len(starting))
        for rep in joining[:remove]:
            rep.flip_to = None  # drains away instead of joining
        remove -= min(remove, len(joining))
        ready = sorted((r for r in live if r.state is State.READY), key=_least_work_first)
        for rep in ready[:remove]:
            self._stop_taking_work(rep)
            rep.state = State.DRAINING
            if rep.work == 0:
                self._gone(rep, now)

    # ---------------------------------------------------------------- main loop
    def run_until(self, t: float) -> None:
        """Process every arrival and event up to and including time ``t``."""
        arr = self._arr
        events = self._events
        inf = math.inf
        kv_limit = self.p.decode_kv_tokens  # ``EngineParams.fits``, inlined (hot loop)
        handoffs = self._handoffs
        while True:
            # The first event: the least (time, seq) of the heap's first, the first
            # hand-off and the first decode completion (``_reschedule``).
            source = _HEAP
            next_ev, next_seq = inf, 0
            if events:
                head = events[0]
                next_ev, next_seq = head[0], head[1]
            if handoffs:
                first = handoffs[0]
                if first[0] < next_ev or (first[0] == next_ev and first[1] < next_seq):
                    next_ev, next_seq, source = first[0], first[1], _HANDOFFS
            if self._dmin_dirty:
                self._decode_next()
            dec_t = self._dmin_t
            if dec_t < next_ev or (dec_t == next_ev and dec_t < inf and self._dmin_seq < next_seq):
                next_ev, source = dec_t, _DECODES
            next_arr = arr[self._next_arrival] if self._next_arrival < len(arr) else inf
            nxt = next_ev if next_ev <= next_arr else next_arr
            if nxt > t or nxt == inf:
                break
            if next_arr <= next_ev:
                i = self._next_arrival
                self._next_arrival += 1
                self.now = next_arr
                self._c_arrived += 1
                if self._prompt[i] + self._out[i] > kv_limit:
                    self._reject(i, next_arr)
                    continue
                self._pf_queue.append(i)
                if self._idle_prefill:
                    self._dispatch_prefill(next_arr)
                continue
            if source == _DECODES:
                self.now = dec_t
                rep = self._dmin
                assert rep is not None
                self._decode_event(rep, dec_t)
                continue
            if source == _HANDOFFS:
                ev_t, _, i = heappop(handoffs)
                self.now = ev_t
                self._handoff[i] = ev_t
                self._dc_queue.append(i)
                self._dispatch_decode(ev_t)
                continue
            ev_t, _, kind, a, b = heappop(events)
            self.now = ev_t
            if kind == _PREFILL_EV:
                rep = self.replicas[a]
                if b == rep.version:
                    self._prefill_done(rep, ev_t)
            else:
                rep = self.replicas[a]
                if rep.state is _STARTING:
                    self._make_ready(rep)
        self.now = max(self.now, t)

    def _prefill_cost(self, i: int) -> float:
        """Seconds request ``i``'s own prefill takes alone (the deadline discipline's
        lower bound on its TTFT from now): 8,500 tokens: 0.015 + 8,500 / 8,500 +
        8,500^2 / (8,500 x 53,400) = 0.015 + 1 + 0.159 = 1.174 s."""
        p = self._prompt[i]
        return self.p.prefill_seconds(p, p * p)

    def _reject(self, i: int, now: float) -> None:
        """Answer request ``i`` with an error on arrival: its context cannot fit one
        decode replica, so no pool size serves it (it never queues)."""
        self._rejected[i] = True
        self._finish[i] = now
        self._c_finished += 1

    @property
    def unservable(self) -> int:
        """Requests rejected so far because their context does not fit one replica."""
        return sum(self._rejected)

    def pending(self) -> bool:
        """True while any request added so far is unfinished (arrived or not)."""
        return self._c_finished < len(self._arr)

    def next_time(self) -> float:
        """Time of the next arrival or event (inf when nothing is left)."""
        nxt = self._arr[self._next_arrival] if self._next_arrival < len(self._arr) else math.inf
        if self._dmin_dirty:
            self._decode_next()
        handoff = self._handoffs[0][0] if self._handoffs else math.inf
        return min(nxt, self._events[0][0] if self._events else math.inf, handoff, self._dmin_t)

    # ---------------------------------------------------------------- prefill
    def _dispatch_prefill(self, now: float) -> None:
        budget = self.p.prefill_token_budget
        prompt = self._prompt
        queue = self._pf_queue
        while queue.waiting() and self._idle_prefill:
            rep = self._idle_prefill.pop()
            tokens = squares = 0
            batch: list[int] = []
            while queue.waiting():  # a prompt over the budget alone is a batch of its own
                nxt = prompt[queue.head(now)]
                if batch and tokens + nxt > budget:
                    break
                i = queue.popleft()
                batch.append(i)
                tokens += nxt
                squares += nxt * nxt
                self._pf_start[i] = now
            rep.batch = batch
            rep.batch_tokens = tokens
            dur = self.p.prefill_seconds(tokens, squares)
            rep.stats.busy_s += dur
            self._push(now + dur, _PREFILL_EV, rep.ident, rep.version)

    def _prefill_done(self, rep: Replica, now: float) -> None:
        base, per_tok = self.p.kv_handoff_base_s, self.p.kv_handoff_s_per_token
        st = rep.stats
        for i in rep.batch:
            self._pf_end[i] = now
            p = self._prompt[i]
            ttft = now - self._arr[i]
            st.ttft_counts[_bucket(TTFT_BUCKETS, ttft)] += 1
            st.ttft_sum += ttft
            self._seq += 1
            heappush(self._handoffs, (now + base + per_tok * p, self._seq, i))
        n = len(rep.batch)
        st.request_success += n
        st.prompt_tokens += rep.batch_tokens
        st.request_prompt_tokens_sum += rep.batch_tokens
        st.generation_tokens += n  # the one token a P/D prefill produces
        st.request_generation_tokens_sum += n
        rep.batch = []
        rep.batch_tokens = 0
        if rep.state is _DRAINING:
            self._gone(rep, now)
        elif rep.state is _READY:
            self._idle_prefill.append(rep)
            self._dispatch_prefill(now)

    # ---------------------------------------------------------------- decode
    def _advance(self, rep: Replica, now: float) -> None:
        """Move a decode replica's step counter to ``now`` at its current step time,
        counting the generated tokens and the inter-token latencies they observed."""
        dt = now - rep.last_t
        rep.last_t = now
        b = len(rep.finishing)
        if b == 0 or dt <= 0.0:
            return
        dn = dt / rep.step_s
        rep.steps += dn
        tokens = b * dn
        rep.kv_tokens += tokens
        st = rep.stats
        st.generation_tokens += tokens
        st.itl_counts[_bucket(TPOT_BUCKETS, rep.step_s)] += tokens
        st.itl_sum += tokens * rep.step_s

    def _reschedule(self, rep: Replica, now: float) -> None:
        """Arm the replica's next completion at its current step time (disarm it when
        it runs nothing). Completions are not on the event heap: each decode replica
        holds its own, with the (time, seq) an entry pushed now would have had, and
        ``run_until`` takes the first of them (``_dmin``, found again by a scan of the
        decode replicas only when it moved later or went) when it comes before the
        heap's first event, so events are processed in the same order as if every
        re-arm pushed an entry and voided the one before."""
        b = len(rep.finishing)
        if b == 0:
            rep.armed_t = math.inf
            if rep is self._dmin:
                self._dmin_dirty = True
            return
        self._arm(rep, now, self.p.decode_step(b, rep.kv_tokens))

    def _arm(self, rep: Replica, now: float, step_s: float) -> None:
        """``_reschedule`` of a replica that runs sequences, at the step time
        ``decode_step`` gives for them (``_dispatch_decode`` has it already)."""
        rep.step_s = step_s
        left = max(0.0, rep.finishing[0][0] - rep.steps)
        t = now + left * rep.step_s
        self._seq += 1
        rep.armed_t = t
        rep.armed_seq = self._seq
        if self._dmin_dirty:
            return
        if rep is self._dmin:
            if t < self._dmin_t:  # still the first
                self._dmin_t, self._dmin_seq = t, self._seq
            else:
                self._dmin_dirty = True
        elif t < self._dmin_t:  # at an equal time the older event (lower seq) stays first
            self._dmin, self._dmin_t, self._dmin_seq = rep, t, self._seq

    def _pick_decode(self, need: int) -> Replica | None:
        """The ready decode replica with the most free KV (least reserved) that has a
        free sequence slot, if ``need`` tokens fit in it (an empty replica takes any
        request). All replicas have the same KV size, so when the least-reserved one
        cannot take it, none can."""
        max_seqs = self.p.decode_max_seqs
        best: Replica | None = None  # the first least reserved (list order breaks ties)
        best_open: Replica | None = None  # the same among those with a free slot
        for r in self._ready_decode:
            reserved = r.kv_reserved
            if best is None or reserved < best.kv_reserved:
                best = r
            if len(r.finishing) < max_seqs and (
                best_open is None or reserved < best_open.kv_reserved
            ):
                best_open = r
        if best is None or len(best.finishing) >= max_seqs:
            best = best_open
            if best is None:
                return None
        if best.finishing and best.kv_reserved + need > self.p.decode_kv_tokens:
            return None
        return best

    def _dispatch_decode(self, now: float) -> None:
        """Admit queued hand-offs in FIFO order, each to the ready replica with the most
        free KV that fits it; stop at the first that fits nowhere (head-of-line)."""
        queue = self._dc_queue
        if not queue.waiting() or not self._ready_decode:
            return
        touched: list[Replica] = []  # in the order first admitted to (their re-arm order)
        self._dispatches += 1
        mark = self._dispatches
        while queue.waiting():
            i = queue.head(now)
            prompt, out = self._prompt[i], self._out[i]
            need = prompt + out
            best = self._pick_decode(need)
            if best is None:
                break
            queue.popleft()
            if best.touched != mark:
                self._advance(best, now)
                best.touched = mark
                touched.append(best)
            heappush(best.finishing, (best.steps + out, i))
            best.kv_tokens += prompt
            best.kv_reserved += need
            self._admit[i] = now
            step = self.p.decode_step(len(best.finishing), best.kv_tokens)
            best.admit_step_s = step  # its step once the admissions of this call are done
            first = now + step
            self._first[i] = first
            ttft = first - self._arr[i]
            self._client_ttft[_bucket(TTFT_BUCKETS, ttft)] += 1
            self._client_ttft_sum += ttft
            decode_ttft = first - self._handoff[i]
            best.stats.ttft_counts[_bucket(TTFT_BUCKETS, decode_ttft)] += 1
            best.stats.ttft_sum += decode_ttft
        for rep in touched:
            self._arm(rep, now, rep.admit_step_s)

    def _decode_event(self, rep: Replica, now: float) -> None:
        self._advance(rep, now)
        fin = rep.finishing
        st = rep.stats
        done = False
        while fin and fin[0][0] <= rep.steps + 1e-6:
            _, i = heappop(fin)
            prompt, out = self._prompt[i], self._out[i]
            self._finish[i] = now
            self._c_finished += 1
            st.request_success += 1
            st.request_prompt_tokens_sum += prompt
            st.request_generation_tokens_sum += out
            st.prompt_tokens += prompt
            if out > 1:  # vLLM: decode time / (output tokens - 1), per request
                tpot = (now - self._first[i]) / (out - 1)
                st.request_tpot_counts[_bucket(TPOT_BUCKETS, tpot)] += 1
                st.request_tpot_sum += tpot
            rep.kv_tokens = max(0.0, rep.kv_tokens - prompt - out)
            rep.kv_reserved -= prompt + out
            done = True
        if not fin:
            rep.kv_tokens = 0.0
        self._reschedule(rep, now)
        if done:
            if rep.state is _DRAINING and not fin:
                self._gone(rep, now)
            self._dispatch_decode(now)

    # ---------------------------------------------------------------- observation
    def pod_stats(self, now: float) -> dict[str, PodStats]:
        """Per live pod (starting ones included, with zero counters, as a pod that is
        not Ready yet exports nothing but is known): its series at ``now``. The pool
        queues are one FIFO each (a work-conserving router); their length is shared
        out over the pool's ready pods, the remainder to the first ones."""
        self.run_until(now)
        out: dict[str, PodStats] = {}
        for role, queue in ((Role.PREFILL, self._pf_queue), (Role.DECODE, self._dc_queue)):
            pods = self._live[role]
            takers = [r for r in pods if r.state is State.READY] or pods[:1]
            share, extra = divmod(len(queue), max(1, len(takers)))
            for rep in pods:
                rep.stats.waiting = 0.0
            for k, rep in enumerate(takers):
                rep.stats.waiting = float(share + (1 if k < extra else 0))
            for rep in pods:
                if self.p.export_kv_capacity:  # vLLM reports it in both roles
                    rep.stats.kv_capacity_tokens = float(self.p.decode_kv_tokens)
                if role is Role.DECODE:
                    self._advance(rep, now)
                    rep.stats.kv_usage = rep.kv_reserved / self.p.decode_kv_tokens
                rep.stats.running = float(rep.work)
                out[rep.name] = rep.stats
        return out

    def _pool_sum(self, role: Role, stats: dict[str, PodStats]) -> PodStats:
        total = PodStats()
        total.add(self._retired[role])
        for rep in self._live[role]:
            st = stats[rep.name]
            total.add(st)
            total.waiting += st.waiting
            total.running += st.running
        return total

    def sample(self, now: float) -> Sample:
        """Scrape every pod at ``now`` (runs the engine to ``now`` first)."""
        stats = self.pod_stats(now)
        decode_pods = [r for r in self._live[Role.DECODE] if r.state is not State.STARTING]
        kv = [stats[r.name].kv_usage for r in decode_pods]
        return Sample(
            time=now,
            requests_arrived=float(self._c_arrived),
            prefill=self._pool_sum(Role.PREFILL, stats),
            decode=self._pool_sum(Role.DECODE, stats),
            client_ttft_hist=np.array(self._client_ttft),
            client_ttft_sum=self._client_ttft_sum,
            kv_usage=sum(kv) / len(kv) if kv else 0.0,
            prefill_ready=self.ready(Role.PREFILL),
            decode_ready=self.ready(Role.DECODE),
            prefill_desired=self.desired(Role.PREFILL),
            decode_desired=self.desired(Role.DECODE),
            decode_running_by_pod={r.name: stats[r.name].running for r in decode_pods},
            decode_kv_capacity_tokens=min(
                (stats[r.name].kv_capacity_tokens for r in decode_pods), default=0.0
            ),
        )

    def gpu_seconds(self, until: float) -> dict[Role, float]:
        """GPU-seconds billed per pool up to ``until``: each replica from the moment it
        was requested until it is gone (or ``until``), times its GPUs."""
        out = {Role.PREFILL: 0.0, Role.DECODE: 0.0}
        for r in self.replicas:
            end = until if r.gone_at is None else min(r.gone_at, until)
            out[r.role] += self.p.gpus(r.role) * max(0.0, end - r.requested_at)
        return out

    def times(self) -> RequestTimes:
        n = len(self._arr)
        return RequestTimes(
            arrival=_floats(self._arr),
            prompt=np.fromiter(self._prompt, dtype=np.int64, count=n),
            output=np.fromiter(self._out, dtype=np.int64, count=n),
            prefill_start=_floats(self._pf_start),
            prefill_end=_floats(self._pf_end),
            decode_admit=_floats(self._admit),
            first_token=_floats(self._first),
            finish=_floats(self._finish),
            rejected=np.fromiter(self._rejected, dtype=np.bool_, count=n),
        )


def _ints(values: Sequence[int] | IntArray) -> IntArray:
    """Token counts as int64, truncated towards zero as ``int(x)`` would."""
    return np.asarray(values).astype(np.int64)


def _floats(column: list[float]) -> FloatArray:
    """A column of floats as an array (``np.fromiter``: a day's 9.4 million requests'
    column in ~0.1 s, where ``np.array`` first discovers the type of every item)."""
    return np.fromiter(column, dtype=np.float64, count=len(column))
