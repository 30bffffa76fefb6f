"""Measured engines: the simulator's TRUE engine fitted to a performance database's
answers for a real deployment (model, GPU kind, serving engine, tensor parallelism).

Owns: the sampling grids (``prefill_grid``: prompt length x batch within the token
budget; ``decode_grid``: prompt length x batch within the KV), the least-squares fits
of ``EngineParams``' closed forms to the answers (``fit_prefill``, ``fit_decode``, each
with its error: the largest and the mean relative error over the grid points),
``measure`` (answers -> a ``MeasuredEngine``), the JSON record of one
(``to_record``/``from_record``/``load_engine``: committed under ``bench/engines/``, read
without the database's package installed), and ``Recorded``, answers replayed from a
record (the unit tests' fixture). Must not: import the database's package (its I/O
edge, ``pdscaler.profiling.aic``, is the one ``Answers`` that asks it).

The fits, in seconds, with T the tokens of a prefill batch, Q the sum of its prompts'
squared lengths, B the sequences of a decode batch and K their KV tokens:

* prefill: ``max(o + T / tps, f0 + f1 * T) + Q / (tps * A)``: the hand-made engine's
  overhead, linear and attention terms, under a floor line (``prefill_floor_s``,
  ``prefill_floor_s_per_token``) for small batches that read weights more than they
  compute. The two lines are fitted on either side of a knee (the tokens of a batch of the grid),
  the knee that leaves the least squared relative error is kept; a floor that does not
  help is dropped (the closed form alone).
* decode: ``max(a + b * B [+ m * (1 - r ** B)], d * B) + c * K``: the closed form's
  weights read, for a MoE model plus the routed experts the batch activates (``r = 1 -
  top_k / experts``), under a compute line ``d`` for large batches
  (``decode_step_compute_s_per_seq``), plus the KV read. Fitted the same way, the knee
  a batch size.

Both minimise the squared RELATIVE error with non-negative coefficients (an exhaustive
active set: at most 4 coefficients). Golden (tests/fixtures/aic_qwen3_8b_h100.json,
Qwen3-8B in vLLM on one H100): the database says 8.63 ms for a 128-token prefill,
203.5 ms for 8,192 tokens, 10.99 ms a step for 64 sequences of 1,024 + 64 tokens; the
fitted engine 8.73 ms, 199.1 ms (41,137 tokens/s) and 10.48 ms, every prefill answer
within 2.2% and every decode answer within 8.3% (mean 1.4% and 2.8%).

Not from the database (stated in every record): the KV hand-off, ``KV_LINK_BYTES_S``
(25 GB/s, the hand-made engine's link) over the KV bytes a token holds on a replica,
plus the hand-made 5 ms; the queue discipline and start-up jitter (the defaults).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pdscaler.sim.engine import EngineParams

#: Bytes/s of the prefill -> decode KV link (the hand-made engine's 25 GB/s: 0.5 MB a
#: token in 20 us): not in the database, the same for every engine.
KV_LINK_BYTES_S = 25e9
#: The hand-made engine's label (``EngineParams()``: invented constants).
HANDMADE_LABEL = "hand-made: Llama-2-7B-class on one A100-80GB (invented constants)"
#: Prompt lengths and batch sizes the prefill grid draws from.
PREFILL_PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
PREFILL_BATCHES = (1, 2, 4, 8, 16, 32, 64)
#: Prompt lengths, batch sizes and output tokens of the decode grid.
DECODE_PROMPTS = (256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DECODE_BATCHES = (1, 8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
DECODE_OUTPUT = 64
#: The record's format version.
RECORD_VERSION = 1


@dataclass(frozen=True)
class Deployment:
    """What is measured: the model (a Hugging Face id the database knows), the GPU kind
    (``system``), the engine (``backend``: vllm, sglang, trtllm) and its parallelism,
    and the engine's flags that bound a replica: sequences a step (vLLM's
    ``--max-num-seqs``, 1,024 its default on a GPU of 70 GiB or more), tokens a prefill
    batch (``--max-num-batched-tokens``) and the share of GPU memory it takes."""

    model: str
    system: str
    backend: str = "vllm"
    tp: int = 1
    moe_tp: int | None = None
    moe_ep: int | None = None
    max_seqs: int = 1024
    max_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9


@dataclass(frozen=True)
class ModelFacts:
    """What the database says of the model and one replica's memory: the longest
    context, the MoE routing (``moe_miss`` = 1 - top_k / experts; 1.0 dense), the KV
    tokens a replica holds after weights, activations and runtime, and the KV bytes a
    token takes on the replica (all its GPUs)."""

    max_context: int
    moe_miss: float
    kv_tokens: int
    kv_bytes_per_token: int
    memory: dict[str, float]


class Answers(Protocol):
    """A performance database's answers for one deployment (times in seconds)."""

    def facts(self) -> ModelFacts: ...

    def prefill_s(self, prompt: int, batch: int) -> float: ...

    def decode_step_s(self, prompt: int, output: int, batch: int) -> float: ...

    def source(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PrefillSample:
    """One answer: ``batch`` prompts of ``prompt`` tokens prefilled in ``seconds``."""

    prompt: int
    batch: int
    seconds: float

    @property
    def tokens(self) -> float:
        return float(self.prompt * self.batch)

    @property
    def squares(self) -> float:
        return float(self.batch) * self.prompt * self.prompt


@dataclass(frozen=True)
class DecodeSample:
    """One answer: ``batch`` sequences of ``prompt`` tokens generating ``output`` more
    at ``step_s`` seconds a step (the mean over the steps)."""

    prompt: int
    output: int
    batch: int
    step_s: float

    @property
    def kv_tokens(self) -> float:
        """The batch's mean KV over its steps: B x (prompt + output / 2)."""
        return self.batch * (self.prompt + self.output / 2.0)


@dataclass(frozen=True)
class FitError:
    """Relative error of a fit over its grid points: ``|fit / answer - 1|``."""

    max_rel: float
    mean_rel: float
    points: int


@dataclass(frozen=True)
class PrefillFit:
    overhead_s: float
    tps: float
    attention_tokens: float
    floor_s: float
    floor_s_per_token: float
    error: FitError


@dataclass(frozen=True)
class DecodeFit:
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    moe_s: float
    compute_s_per_seq: float
    error: FitError


@dataclass(frozen=True)
class MeasuredEngine:
    """A deployment, the database's answers for it, and the engine fitted to them."""

    name: str
    deployment: Deployment
    facts: ModelFacts
    source: dict[str, Any]
    prefill_samples: tuple[PrefillSample, ...]
    decode_samples: tuple[DecodeSample, ...]
    prefill_fit: PrefillFit
    decode_fit: DecodeFit
    params: EngineParams

    @property
    def label(self) -> str:
        """``Qwen/Qwen3-32B on 2 x h200_sxm, vllm 0.24.0 (aiconfigurator 0.12.0)``."""
        d = self.deployment
        engine = f"{d.backend} {self.source.get('backend_version', '?')}"
        tool = f"{self.source.get('tool', '?')} {self.source.get('version', '?')}"
        return f"{d.model} on {d.tp} x {d.system}, {engine} ({tool})"


def prefill_grid(max_context: int, budget: int) -> tuple[tuple[int, int], ...]:
    """(prompt, batch) pairs: every batch of ``PREFILL_BATCHES`` whose tokens fit the
    budget, and one prompt a batch at every length up to the model's context. 40,960
    tokens, budget 8,192: 30 pairs, (128, 1) ... (128, 64), ..., (32768, 1)."""
    return tuple(
        (p, b)
        for p in PREFILL_PROMPTS
        if p < max_context
        for b in PREFILL_BATCHES
        if b == 1 or p * b <= budget
    )


def decode_grid(
    max_context: int, kv_tokens: int, max_seqs: int, output: int = DECODE_OUTPUT
) -> tuple[tuple[int, int], ...]:
    """(prompt, batch) pairs whose sequences fit the context, the KV and the sequence
    slots, and at each prompt the largest batch that does (where a loaded replica
    runs): 40,960 / 382,705 / 1,024 -> (256, 1) ... (256, 1024), (1024, 1) ...
    (1024, 256), (1024, 351), ..., (32768, 11)."""
    pairs: list[tuple[int, int]] = []
    for p in DECODE_PROMPTS:
        if p + output > max_context:
            continue
        most = min(max_seqs, kv_tokens // (p + output))
        pairs += [(p, b) for b in DECODE_BATCHES if b < most]
        if most >= 1:
            pairs.append((p, most))
    return tuple(pairs)


def _nnls_rel(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Non-negative coefficients minimising the squared relative error of
    ``sum(c_j * columns[j])`` against ``y``: every subset of the columns solved by least
    squares, the best whose coefficients are all >= 0 kept (exact for a few columns)."""
    x = np.array(columns, dtype=np.float64).T / np.array(y, dtype=np.float64)[:, None]
    ones = np.ones(x.shape[0])
    best: tuple[float, list[float]] | None = None
    n = x.shape[1]
    for k in range(1, n + 1):
        for subset in itertools.combinations(range(n), k):
            sol = np.linalg.lstsq(x[:, subset], ones, rcond=None)[0]
            if (sol < 0).any():
                continue
            coef = [0.0] * n
            for j, c in zip(subset, sol, strict=True):
                coef[j] = float(c)
            sse = float(np.sum((x @ np.array(coef) - ones) ** 2))
            if best is None or sse < best[0]:
                best = (sse, coef)
    if best is None:  # k = 1 always has a non-negative solution unless y < 0
        raise ValueError("no non-negative fit: an answer is not positive")
    return best[1]


def _error(predicted: Iterable[float], answers: Iterable[float]) -> FitError:
    rel = [abs(p / a - 1.0) for p, a in zip(predicted, answers, strict=True)]
    return FitError(max_rel=max(rel), mean_rel=sum(rel) / len(rel), points=len(rel))


def _prefill_predict(s: PrefillSample, line: Sequence[float], floor: Sequence[float]) -> float:
    compute = line[0] + line[1] * s.tokens
    bound = floor[0] + floor[1] * s.tokens
    return max(compute, bound) + line[2] * s.squares


def fit_prefill(samples: Sequence[PrefillSample]) -> PrefillFit:
    """The prefill closed form (module docstring) fitted to ``samples``: for each knee
    (a batch size of the samples, or none), the compute line and attention on the
    batches at or above it, the floor line on those below; the knee with the least
    squared relative error over all samples is kept."""
    if len(samples) < 3:
        raise ValueError(f"a prefill fit needs at least 3 samples, got {len(samples)}")
    y = [s.seconds for s in samples]
    best: tuple[float, list[float], list[float]] | None = None
    for knee in sorted({s.tokens for s in samples}):
        hi = [s for s in samples if s.tokens >= knee]
        lo = [s for s in samples if s.tokens < knee]
        if len(hi) < 3 or len(lo) == 1:
            continue
        line = _nnls_rel(
            [[1.0] * len(hi), [s.tokens for s in hi], [s.squares for s in hi]],
            [s.seconds for s in hi],
        )
        floor = [0.0, 0.0]
        if lo:
            floor = _nnls_rel(
                [[1.0] * len(lo), [s.tokens for s in lo]],
                [s.seconds - line[2] * s.squares for s in lo],
            )
        pred = [_prefill_predict(s, line, floor) for s in samples]
        sse = sum((p / a - 1.0) ** 2 for p, a in zip(pred, y, strict=True))
        if best is None or sse < best[0]:
            best = (sse, line, floor)
    assert best is not None  # the smallest knee always qualifies (3+ samples)
    _, line, floor = best
    if line[1] <= 0.0:
        raise ValueError("the prefill answers do not grow with the tokens")
    return PrefillFit(
        overhead_s=line[0],
        tps=1.0 / line[1],
        attention_tokens=line[1] / line[2] if line[2] > 0.0 else math.inf,
        floor_s=floor[0],
        floor_s_per_token=floor[1],
        error=_error([_prefill_predict(s, line, floor) for s in samples], y),
    )


def _decode_predict(
    s: DecodeSample, memory: Sequence[float], compute: float, moe_miss: float
) -> float:
    weights = memory[0] + memory[1] * s.batch + memory[3] * (1.0 - moe_miss**s.batch)
    return max(weights, compute * s.batch) + memory[2] * s.kv_tokens


def fit_decode(samples: Sequence[DecodeSample], moe_miss: float = 1.0) -> DecodeFit:
    """The decode step's closed form (module docstring) fitted to ``samples``, the
    experts' term with ``moe_miss`` < 1 (a MoE model): for each knee (a batch size of
    the samples, or none), the memory-bound form on the smaller batches, the compute
    line on the others; the knee with the least squared relative error is kept."""
    moe = moe_miss < 1.0
    width = 4 if moe else 3
    if len(samples) < width:
        raise ValueError(f"a decode fit needs at least {width} samples, got {len(samples)}")
    y = [s.step_s for s in samples]
    best: tuple[float, list[float], float] | None = None
    for knee in [math.inf, *sorted({s.batch for s in samples})]:
        lo = [s for s in samples if s.batch < knee]
        hi = [s for s in samples if s.batch >= knee]
        if len(lo) < width + 2:
            continue
        cols = [[1.0] * len(lo), [float(s.batch) for s in lo], [s.kv_tokens for s in lo]]
        if moe:
            cols.append([1.0 - moe_miss**s.batch for s in lo])
        memory = _nnls_rel(cols, [s.step_s for s in lo]) + ([] if moe else [0.0])
        compute = 0.0
        if hi:
            rest = [s.step_s - memory[2] * s.kv_tokens for s in hi]
            if min(rest) <= 0.0:
                continue
            compute = _nnls_rel([[float(s.batch) for s in hi]], rest)[0]
        pred = [_decode_predict(s, memory, compute, moe_miss) for s in samples]
        sse = sum((p / a - 1.0) ** 2 for p, a in zip(pred, y, strict=True))
        if best is None or sse < best[0]:
            best = (sse, memory, compute)
    assert best is not None  # no knee (all samples) always qualifies
    _, memory, compute = best
    return DecodeFit(
        base_s=memory[0],
        per_seq_s=memory[1],
        per_kv_token_s=memory[2],
        moe_s=memory[3],
        compute_s_per_seq=compute,
        error=_error([_decode_predict(s, memory, compute, moe_miss) for s in samples], y),
    )


def engine_params(
    deployment: Deployment, facts: ModelFacts, prefill: PrefillFit, decode: DecodeFit
) -> EngineParams:
    """The TRUE engine of one replica: the fits, the deployment's budget, slots and GPUs,
    the database's KV capacity, and the hand-off over ``KV_LINK_BYTES_S``."""
    return EngineParams(
        prefill_tps=prefill.tps,
        prefill_overhead_s=prefill.overhead_s,
        prefill_token_budget=deployment.max_batched_tokens,
        prefill_attention_tokens=prefill.attention_tokens,
        prefill_floor_s=prefill.floor_s,
        prefill_floor_s_per_token=prefill.floor_s_per_token,
        kv_handoff_s_per_token=facts.kv_bytes_per_token / KV_LINK_BYTES_S,
        decode_step_base_s=decode.base_s,
        decode_step_per_seq_s=decode.per_seq_s,
        decode_step_per_kv_token_s=decode.per_kv_token_s,
        decode_step_moe_s=decode.moe_s,
        decode_step_compute_s_per_seq=decode.compute_s_per_seq,
        decode_moe_miss=facts.moe_miss if decode.moe_s > 0.0 else 1.0,
        decode_max_seqs=deployment.max_seqs,
        decode_kv_tokens=facts.kv_tokens,
        prefill_gpus=deployment.tp,
        decode_gpus=deployment.tp,
    )


def measure(name: str, deployment: Deployment, answers: Answers) -> MeasuredEngine:
    """Ask ``answers`` over the grids, fit, and build the engine (about 60 questions)."""
    facts = answers.facts()
    pre = tuple(
        PrefillSample(p, b, answers.prefill_s(p, b))
        for p, b in prefill_grid(facts.max_context, deployment.max_batched_tokens)
    )
    dec = tuple(
        DecodeSample(p, DECODE_OUTPUT, b, answers.decode_step_s(p, DECODE_OUTPUT, b))
        for p, b in decode_grid(facts.max_context, facts.kv_tokens, deployment.max_seqs)
    )
    return assemble(name, deployment, facts, answers.source(), pre, dec)


def assemble(
    name: str,
    deployment: Deployment,
    facts: ModelFacts,
    source: dict[str, Any],
    pre: tuple[PrefillSample, ...],
    dec: tuple[DecodeSample, ...],
) -> MeasuredEngine:
    """A ``MeasuredEngine`` of answers already asked: fitted here."""
    pf = fit_prefill(pre)
    df = fit_decode(dec, facts.moe_miss)
    return MeasuredEngine(
        name=name,
        deployment=deployment,
        facts=facts,
        source=source,
        prefill_samples=pre,
        decode_samples=dec,
        prefill_fit=pf,
        decode_fit=df,
        params=engine_params(deployment, facts, pf, df),
    )


def _jsonable(value: float) -> float | None:
    return None if math.isinf(value) else value


def to_record(engine: MeasuredEngine) -> dict[str, Any]:
    """The JSON record of ``engine`` (``bench/engines/<name>.json``): the deployment,
    the tool and the calls it answered, the answers (milliseconds), the fits with their
    errors and the ``EngineParams`` (an infinite attention length is ``null``)."""
    params = asdict(engine.params)
    params["prefill_attention_tokens"] = _jsonable(engine.params.prefill_attention_tokens)
    pf = asdict(engine.prefill_fit)
    pf["attention_tokens"] = _jsonable(engine.prefill_fit.attention_tokens)
    return {
        "record_version": RECORD_VERSION,
        "name": engine.name,
        "label": engine.label,
        "deployment": asdict(engine.deployment),
        "source": engine.source,
        "facts": asdict(engine.facts),
        "prefill_ms": [[s.prompt, s.batch, s.seconds * 1e3] for s in engine.prefill_samples],
        "decode_ms": [[s.prompt, s.output, s.batch, s.step_s * 1e3] for s in engine.decode_samples],
        "fit": {"prefill": pf, "decode": asdict(engine.decode_fit)},
        "params": params,
        "not_measured": (
            "KV hand-off: 5 ms + the KV bytes of a token over 25 GB/s; queue discipline "
            "and start-up jitter: the simulator's defaults"
        ),
    }


def dumps_record(engine: MeasuredEngine) -> str:
    """``to_record`` as the file's text: indented JSON with every list of numbers (a
    sample) on one line."""
    text = json.dumps(to_record(engine), indent=1)
    return (
        re.sub(r"\[\s+([-0-9.e+,\s]+?)\s+\]", lambda m: f"[{' '.join(m[1].split())}]", text) + "\n"
    )


def _error_of(d: dict[str, Any]) -> FitError:
    return FitError(**d)


def from_record(record: dict[str, Any]) -> MeasuredEngine:
    """The engine of a record as written (no refit): ``EngineParams`` from its
    ``params``. Raises ``ValueError`` on another record version or unknown fields."""
    if record.get("record_version") != RECORD_VERSION:
        raise ValueError(
            f"record_version {record.get('record_version')!r}, expected {RECORD_VERSION}"
        )
    known = {f.name for f in fields(EngineParams)}
    raw = dict(record["params"])
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown EngineParams fields: {', '.join(unknown)}")
    if raw.get("prefill_attention_tokens") is None:
        raw["prefill_attention_tokens"] = math.inf
    pf = dict(record["fit"]["prefill"])
    pf["attention_tokens"] = math.inf if pf["attention_tokens"] is None else pf["attention_tokens"]
    pf["error"] = _error_of(pf["error"])
    df = dict(record["fit"]["decode"])
    df["error"] = _error_of(df["error"])
    return MeasuredEngine(
        name=record["name"],
        deployment=Deployment(**record["deployment"]),
        facts=ModelFacts(**record["facts"]),
        source=dict(record["source"]),
        prefill_samples=tuple(PrefillSample(p, b, ms / 1e3) for p, b, ms in record["prefill_ms"]),
        decode_samples=tuple(
            DecodeSample(p, o, b, ms / 1e3) for p, o, b, ms in record["decode_ms"]
        ),
        prefill_fit=PrefillFit(**pf),
        decode_fit=DecodeFit(**df),
        params=EngineParams(**raw),
    )


def load_engine(path: Path) -> MeasuredEngine:
    """The engine recorded in ``path`` (a ``bench/engines/*.json``). The simulator's
    spec for it: ``profiles.with_measured_profile(spec, engine.params,
    engine.facts.max_context)``, the profile ``pdscaler plan profile`` writes."""
    return from_record(json.loads(path.read_text()))


def engines_in(directory: Path) -> dict[str, MeasuredEngine]:
    """Every engine recorded in ``directory`` (``*.json``) by name: bench/engines/ ->
    ``qwen3-30b-a3b-h200-vllm-tp1``, ``qwen3-32b-h200-vllm-tp2``,
    ``qwen3-8b-h100-vllm-tp1``."""
    engines = (load_engine(p) for p in sorted(directory.glob("*.json")))
    return {e.name: e for e in engines}


@dataclass(frozen=True)
class Recorded:
    """``Answers`` replayed from a record (``to_record``'s keys ``facts``, ``source``,
    ``prefill_ms``, ``decode_ms``): a question not recorded raises ``KeyError``."""

    record: dict[str, Any]

    def facts(self) -> ModelFacts:
        return ModelFacts(**self.record["facts"])

    def source(self) -> dict[str, Any]:
        return dict(self.record["source"])

    def prefill_s(self, prompt: int, batch: int) -> float:
        table = {(p, b): ms for p, b, ms in self.record["prefill_ms"]}
        return float(table[(prompt, batch)]) / 1e3

    def decode_step_s(self, prompt: int, output: int, batch: int) -> float:
        table = {(p, o, b): ms for p, o, b, ms in self.record["decode_ms"]}
        return float(table[(prompt, output, batch)]) / 1e3
