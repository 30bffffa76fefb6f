"""pdlab.engine.sglang through pdlab.engine.serve, without the lab: the simulated
SGLang workers speak the bootstrap hand-off sglang-router 0.3.2 drives (the same body
to a prefill and a decode pod at once, with ``bootstrap_host``/``bootstrap_port``/
``bootstrap_room``). A decode leg waits for its room's prefill at the pod serving that
bootstrap address, whichever leg arrives first; a bootstrap address no prefill pod
serves (a null port read as the decode's own 8998 included) is a pairing error; the
worker-metadata routes the router reads answer; vLLM pods serve none of SGLang's
routes. (The real router on these pods: tests/lab/test_sglang_router_path.py.)"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pdlab.engine import sglang as sgl
from pdlab.engine.pods import PodInfo
from pdlab.engine.serve import PodServers
from pdscaler.types import Role
from support.pod_servers import post_json as post
from support.pod_servers import served

PREFILL = PodInfo("ns", "chat-r1-prefill-0", "chat", Role.PREFILL, "v1", True,
                  ip="127.0.125.1", port=18000, revision="r1", uid="uid-p",
                  dialect="sglang", bootstrap_port=9001)  # fmt: skip
DECODE = PodInfo("ns", "chat-r1-decode-0", "chat", Role.DECODE, "v1", True,
                 ip="127.0.125.2", port=18000, revision="r1", uid="uid-d",
                 dialect="sglang")  # fmt: skip
VLLM = PodInfo("ns", "v-r1-decode-0", "v", Role.DECODE, "v1", True,
               ip="127.0.125.3", port=18000, revision="r1", uid="uid-v")  # fmt: skip


@pytest.fixture
def servers() -> Iterator[PodServers]:
    with served(PREFILL, DECODE, VLLM) as pods:
        yield pods


def legs(body: dict[str, Any], prefill_delay: float = 0.0, path: str = "/v1/completions") -> Any:
    """The router's two legs, the prefill's ``prefill_delay`` s after the decode's; the
    decode's answer."""

    def prefill() -> None:
        time.sleep(prefill_delay)
        post(PREFILL, path, body)

    leg = threading.Thread(target=prefill)
    leg.start()
    try:
        return post(DECODE, path, body)
    finally:
        leg.join(40)


def boot(room: int, port: int | None = 9001, host: str = PREFILL.ip) -> dict[str, Any]:
    return {"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room}


def test_the_decode_waits_for_its_rooms_prefill(servers: PodServers) -> None:
    answer = legs({"prompt": "a b c", "max_tokens": 5, **boot(7)}, prefill_delay=0.5)
    assert answer["usage"]["completion_tokens"] == 5
    records = servers.records.since(0)
    assert sorted(r["kind"] for r in records) == ["decode", "prefill"]
    assert {r["bootstrap_room"] for r in records} == {7}
    assert {r["request_id"] for r in records} == {"room-7"}
    (dec,) = [r for r in records if r["kind"] == "decode"]
    assert (dec["prefill_pod"], dec["decode_pod"]) == (PREFILL.name, DECODE.name)
    assert dec["kv_transfer"] is True
    assert dec["ok"] is True
    assert servers.records.pairing_errors == 0


def test_native_generate_through_both_legs(servers: PodServers) -> None:
    body = {"text": "hello you", "sampling_params": {"max_new_tokens": 3}, **boot(8)}
    answer = legs(body, path="/generate")
    assert answer["text"] == " good my lord"  # pdlab.engine.text: one word per token
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert servers.records.pairing_errors == 0


def test_a_bootstrap_no_prefill_serves_is_a_pairing_error(servers: PodServers) -> None:
    """Port null: the decode looks at its own 8998, where the prefill (9001) is not."""
    answer = post(DECODE, "/v1/completions", {"prompt": "a b", "max_tokens": 2, **boot(9, None)})
    assert answer["usage"]["completion_tokens"] == 2  # served, prefilled locally
    (rec,) = servers.records.since(0)
    assert rec["pairing_error"] is True
    assert rec["error"] == f"bootstrap {PREFILL.ip}:8998 is no prefill pod's: prefilled locally"


def test_the_router_reads_metadata_and_vllm_pods_serve_no_sglang_route(
    servers: PodServers,
) -> None:
    with urllib.request.urlopen(f"http://{PREFILL.address}/get_server_info", timeout=5) as r:
        info = json.loads(r.read())
    assert info["served_model_name"] == "simulated/llama-3.1-8b"
    assert "model_path" not in info  # the router would fetch a tokenizer from the hub
    assert info["disaggregation_bootstrap_port"] == 9001
    with pytest.raises(urllib.error.HTTPError) as err:
        post(VLLM, "/generate", {"text": "x"})
    assert err.value.code == 404


def test_bootstrap_fields_of_a_body() -> None:
    assert sgl.bootstrap(boot(5)) == sgl.Bootstrap(PREFILL.ip, 9001, 5)
    assert sgl.bootstrap(boot(5, None), default_port=8998) == sgl.Bootstrap(PREFILL.ip, 8998, 5)
    assert sgl.bootstrap({"prompt": "x"}) is None
    assert sgl.bootstrap({"bootstrap_room": True}) is None
    assert sgl.max_new_tokens({"sampling_params": {"max_new_tokens": 4}}) == 4
    assert sgl.max_new_tokens({"max_tokens": 4}) is None


def test_a_pods_bootstrap_port_comes_from_its_engine_flags() -> None:
    """What the simulator listens for is what SGLang would bind: the engine's flag,
    not the annotation (a wrong annotation then shows up as a pairing error)."""
    from types import SimpleNamespace

    from pdlab.engine.pods import to_info

    def pod(args: list[str]) -> Any:
        engine = SimpleNamespace(name="engine", image="lmsysorg/sglang:v0.5.4",
                                 command=["python3", "-m", "sglang.launch_server"], args=args,
                                 ports=[SimpleNamespace(name="http", container_port=30000)],
                                 lifecycle=None)  # fmt: skip
        labels = {"pdscaler.io/name": "chat", "pdscaler.io/role": "prefill"}
        meta = SimpleNamespace(namespace="ns", name="p", labels=labels, uid="u",
                               annotations={"sglang.ai/bootstrap-port": "1"},
                               deletion_timestamp=None)  # fmt: skip
        status = SimpleNamespace(phase="Running", pod_ip="127.64.0.5", conditions=[])
        return SimpleNamespace(
            metadata=meta, status=status, spec=SimpleNamespace(containers=[engine])
        )

    info = to_info(pod(["--disaggregation-bootstrap-port=9001"]))
    assert info is not None
    assert (info.dialect, info.port, info.bootstrap_port) == ("sglang", 30000, 9001)
    default = to_info(pod([]))
    assert default is not None
    assert default.bootstrap_port == 8998
