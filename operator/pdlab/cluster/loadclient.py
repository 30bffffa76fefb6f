"""A third-party load client for the lab: aiperf (NVIDIA's, from PyPI) replaying a trace on
its timestamps against the front Service, offline.

Owns: installing aiperf 0.13.0 once into its own virtualenv under the cache
(``~/.cache/pdscaler/aiperf-0.13.0``; its ~1.2 GB of dependencies stay out of the
project's), the offline tokenizer it needs (a small byte-level BPE trained with the
``tokenizers`` library on aiperf's own bundled corpus, installed as a fake Hugging Face
cache repo ``local/pdlab-bpe``: docs/lab.md "The load client's offline tokenizer"), writing a
Mooncake-format trace, running ``aiperf profile --custom-dataset-type mooncake_trace
--fixed-schedule``, and reading its client-side results (TTFT, ITL, request latency,
requests and errors). Must not: talk to the cluster (it only sends HTTP to the URL it is
given), or run anywhere but loopback.

Worked example::

    client = AiPerf.ensure()                      # ~3 min the first time, then instant
    rows = [TraceRow(0.0, 300, 40), TraceRow(0.5, 200, 20)]
    result = client.run("http://127.0.0.1:28080", rows, workdir)
    result.requests, result.errors, result.ttft_ms["p50"]   # -> 2, 0, ~30.0
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdlab.cluster.config import cache_dir
from pdscaler.sim.traces import Trace

AIPERF_VERSION = "0.13.0"
TOKENIZER_NAME = "local/pdlab-bpe"
MODEL_NAME = "simulated/llama-3.1-8b"
#: A fixed snapshot id for the fake Hugging Face cache repo (any 40 hex digits).
SNAPSHOT = "0" * 39 + "1"

_BUILD_TOKENIZER = r"""
import json, sys, pathlib
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import PreTrainedTokenizerFast
import aiperf
corpus = pathlib.Path(aiperf.__file__).parent / "dataset/generator/assets/shakespeare.txt"
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([str(corpus)], trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
fast.save_pretrained(str(out))
(out / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
"""


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: seconds from the start, prompt and output tokens."""

    at: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Result:
    """aiperf's client-side view of one run (milliseconds; percentiles by name)."""

    requests: int
    errors: int
    ttft_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def trace_rows(trace: Trace) -> list[TraceRow]:
    """A trace (e.g. ``pdlab.engine.scenarios.generate``'s, Poisson arrivals per phase) as the
    rows aiperf replays: arrival seconds, prompt and output tokens, in order."""
    return [
        TraceRow(float(at), int(p), int(o))
        for at, p, o in zip(trace.arrival, trace.prompt, trace.output, strict=True)
    ]


def write_mooncake(rows: list[TraceRow], path: Path) -> Path:
    """The Mooncake JSONL aiperf replays: ``{"timestamp": ms, "input_length": n,
    "output_length": m, "hash_ids": [...]}`` (distinct hash ids: no shared prefixes)."""
    with path.open("w") as f:
        for i, row in enumerate(rows):
            blocks = max(1, row.prompt_tokens // 512)
            f.write(
                json.dumps(
                    {
                        "timestamp": round(row.at * 1000),
                        "input_length": row.prompt_tokens,
                        "output_length": row.output_tokens,
                        "hash_ids": [i * 1000 + b for b in range(blocks)],
                    }
                )
                + "\n"
            )
    return path


def _stat(metrics: dict[str, Any], tag: str) -> dict[str, float]:
    entry = metrics.get(tag) or {}
    return {k: float(v) for k, v in entry.items() if isinstance(v, (int, float))}


def parse_export(data: dict[str, Any]) -> Result:
    """aiperf's ``profile_export_aiperf.json``: its records are keyed by metric tag
    (``time_to_first_token``, ``inter_token_latency``, ``request_latency``,
    ``request_count``, ``error_request_count``) each with avg/p50/p90/p99/..."""
    metrics: dict[str, Any] = {}
    for key in ("records", "metrics"):
        if isinstance(data.get(key), dict):
            metrics.update(data[key])
    if not metrics:
        metrics = {k: v for k, v in data.items() if isinstance(v, dict)}
    count = _stat(metrics, "request_count").get("avg", 0.0)
    errors = _stat(metrics, "error_request_count").get("avg", 0.0)
    return Result(
        requests=int(count),
        errors=int(errors),
        ttft_ms=_stat(metrics, "time_to_first_token"),
        itl_ms=_stat(metrics, "inter_token_latency"),
        latency_ms=_stat(metrics, "request_latency"),
        raw=data,
    )


@dataclass(frozen=True)
class AiPerf:
    """aiperf installed in its own virtualenv, with the offline tokenizer."""

    venv: Path
    hf_home: Path

    @staticmethod
    def ensure(root: Path | None = None) -> AiPerf:
        """Install aiperf (once) and build the tokenizer (once) under ``root``."""
        base = root or cache_dir()
        venv = base / f"aiperf-{AIPERF_VERSION}"
        if not (venv / "bin" / "aiperf").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(venv / "bin" / "pip"), "install", "-q"]
            subprocess.run([*pip, f"aiperf=={AIPERF_VERSION}"], check=True)
        hf_home = base / "aiperf-hf"
        repo = hf_home / "hub" / f"models--{TOKENIZER_NAME.replace('/', '--')}"
        snapshot = repo / "snapshots" / SNAPSHOT
        if not (snapshot / "tokenizer.json").exists():
            subprocess.run(
                [str(venv / "bin" / "python"), "-c", _BUILD_TOKENIZER, str(snapshot)],
                check=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            )
            (repo / "refs").mkdir(parents=True, exist_ok=True)
            (repo / "refs" / "main").write_text(SNAPSHOT)
        return AiPerf(venv=venv, hf_home=hf_home)

    def env(self) -> dict[str, str]:
        """The offline environment aiperf runs in (no hub, no telemetry)."""
        return {
            **os.environ,
            "HF_HOME": str(self.hf_home),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "NO_PROXY": "*",
        }

    def command(
        self, url: str, trace: Path, artifacts: Path, *, streaming: bool = True, chat: bool = False
    ) -> list[str]:
        return [
            str(self.venv / "bin" / "aiperf"),
            "profile",
            "--model",
            MODEL_NAME,
            "--url",
            url,
            "--endpoint-type",
            "chat" if chat else "completions",
            *(["--streaming"] if streaming else []),
            "--input-file",
            str(trace),
            "--custom-dataset-type",
            "mooncake_trace",
            "--fixed-schedule",
            "--tokenizer",
            TOKENIZER_NAME,
            "--artifact-dir",
            str(artifacts),
            "--no-server-metrics",
            "--ui-type",
            "simple",
            # a new connection per request: the front Service balances connections, and
            # many real clients open many connections (one pooled connection would pin
            # the whole replay to whichever router it first reached)
            "--connection-reuse-strategy",
            "never",
        ]

    def start(
        self, url: str, rows: list[TraceRow], workdir: Path, **kw: Any
    ) -> subprocess.Popen[bytes]:
        """Start a replay in the background (its log: ``workdir/aiperf.log``). aiperf
        runs in ``workdir``, so every path it is given is absolute (a relative
        ``workdir`` such as the demo's default ``demo-results/aiperf`` would otherwise
        be looked up again inside itself)."""
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        trace = write_mooncake(rows, workdir / "trace.jsonl")
        log = (workdir / "aiperf.log").open("wb")
        # aiperf must not run inside a directory holding a package named `operator`
        return subprocess.Popen(
            self.command(url, trace, workdir / "artifacts", **kw),
            cwd=workdir,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @staticmethod
    def result(workdir: Path) -> Result:
        """The finished replay's results (raises FileNotFoundError with the log's tail)."""
        found = sorted((workdir / "artifacts").rglob("profile_export_aiperf.json"))
        if not found:
            log = (workdir / "aiperf.log").read_text(errors="replace")[-3000:]
            raise FileNotFoundError(f"aiperf wrote no profile_export_aiperf.json; log tail:\n{log}")
        return parse_export(json.loads(found[-1].read_text()))

    def run(
        self, url: str, rows: list[TraceRow], workdir: Path, timeout: float = 600.0, **kw: Any
    ) -> Result:
        """Replay ``rows`` against ``url`` and wait for aiperf's results."""
        proc = self.start(url, rows, workdir, **kw)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        return self.result(workdir)
