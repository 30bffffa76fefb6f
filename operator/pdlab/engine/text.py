"""The text the engine simulator streams: one word per engine token, each word exactly one
token for the lab load client's tokenizer, so a client that counts output tokens by
tokenizing the text counts what the engine produced.

Owns: ``WORDS`` (sixteen common English words, "good my lord what will you have of me now
that the king is come here") and ``token_text(i)``, the text of the ``i``-th output token
(1-based): ``" " + WORDS[(i - 1) % 16]``. Must not: count prompt tokens (the engines count
a prompt's whitespace-separated words, ``pdlab.engine.serve.count_tokens``) or know the
tokenizer (the tests check the words against it).

Why it matters: aiperf (``pdlab.cluster.loadclient``) counts a request's output tokens by
encoding the concatenated streamed text with its tokenizer (``local/pdlab-bpe``, a 4,000-token
byte-level BPE trained on aiperf's bundled Shakespeare corpus), and derives its
inter-token latency as (request latency - TTFT) / (output tokens - 1). The engines once
streamed ``" tok1"``, ``" tok2"``, ...: 3 to 4 tokens each for that tokenizer (``Ġto k 1``),
so aiperf counted 43.1 output tokens per request where the engines produced 12.7 (its
``osl_mismatch_diff_pct`` 226%) and its inter-token latency was ~3.4x too short (chat p95
25 ms against the operator's 99 ms). Each word here, with its leading space, is one token
of that tokenizer (ids 270-895 of 4,000: among its earliest merges, so a retrained
tokenizer keeps them), and the byte-level pre-tokenizer splits text at each space before
a word, so no merge crosses two words: n tokens' text is n tokens. Common short words with
a leading space are single tokens of the usual production BPEs (GPT-2's, Llama 3's) too.

    >>> "".join(token_text(i) for i in range(1, 5))
    ' good my lord what'
    >>> token_text(17) == token_text(1)
    True
"""

from __future__ import annotations

#: The words streamed, in order, cycling: each (with a leading space) one token.
WORDS: tuple[str, ...] = (
    "good", "my", "lord", "what", "will", "you", "have", "of",
    "me", "now", "that", "the", "king", "is", "come", "here",
)  # fmt: skip


def token_text(i: int) -> str:
    """The text of output token ``i`` (1-based): a space and a word of ``WORDS``."""
    return " " + WORDS[(i - 1) % len(WORDS)]


def text(n: int) -> str:
    """The text of the first ``n`` output tokens: ``text(3)`` -> ``" good my lord"``."""
    return "".join(token_text(i) for i in range(1, n + 1))
