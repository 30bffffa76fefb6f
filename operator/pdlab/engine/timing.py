"""The timing of one simulated engine pod: its prefill and decode replicas as queues in
wall-clock time (asyncio), with ``pdscaler.sim.engine.EngineParams``' timing, writing the
pod's series (``PodStats``) as vLLM would.

Owns: ``PrefillModel`` (one FIFO queue served in batches up to the token budget, each
batch taking ``prefill_seconds(tokens, sum of squared prompts)``: overhead + tokens /
prefill_tps + each prompt's attention) and ``DecodeModel`` (continuous batching, one
token per running sequence per step of ``decode_step(batch, kv_tokens)``, admission FIFO
under ``decode_max_seqs`` and ``decode_kv_tokens``): the TTFT histogram, an inter-token
latency per token after the first, a per-request TPOT (decode time / (output tokens -
1)) when a request of more than one token finishes, the queue and running gauges.
Must not: serve HTTP or know a protocol (``pdlab.engine.serve`` and
``pdlab.engine.dialect`` do).

    prefill = PrefillModel(EngineParams(), stats)   # its run() task in the pod's loop
    ttft = await prefill.prefill(120)                # once 120 tokens are prefilled
    async for n in DecodeModel(params, stats).decode(120, 16): ...   # n = 1..16
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS, EngineParams, PodStats


@dataclass
class _PrefillJob:
    tokens: int
    arrival: float
    done: asyncio.Future[float]


class PrefillModel:
    """One prefill replica: a FIFO queue served in batches (module docstring)."""

    def __init__(self, params: EngineParams, stats: PodStats) -> None:
        self.p = params
        self.stats = stats
        self.queue: deque[_PrefillJob] = deque()
        self.batch = 0
        self._wake = asyncio.Event()

    async def prefill(self, tokens: int) -> float:
        """Wait for this prompt's prefill; its time to first token (seconds)."""
        job = _PrefillJob(tokens, time.monotonic(), asyncio.get_running_loop().create_future())
        self.queue.append(job)
        self.stats.waiting = float(len(self.queue))
        self._wake.set()
        return await job.done

    async def run(self) -> None:
        st = self.stats
        while True:
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = [self.queue.popleft()]
            tokens = batch[0].tokens
            squares = tokens * tokens
            while self.queue and tokens + self.queue[0].tokens <= self.p.prefill_token_budget:
                tokens += self.queue[0].tokens
                squares += self.queue[0].tokens ** 2
                batch.append(self.queue.popleft())
            st.waiting, st.running = float(len(self.queue)), float(len(batch))
            dur = self.p.prefill_seconds(tokens, squares)
            st.busy_s += dur
            await asyncio.sleep(dur)
            now = time.monotonic()
            for job in batch:
                ttft = now - job.arrival
                st.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
                st.ttft_sum += ttft
                st.request_success += 1
                st.prompt_tokens += job.tokens
                st.request_prompt_tokens_sum += job.tokens
                st.generation_tokens += 1
                st.request_generation_tokens_sum += 1
                if not job.done.done():
                    job.done.set_result(ttft)
            st.running = 0.0
            st.waiting = float(len(self.queue))


@dataclass
class _Seq:
    prompt: int
    output: int
    arrival: float
    tokens: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    produced: int = 0
    #: when its first token came out (monotonic), for its per-request TPOT
    first: float = 0.0

    @property
    def need(self) -> int:
        return self.prompt + self.output


class DecodeModel:
    """One decode replica: continuous batching under slot and KV limits."""

    def __init__(self, params: EngineParams, stats: PodStats) -> None:
        self.p = params
        self.stats = stats
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.kv_tokens = 0.0
        self.kv_reserved = 0
        self._wake = asyncio.Event()

    async def decode(self, prompt: int, output: int) -> AsyncIterator[int]:
        """Admit a sequence whose KV is here; yield 1, 2, ... as its tokens come out."""
        seq = _Seq(prompt, max(1, output), time.monotonic())
        self.waiting.append(seq)
        self._gauges()
        self._wake.set()
        for _ in range(seq.output):
            yield await seq.tokens.get()

    def _gauges(self) -> None:
        st = self.stats
        st.waiting, st.running = float(len(self.waiting)), float(len(self.running))
        st.kv_usage = self.kv_reserved / self.p.decode_kv_tokens

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.p.decode_max_seqs:
            seq = self.waiting[0]
            if self.running and self.kv_reserved + seq.need > self.p.decode_kv_tokens:
                break  # head-of-line: FIFO, as the model's admission
            self.waiting.popleft()
            self.running.append(seq)
            self.kv_tokens += seq.prompt
            self.kv_reserved += seq.need
        self._gauges()

    async def run(self) -> None:
        st = self.stats
        while True:
            self._admit()
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                continue
            step = self.p.decode_step(len(self.running), self.kv_tokens)
            t0 = time.monotonic()
            await asyncio.sleep(step)
            now = time.monotonic()
            took = now - t0
            st.busy_s += took
            still: list[_Seq] = []
            for seq in self.running:
                seq.produced += 1
                self.kv_tokens += 1
                st.generation_tokens += 1
                if seq.produced == 1:
                    seq.first = now
                    ttft = now - seq.arrival
                    st.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
                    st.ttft_sum += ttft
                else:
                    st.itl_counts[bisect.bisect_left(TPOT_BUCKETS, took)] += 1
                    st.itl_sum += took
                seq.tokens.put_nowait(seq.produced)
                if seq.produced >= seq.output:
                    st.request_success += 1
                    st.prompt_tokens += seq.prompt
                    st.request_prompt_tokens_sum += seq.prompt
                    st.request_generation_tokens_sum += seq.output
                    if seq.output > 1:  # vLLM: decode time / (output tokens - 1), per request
                        tpot = (now - seq.first) / (seq.output - 1)
                        st.request_tpot_counts[bisect.bisect_left(TPOT_BUCKETS, tpot)] += 1
                        st.request_tpot_sum += tpot
                    self.kv_tokens = max(0.0, self.kv_tokens - seq.need)
                    self.kv_reserved -= seq.need
                else:
                    still.append(seq)
            self.running = still
            if not still:
                self.kv_tokens = 0.0
