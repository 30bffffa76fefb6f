"""pdlab.engine.serve's stand-in for a ``kv_both`` engine (a pod of a role-flip cell,
labelled ``pdscaler.io/pool``): it serves whichever leg vLLM's router sends it, whatever
its role label says, and a change of that label (a role flip) keeps the same server (no
restart, no counter reset), where a pod of a plain cell is restarted in its new role and
a decode leg at a prefill pod is a pairing error."""

from __future__ import annotations

import dataclasses
from typing import Any

from pdlab.engine.pods import PodInfo
from pdscaler.types import Role
from support.pod_servers import post_json, served

PREFILL = PodInfo("ns", "chat-r1-prefill-0", "chat", Role.PREFILL, "v1", True,
                  ip="127.0.126.1", port=18000, revision="r1", uid="uid-p",
                  kv_both=True)  # fmt: skip
FLIPPED = PodInfo("ns", "chat-r1-decode-0", "chat", Role.PREFILL, "v1", True,
                  ip="127.0.126.2", port=18000, revision="r1", uid="uid-d",
                  kv_both=True)  # fmt: skip


def post(pod: PodInfo, body: dict[str, Any]) -> Any:
    return post_json(pod, "/v1/completions", body)


def pd_request(prefill: PodInfo, decode: PodInfo) -> Any:
    """vllm-router's two legs: the prefill asked for a remote decode, then the decode
    with the KV params it returned."""
    first = {"prompt": "hello there world", "max_tokens": 1,
             "kv_transfer_params": {"do_remote_decode": True}}  # fmt: skip
    kv = post(prefill, first)["kv_transfer_params"]
    return post(decode, {"prompt": "hello there world", "max_tokens": 4, "kv_transfer_params": kv})


def test_a_kv_both_pod_labelled_prefill_serves_a_decode_leg_with_the_kv_hand_off() -> None:
    with served(PREFILL, FLIPPED) as pods:
        answer = pd_request(PREFILL, FLIPPED)
        assert answer["usage"]["completion_tokens"] == 4
        (rec,) = [r for r in pods.records.since(0) if r["kind"] == "decode"]
        assert rec["ok"]
        assert rec["kv_transfer"] is True
        assert (rec["prefill_pod"], rec["decode_pod"]) == (PREFILL.name, FLIPPED.name)


def test_a_new_role_label_keeps_a_kv_both_server_and_restarts_a_plain_one() -> None:
    plain = dataclasses.replace(FLIPPED, kv_both=False, role=Role.DECODE)
    with served(PREFILL, plain) as pods:
        before = pods.servers[("ns", plain.name)]
        said = pods.sync([PREFILL, dataclasses.replace(plain, role=Role.PREFILL)])
        assert pods.servers[("ns", plain.name)] is not before
        assert any("draining" in line for line in said), said
    decode = dataclasses.replace(FLIPPED, role=Role.DECODE)
    with served(PREFILL, decode) as pods:
        before = pods.servers[("ns", decode.name)]
        pd_request(PREFILL, decode)
        tokens = before.stats.generation_tokens
        said = pods.sync([PREFILL, FLIPPED])
        assert pods.servers[("ns", decode.name)] is before
        assert said == [f"decode pod {decode.name} now serves prefill"]
        assert before.stats.generation_tokens == tokens > 0
        assert pd_request(FLIPPED, PREFILL)["usage"]["completion_tokens"] == 4
