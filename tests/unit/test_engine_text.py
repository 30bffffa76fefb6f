"""pdlab.engine.text: the engine simulator streams one word per output token, and each is
exactly one token of the lab load client's tokenizer, so aiperf's output-token count (it
tokenizes the concatenated streamed text) equals the engine's ``completion_tokens``.

The tokenizer is the one aiperf runs with in the lab (``local/pdlab-bpe``, built by
``pdlab.cluster.loadclient.AiPerf.ensure`` into the cache), loaded by aiperf's own
``Tokenizer.from_pretrained`` in aiperf's virtualenv, offline. Before the engines streamed
these words they streamed ``" tok<i>"``: this test then read 3-4 tokens per engine token
(``" tok1"`` is ``Ġto k 1``), what made aiperf's inter-token latency ~3.4x too short.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pdlab.cluster.config import cache_dir
from pdlab.cluster.loadclient import AIPERF_VERSION, SNAPSHOT, TOKENIZER_NAME, AiPerf
from pdlab.engine.pods import PodInfo
from pdlab.engine.serve import PodServers
from pdlab.engine.text import WORDS, text, token_text
from pdscaler.types import Role
from support.pod_servers import served
from support.skips import in_ci

#: Output lengths checked with the tokenizer: every length up to three cycles of WORDS,
#: and a long answer.
LENGTHS = [*range(1, 3 * len(WORDS) + 1), 500]

_COUNT = r"""
import json, sys
from aiperf.common.tokenizer import Tokenizer
tok = Tokenizer.from_pretrained(sys.argv[1])
texts = json.load(sys.stdin)
print(json.dumps([len(tok.encode(t)) for t in texts]))
"""


def lab_tokenizer() -> AiPerf:
    """aiperf and its offline tokenizer as the lab installs them. Locally, a checkout
    without them (no ``make demo`` yet) skips; under CI they are installed (what the lab
    tests that run aiperf do too), since CI skips nothing the machine can run."""
    base = cache_dir()
    venv = base / f"aiperf-{AIPERF_VERSION}"
    snapshot = base / "aiperf-hf" / "hub" / f"models--{TOKENIZER_NAME.replace('/', '--')}"
    installed = (venv / "bin" / "aiperf").exists() and (
        snapshot / "snapshots" / SNAPSHOT / "tokenizer.json"
    ).exists()
    if not installed and not in_ci():
        pytest.skip("aiperf's offline tokenizer is not installed: run `make demo` once")
    return AiPerf.ensure()


def token_counts(texts: list[str]) -> list[int]:
    """How many tokens aiperf's tokenizer reads in each text (as it counts output)."""
    client = lab_tokenizer()
    proc = subprocess.run(
        [str(client.venv / "bin" / "python"), "-c", _COUNT, TOKENIZER_NAME],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        env=client.env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts: list[int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return counts


def test_each_token_is_a_space_and_a_word_cycling_through_the_words() -> None:
    assert [token_text(i) for i in (1, 2, 16, 17)] == [" good", " my", " here", " good"]
    assert text(3) == " good my lord"
    assert text(0) == ""
    for n in LENGTHS:
        assert len(text(n).split(" ")) == n + 1  # "" then n words: no word holds a space
    # one pre-token per word for a GPT-2-style byte-level pre-tokenizer (` ?\p{L}+`):
    # letters only, so no merge can join two words or a word and punctuation
    assert all(re.fullmatch(r"[a-z]+", w) for w in WORDS)
    assert len(set(WORDS)) == len(WORDS)


def test_each_word_is_one_token_of_the_lab_tokenizer_and_n_tokens_are_n() -> None:
    singles = [token_text(i) for i in range(1, len(WORDS) + 1)]
    counts = token_counts([*singles, *(text(n) for n in LENGTHS)])
    assert dict(zip(singles, counts[: len(singles)], strict=True)) == dict.fromkeys(singles, 1)
    assert counts[len(singles) :] == LENGTHS


DECODE = PodInfo("ns", "chat-r1-decode-0", "chat", Role.DECODE, "v1", True,
                 ip="127.0.127.1", port=18100, revision="r1", uid="uid-d")  # fmt: skip


@pytest.fixture
def servers() -> Iterator[PodServers]:
    with served(DECODE) as pods:
        yield pods


def streamed(path: str, body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The text pieces of a streamed answer, and its usage chunk's usage."""
    req = urllib.request.Request(
        f"http://{DECODE.address}{path}",
        json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        lines = resp.read().decode().split("\n\n")
    docs = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    pieces: list[str] = []
    usage: dict[str, Any] = {}
    for doc in docs:
        for choice in doc.get("choices") or []:
            piece = choice.get("text", (choice.get("delta") or {}).get("content"))
            if piece:
                pieces.append(piece)
        usage = doc.get("usage") or usage
    return pieces, usage


def test_the_server_streams_one_word_per_token_in_both_apis(servers: PodServers) -> None:
    """A decode pod answering 20 tokens (prefilled locally: no KV hand-off) streams 20
    pieces, ``text(20)`` together, and says 20 completion tokens: what the client's
    tokenizer reads in them (the test above)."""
    for path, body in (
        ("/v1/completions", {"prompt": "hello there", "max_tokens": 20}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 20}),
    ):  # fmt: skip
        pieces, usage = streamed(path, body)
        assert pieces == [token_text(i) for i in range(1, 21)], path
        assert "".join(pieces) == text(20)
        assert usage["completion_tokens"] == 20, path
