"""The serving model: a discrete-event simulation of one P/D disaggregated deployment.

Owns: prefill replicas (FIFO pool queue, batches up to a token budget, fixed per-batch
overhead + tokens / throughput), the KV hand-off latency, decode replicas (continuous
batching, step time ``a + b*batch + c*kv_tokens``, admission limited by sequence slots
and KV tokens, FIFO head-of-line wait when no slot is free), replica life cycle
(requested -> ready after the start-up time -> draining -> gone), per-request timings,
vLLM-like counters/gauges/histograms for the simulated Prometheus, and GPU-seconds
billed from the moment a replica is requested until it is gone.
Must not: read clocks, draw unseeded randomness, or import kopf, kubernetes,
prometheus_client or HTTP clients. Time is a float in seconds on the simulated clock.

Decode is event-driven, not stepped: between two events (an admission or a
completion) the batch is constant, so every running sequence gains one token per step
and a replica's cumulative step count ``S`` advances at ``1 / step_time``. A sequence
admitted at ``S0`` with ``L`` output tokens finishes when ``S = S0 + L``; the next
completion is one heap look-up away. Events per request are O(1), so an hour of the
Azure conversation trace (19k requests) replays in well under a second per policy.

Default calibration (TRUE engine, deliberately not the PDDeployment's priors): a
Llama-2-7B-class model in vLLM on one A100-80GB.

* Prefill: ~14 GFLOP per token at ~40% of 312 TFLOPS -> 8,500 prompt tokens/s, with a
  15 ms per-batch scheduling overhead and an 8,192-token batch budget (vLLM's
  ``max_num_batched_tokens`` order of magnitude; DistServe/Splitwise report prefill as
  compute-bound and roughly linear in tokens, which is what this assumes).
* KV hand-off: 5 ms + 20 us/token (0.5 MB of fp16 KV per token over ~25 GB/s).
* Decode: step = 12 ms (reading 14 GB of weights at ~2 TB/s plus launch overhead)
  + 0.1 ms per sequence + 0.25 us per KV token in the batch (attention reads 0.5 MB
  per cached token at 2 TB/s); at most 256 sequences and 100,000 KV tokens (about
  60 GB of cache after weights). At 64 sequences x 1,260 context tokens a step takes
  12 + 6.4 + 20.2 = 38.6 ms -> ~1,660 output tokens/s, in line with published vLLM
  7B/A100 decode numbers (TPOT 20-45 ms at batch 32-128).

The bench's PDDeployment priors are 10,000 prefill tokens/s (true is 15% lower) and
1,400 decode tokens/s (true is ~20% higher at the chat mix), so online refinement of
the capacities matters.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from pdscaler.types import Role

#: vLLM's TTFT histogram buckets (``vllm:time_to_first_token_seconds``), seconds.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.inf,
)  # fmt: skip
#: vLLM's inter-token latency buckets (``vllm:time_per_output_token_seconds``).
TPOT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, math.inf,
)  # fmt: skip

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EngineParams:
    """The TRUE capacities of one replica of each pool (see the module docstring)."""

    prefill_tps: float = 8500.0
    prefill_overhead_s: float = 0.015
    prefill_token_budget: int = 8192
    kv_handoff_base_s: float = 0.005
    kv_handoff_s_per_token: float = 2e-5
    decode_step_base_s: float = 0.012
    decode_step_per_seq_s: float = 1e-4
    decode_step_per_kv_token_s: float = 2.5e-7
    decode_max_seqs: int = 256
    decode_kv_tokens: int = 100_000
    prefill_gpus: int = 1
    decode_gpus: int = 1
    #: start-up time of a replica = startup * (1 + jitter * U(-1, 1)), seeded.
    startup_jitter: float = 0.1

    def decode_step(self, batch: int, kv_tokens: float) -> float:
        """Seconds per decode step: 64 sequences, 80,640 KV tokens -> 0.0386 s."""
        return (
            self.decode_step_base_s
            + self.decode_step_per_seq_s * batch
            + self.decode_step_per_kv_token_s * kv_tokens
        )

    def decode_tps(self, prompt_tokens: float, output_tokens: float, tpot_cap: float) -> float:
        """Sustainable output tokens/s of one decode replica for a request mix: the
        largest batch that fits the KV (prompt + output reserved per sequence), the
        sequence slots and a step time <= ``tpot_cap``, times 1/step. Used by the oracle
        and the work floor. Chat mix (1,155 + 211 tokens, cap 50 ms): 73 sequences,
        step 12 + 7.3 + 25.2 = 44.5 ms -> ~1,640 tokens/s."""
        ctx = max(1.0, prompt_tokens + output_tokens / 2.0)
        per_seq = max(1.0, prompt_tokens + output_tokens)
        batch = min(self.decode_max_seqs, max(1, int(self.decode_kv_tokens // per_seq)))
        while batch > 1 and self.decode_step(batch, batch * ctx) > tpot_cap:
            batch -= 1
        return batch / self.decode_step(batch, batch * ctx)


class State(IntEnum):
    STARTING = 0
    READY = 1
    DRAINING = 2
    GONE = 3


@dataclass
class Replica:
    """One replica of either pool; ``gone_at`` is None while it is billed."""

    ident: int
    role: Role
    requested_at: float
    ready_at: float
    state: State = State.STARTING
    gone_at: float | None = None
    # prefill
    batch: list[int] = field(default_factory=list)
    busy_s: float = 0.0
    # decode: cumulative step count and the running sequences (finish step, request)
    steps: float = 0.0
    last_t: float = 0.0
    kv_tokens: float = 0.0
    kv_reserved: int = 0
    step_s: float = 0.0
    finishing: list[tuple[float, int]] = field(default_factory=list)
    version: int = 0

    @property
    def work(self) -> int:
        """Requests held: the prefill batch or the running decode sequences."""
        return len(self.batch) if self.role is Role.PREFILL else len(self.finishing)


class _Ev(IntEnum):
    READY = 0
    PREFILL_DONE = 1
    HANDOFF = 2
    DECODE = 3


@dataclass(frozen=True)
class RequestTimes:
    """Per-request timings (seconds on the simulated clock; NaN = never happened)."""

    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    prefill_start: FloatArray
    prefill_end: FloatArray
    decode_admit: FloatArray
    first_token: FloatArray
    finish: FloatArray

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
    pool. Counters are cumulative since t=0; histograms are cumulative bucket counts
    (per bucket, not yet cumulative over ``le``)."""

    time: float
    requests_arrived: float
    prompt_tokens_arrived: float
    requests_finished: float
    output_tokens_finished: float
    prefill_tokens_done: float
    decode_tokens_done: float
    prefill_busy_s: float
    ttft_hist: FloatArray
    tpot_hist: FloatArray
    prefill_waiting: int
    prefill_running: int
    decode_waiting: int
    decode_running: int
    kv_usage: float
    prefill_ready: int
    decode_ready: int
    prefill_desired: int
    decode_desired: int
    decode_running_by_pod: dict[str, float]


class Engine:
    """The P/D system. Drive it with :meth:`run_until`, :meth:`scale_to` and
    :meth:`sample`; it processes the trace's arrivals itself.

    ``startup_s`` is the true mean start-up time of a new replica. Initial replicas
    (``initial``) are ready at t=0 and billed from t=0.
    """

    def __init__(
        self,
        arrival: FloatArray,
        prompt: IntArray,
        output: IntArray,
        params: EngineParams,
        *,
        startup_s: float,
        initial: tuple[int, int] = (1, 1),
        seed: int = 0,
    ) -> None:
        self.p = params
        self.startup_s = startup_s
        self._rng = random.Random(seed)
        self._arr: list[float] = [float(x) for x in arrival]
        self._prompt: list[int] = [int(x) for x in prompt]
        self._out: list[int] = [max(1, int(x)) for x in output]
        n = len(self._arr)
        nan = math.nan
        self._pf_start = [nan] * n
        self._pf_end = [nan] * n
        self._admit = [nan] * n
        self._first = [nan] * n
        self._finish = [nan] * n
        self._next_arrival = 0
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.replicas: list[Replica] = []
        self._pf_queue: deque[int] = deque()
        self._dc_queue: deque[int] = deque()
        self._idle_prefill: list[Replica] = []
        # counters
        self._c_arrived = 0
        self._c_prompt_arrived = 0
        self._c_finished = 0
        self._c_out_finished = 0
        self._c_pf_tokens = 0.0
        self._c_dc_tokens = 0.0
        self._c_pf_busy = 0.0
        self._ttft_hist = [0.0] * len(TTFT_BUCKETS)
        self._tpot_hist = [0.0] * len(TPOT_BUCKETS)
        self._pf_running = 0
        self.startup_samples: dict[Role, list[float]] = {Role.PREFILL: [], Role.DECODE: []}
        for role, count in ((Role.PREFILL, initial[0]), (Role.DECODE, initial[1])):
            for _ in range(count):
                rep = self._new_replica(role, 0.0, ready_at=0.0)
                self._make_ready(rep, record=False)

    # ---------------------------------------------------------------- life cycle
    def _push(self, t: float, kind: _Ev, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, int(kind), a, b))

    def _new_replica(self, role: Role, now: float, ready_at: float) -> Replica:
        rep = Replica(len(self.replicas), role, now, ready_at, last_t=now)
        self.replicas.append(rep)
        return rep

    def _make_ready(self, rep: Replica, *, record: bool = True) -> None:
        rep.state = State.READY
        rep.last_t = rep.ready_at
        if record:
            self.startup_samples[rep.role].append(rep.ready_at - rep.requested_at)
        if rep.role is Role.PREFILL:
            self._idle_prefill.append(rep)

    def pool(self, role: Role) -> list[Replica]:
        return [r for r in self.replicas if r.role is role and r.state is not State.GONE]

    def desired(self, role: Role) -> int:
        """Replicas asked for: starting + ready (draining ones are on their way out)."""
        return sum(
            1
            for r in self.replicas
            if r.role is role and r.state in (State.STARTING, State.READY)
        )

    def ready(self, role: Role) -> int:
        return sum(1 for r in self.replicas if r.role is role and r.state is State.READY)

    def scale_to(self, role: Role, n: int, now: float) -> None:
        """Ask for ``n`` replicas of ``role``. Up: new replicas start now and serve after
        the start-up time. Down: cancel starting replicas first (newest first), then
        drain the ready ones holding the least work (pod-deletion-cost); a draining
        replica takes no new work and is gone when its work is done."""
        self.run_until(now)
        live = [r for r in self.replicas if r.role is role and r.state in (State.STARTING, State.READY)]
        if n > len(live):
            for _ in range(n - len(live)):
                jitter = self.p.startup_jitter * (2.0 * self._rng.random() - 1.0)
                ready_at = now + max(0.0, self.startup_s * (1.0 + jitter))
                rep = self._new_replica(role, now, ready_at)
                self._push(ready_at, _Ev.READY, rep.ident)
            return
        remove = len(live) - n
        starting = sorted(
            (r for r in live if r.state is State.STARTING), key=lambda r: -r.requested_at
        )
        for rep in starting[:remove]:
            rep.state = State.GONE
            rep.gone_at = now
        remove -= min(remove, len(starting))
        ready = sorted((r for r in live if r.state is State.READY), key=lambda r: (r.work, -r.ident))
        for rep in ready[:remove]:
            rep.state = State.DRAINING
            if rep.role is Role.PREFILL and rep in self._idle_prefill:
                self._idle_prefill.remove(rep)
            if rep.work == 0:
                rep.state = State.GONE
                rep.gone_at = now
        if role is Role.DECODE:
            self._dispatch_decode(now)

    # ---------------------------------------------------------------- main loop
    def run_until(self, t: float) -> None:
        """Process every arrival and event up to and including time ``t``."""
        arr = self._arr
        n = len(arr)
        events = self._events
        while True:
            next_ev = events[0][0] if events else math.inf
            next_arr = arr[self._next_arrival] if self._next_arrival < n else math.inf
            if min(next_ev, next_arr) > t:
                break
            if next_arr <= next_ev:
                i = self._next_arrival
                self._next_arrival += 1
                self.now = next_arr
                self._c_arrived += 1
                self._c_prompt_arrived += self._prompt[i]
                self._pf_queue.append(i)
                if self._idle_prefill:
                    self._dispatch_prefill(next_arr)
                continue
            ev_t, _, kind, a, b = heapq.heappop(events)
            self.now = ev_t
            if kind == _Ev.READY:
                rep = self.replicas[a]
                if rep.state is State.STARTING:
                    self._make_ready(rep)
                    if rep.role is Role.PREFILL:
                        self._dispatch_prefill(ev_t)
                    else:
                        self._dispatch_decode(ev_t)
            elif kind == _Ev.PREFILL_DONE:
                self._prefill_done(self.replicas[a], ev_t)
            elif kind == _Ev.HANDOFF:
                self._dc_queue.append(a)
                self._dispatch_decode(ev_t)
            else:
                rep = self.replicas[a]
                if b == rep.version:
                    self._decode_event(rep, ev_t)
        self.now = max(self.now, t)

    def pending(self) -> bool:
        """True while any request is unfinished (arrived or not)."""
        return self._next_arrival < len(self._arr) or self._c_finished < len(self._arr)

    def next_time(self) -> float:
        """Time of the next arrival or event (inf when nothing is left)."""
        nxt = self._arr[self._next_arrival] if self._next_arrival < len(self._arr) else math.inf
        return min(nxt, self._events[0][0] if self._events else math.inf)

    # ---------------------------------------------------------------- prefill
    def _dispatch_prefill(self, now: float) -> None:
        budget = self.p.prefill_token_budget
        prompt = self._prompt
        while self._pf_queue and self._idle_prefill:
            rep = self._idle_prefill.pop()
            tokens = 0
            batch: list[int] = []
            while self._pf_queue:
                nxt = prompt[self._pf_queue[0]]
                if batch and tokens + nxt > budget:
                    break
                i = self._pf_queue.popleft()
                batch.append(i)
                tokens += nxt
                self._pf_start[i] = now
            rep.batch = batch
            self._pf_running += len(batch)
            dur = self.p.prefill_overhead_s + tokens / self.p.prefill_tps
            rep.busy_s += dur
            self._c_pf_busy += dur
            self._push(now + dur, _Ev.PREFILL_DONE, rep.ident)

    def _prefill_done(self, rep: Replica, now: float) -> None:
        base, per_tok = self.p.kv_handoff_base_s, self.p.kv_handoff_s_per_token
        for i in rep.batch:
            self._pf_end[i] = now
            self._c_pf_tokens += self._prompt[i]
            self._push(now + base + per_tok * self._prompt[i], _Ev.HANDOFF, i)
        self._pf_running -= len(rep.batch)
        rep.batch = []
        if rep.state is State.DRAINING:
            rep.state = State.GONE
            rep.gone_at = now
        elif rep.state is State.READY:
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
        rep.kv_tokens += b * dn
        self._c_dc_tokens += b * dn
        self._tpot_hist[bisect.bisect_left(TPOT_BUCKETS, rep.step_s)] += b * dn

    def _reschedule(self, rep: Replica, now: float) -> None:
        rep.version += 1
        b = len(rep.finishing)
        if b == 0:
            return
        rep.step_s = self.p.decode_step(b, rep.kv_tokens)
        left = max(0.0, rep.finishing[0][0] - rep.steps)
        self._push(now + left * rep.step_s, _Ev.DECODE, rep.ident, rep.version)

    def _fits(self, rep: Replica, need: int) -> bool:
        if len(rep.finishing) >= self.p.decode_max_seqs:
            return False
        return rep.kv_reserved + need <= self.p.decode_kv_tokens or not rep.finishing

    def _dispatch_decode(self, now: float) -> None:
        if not self._dc_queue:
            return
        ready = [r for r in self.replicas if r.role is Role.DECODE and r.state is State.READY]
        touched: set[int] = set()
        while self._dc_queue and ready:
            i = self._dc_queue[0]
            need = self._prompt[i] + self._out[i]
            best: Replica | None = None
            for r in ready:
                if self._fits(r, need) and (best is None or r.kv_reserved < best.kv_reserved):
                    best = r
            if best is None:
                break
            self._dc_queue.popleft()
            if best.ident not in touched:
                self._advance(best, now)
                touched.add(best.ident)
            heapq.heappush(best.finishing, (best.steps + self._out[i], i))
            best.kv_tokens += self._prompt[i]
            best.kv_reserved += need
            self._admit[i] = now
            step = self.p.decode_step(len(best.finishing), best.kv_tokens)
            best.step_s = step
            first = now + step
            self._first[i] = first
            ttft = first - self._arr[i]
            self._ttft_hist[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
        for ident in touched:
            self._reschedule(self.replicas[ident], now)

    def _decode_event(self, rep: Replica, now: float) -> None:
        self._advance(rep, now)
        fin = rep.finishing
        done = False
        while fin and fin[0][0] <= rep.steps + 1e-6:
            _, i = heapq.heappop(fin)
            self._finish[i] = now
            self._c_finished += 1
            self._c_out_finished += self._out[i]
            rep.kv_tokens = max(0.0, rep.kv_tokens - self._prompt[i] - self._out[i])
            rep.kv_reserved -= self._prompt[i] + self._out[i]
            done = True
        if not fin:
            rep.kv_tokens = 0.0
        self._reschedule(rep, now)
        if done:
            if rep.state is State.DRAINING and not fin:
                rep.state = State.GONE
                rep.gone_at = now
            self._dispatch_decode(now)

    # ---------------------------------------------------------------- observation
    def sample(self, now: float) -> Sample:
        """Scrape every pod at ``now`` (after :meth:`run_until`)."""
        running_by_pod: dict[str, float] = {}
        kv_used = 0
        kv_cap = 0
        dc_running = 0
        for r in self.replicas:
            if r.role is Role.DECODE and r.state in (State.READY, State.DRAINING):
                self._advance(r, now)
                self._reschedule(r, now)
                running_by_pod[f"decode-{r.ident}"] = float(len(r.finishing))
                kv_used += r.kv_reserved
                kv_cap += self.p.decode_kv_tokens
                dc_running += len(r.finishing)
        return Sample(
            time=now,
            requests_arrived=float(self._c_arrived),
            prompt_tokens_arrived=float(self._c_prompt_arrived),
            requests_finished=float(self._c_finished),
            output_tokens_finished=float(self._c_out_finished),
            prefill_tokens_done=self._c_pf_tokens,
            decode_tokens_done=self._c_dc_tokens,
            prefill_busy_s=self._c_pf_busy,
            ttft_hist=np.array(self._ttft_hist),
            tpot_hist=np.array(self._tpot_hist),
            prefill_waiting=len(self._pf_queue),
            prefill_running=self._pf_running,
            decode_waiting=len(self._dc_queue),
            decode_running=dc_running,
            kv_usage=kv_used / kv_cap if kv_cap else 0.0,
            prefill_ready=self.ready(Role.PREFILL),
            decode_ready=self.ready(Role.DECODE),
            prefill_desired=self.desired(Role.PREFILL),
            decode_desired=self.desired(Role.DECODE),
            decode_running_by_pod=running_by_pod,
        )

    def gpu_seconds(self, until: float) -> dict[Role, float]:
        """GPU-seconds billed per pool up to ``until``: each replica from the moment it
        was requested until it is gone (or ``until``), times its GPUs."""
        out = {Role.PREFILL: 0.0, Role.DECODE: 0.0}
        for r in self.replicas:
            end = until if r.gone_at is None else min(r.gone_at, until)
            gpus = self.p.prefill_gpus if r.role is Role.PREFILL else self.p.decode_gpus
            out[r.role] += gpus * max(0.0, end - r.requested_at)
        return out

    def times(self) -> RequestTimes:
        return RequestTimes(
            arrival=np.array(self._arr, dtype=np.float64),
            prompt=np.array(self._prompt, dtype=np.int64),
            output=np.array(self._out, dtype=np.int64),
            prefill_start=np.array(self._pf_start),
            prefill_end=np.array(self._pf_end),
            decode_admit=np.array(self._admit),
            first_token=np.array(self._first),
            finish=np.array(self._finish),
        )
