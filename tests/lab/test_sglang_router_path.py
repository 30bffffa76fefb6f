"""The SGLang request path in the lab, with the real router: client -> front Service
(svcproxy) -> router pod (the real ``sglang-router`` 0.3.2 from PyPI, run by the pod
runner at its pod IP, discovering the cell's workers through the API server with its
own ServiceAccount) -> a prefill AND a decode pod at once (the engine simulator,
speaking SGLang's bootstrap hand-off: ``pdlab.engine.sglang``).

Everything is rendered by the operator's own builders from deploy/examples/sglang.yaml
(``manifests.pool_deployment``, ``router.router_deployment``, ``front_service``), with
the prefill's bootstrap port moved to 9001 so that the ``sglang.ai/bootstrap-port``
annotation the operator writes is what the hand-off depends on (without it the router
sends ``bootstrap_port: null`` and the decode would look at its own 8998). Checked:
(a) a streamed completion and a native ``/generate`` through the front return their
tokens, each prefilled and decoded by the two pods of one cell (same bootstrap room);
(b) a decode handed another revision's bootstrap room is a pairing error; (c) the
router's arrival counter ``smg_router_requests_total`` is scraped on its ``metrics``
port with the pod labels, counts the requests sent, and the ``sglang`` preset's
arrival query answers a positive rate.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from pdlab.cluster.lab import Lab
from pdscaler import manifests, router
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role
from support.labkit import Kube, request_path, wait_for
from support.pd_cell import (
    NAME,
    ROUTER_TOLERATION,
    create_router_identity,
    get_json,
    pod_of,
    post,
    sse_chunks,
)
from support.router_counts import (
    CountedLoad,
    router_selector,
    router_targets,
    settled_total,
    wait_arrival_rate,
    wait_router_series,
)

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP = 9001
#: cell A serves (prefill, decode, router); cell B is another revision's prefill only
CELL_A = CellTarget(image="lmsysorg/sglang", version="v0.5.4", prefill=1, decode=1, router=1)
CELL_B = CellTarget(image="lmsysorg/sglang", version="v0.5.5", prefill=1, decode=0)


def lab_spec(prometheus_url: str) -> PDDeploymentSpec:
    """deploy/examples/sglang.yaml for the lab: one GPU per pod, fast start-up, the
    prefill's bootstrap server on 9001, router pods on the fake nodes."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "deploy/examples/sglang.yaml").read_text())
    spec = doc["spec"]
    for role in ("prefill", "decode"):
        tpl = spec[role]["template"]
        tpl["metadata"] = {"annotations": {"pdscaler.io/startup-delay": "1s"}}
        tpl["spec"]["terminationGracePeriodSeconds"] = 0
    args = spec["prefill"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--disaggregation-bootstrap-port=8998")] = (
        f"--disaggregation-bootstrap-port={BOOTSTRAP}"
    )
    spec["router"]["template"] = {
        "metadata": {"annotations": {"pdscaler.io/startup-delay": "1s"}},
        "spec": {"tolerations": [ROUTER_TOLERATION], "terminationGracePeriodSeconds": 0},
    }
    # a worker found before the simulator serves it is re-checked every second, not 30 s
    spec["router"]["args"] = ["--worker-startup-check-interval", "1"]
    spec["metrics"] = {"prometheus": {"url": prometheus_url}, "preset": "sglang", "window": "20s"}
    return PDDeploymentSpec.model_validate(spec)


def _unowned(obj: dict[str, Any]) -> Any:
    obj["metadata"].pop("ownerReferences", None)  # no PDDeployment here
    return cast(Any, obj)


@pytest.fixture
def cells(lab: Lab, kube: Kube, namespace: str) -> Iterator[tuple[int, int, PDDeploymentSpec]]:
    """Cells A and B as the operator renders them, the routers' identity, the front
    Service, the engine simulator with its pod runner and the front proxy; yields
    (front port, simulator control port, the spec)."""
    spec = lab_spec(lab.prometheus_url)
    meta = Meta(NAME, namespace, "no-owner")
    for cell, role in ((CELL_A, Role.PREFILL), (CELL_A, Role.DECODE), (CELL_B, Role.PREFILL)):
        dep = manifests.pool_deployment(meta, spec, cell, role)
        kube.apps.create_namespaced_deployment(namespace, _unowned(dep))
    create_router_identity(kube, namespace)
    port = manifests.engine_port(spec.decode)
    dep = router.router_deployment(meta, spec, CELL_A.rev, CELL_A.version, 1, port)
    kube.apps.create_namespaced_deployment(namespace, _unowned(dep))
    svc = manifests.front_service(meta, spec.router.port)
    kube.core.create_namespaced_service(namespace, _unowned(svc))
    with request_path(lab, namespace, NAME) as (front, control, _):
        yield front, control, spec


def _through(front: int, path: str, body: dict[str, Any]) -> str | None:
    try:
        status, text = post(f"http://127.0.0.1:{front}{path}", body)
    except (OSError, urllib.error.HTTPError):
        return None
    return text if status == 200 else None


def completion(front: int, max_tokens: int = 8) -> str | None:
    body = {"model": "simulated/llama-3.1-8b", "prompt": "the lab " * 40,
            "max_tokens": max_tokens, "stream": True}  # fmt: skip
    text = _through(front, "/v1/completions", body)
    return text if text and "[DONE]" in text else None


def test_requests_flow_router_prefill_and_decode_of_one_cell_and_pair_by_room(
    lab: Lab, kube: Kube, namespace: str, cells: tuple[int, int, PDDeploymentSpec]
) -> None:
    front, control, _ = cells
    text = wait_for(lambda: completion(front, 12), 120, "a streamed completion via the front")
    tokens = [c["choices"][0]["text"] for c in sse_chunks(text) if c.get("choices")]
    assert len(tokens) == 12
    native = _through(
        front, "/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 5}}
    )
    assert native is not None
    assert json.loads(native)["meta_info"]["completion_tokens"] == 5

    page = get_json(f"http://127.0.0.1:{control}/requests?since=0")
    assert page["pairing_errors"] == 0, page
    prefill = pod_of(kube, namespace, CELL_A.rev, "prefill")
    decode = pod_of(kube, namespace, CELL_A.rev, "decode")
    assert prefill.metadata.annotations[router.BOOTSTRAP_ANNOTATION] == str(BOOTSTRAP)
    decodes = [r for r in page["records"] if r["kind"] == "decode"]
    assert len(decodes) == 2, page["records"]
    for rec in decodes:
        assert (rec["prefill_pod"], rec["decode_pod"]) == (
            prefill.metadata.name,
            decode.metadata.name,
        )
        assert rec["prefill_revision"] == rec["decode_revision"] == CELL_A.rev
        assert rec["kv_transfer"] is True
        assert rec["ok"] is True
        legs = [
            r
            for r in page["records"]
            if r["kind"] == "prefill" and r.get("bootstrap_room") == rec["bootstrap_room"]
        ]
        assert [leg["prefill_pod"] for leg in legs] == [prefill.metadata.name]

    # (b) a decode of cell A handed the room of cell B's prefill
    p_b = wait_for(lambda: pod_of(kube, namespace, CELL_B.rev, "prefill"), 60, "B's prefill")
    body = {"prompt": "a b c d", "max_tokens": 4, "bootstrap_host": p_b.status.pod_ip,
            "bootstrap_port": BOOTSTRAP, "bootstrap_room": 4242}  # fmt: skip
    leg = threading.Thread(
        target=lambda: post(f"http://{p_b.status.pod_ip}:30000/v1/completions", body)
    )
    leg.start()
    status, _ = post(f"http://{decode.status.pod_ip}:30000/v1/completions", body)
    leg.join(30)
    assert status == 200  # served, but counted
    page = get_json(f"http://127.0.0.1:{control}/requests?since=0")
    assert page["pairing_errors"] == 1
    (bad,) = [r for r in page["records"] if r.get("pairing_error")]
    assert (bad["prefill_revision"], bad["decode_revision"]) == (CELL_B.rev, CELL_A.rev)
    assert (bad["prefill_pod"], bad["decode_pod"]) == (p_b.metadata.name, decode.metadata.name)
    assert bad["bootstrap_room"] == 4242


def test_the_routers_arrival_counter_is_scraped_and_the_preset_reads_it(
    lab: Lab, namespace: str, cells: tuple[int, int, PDDeploymentSpec]
) -> None:
    front, _, spec = cells
    load = CountedLoad(lambda: completion(front, 4))
    load.first()
    with load:
        targets = wait_for(lambda: router_targets(lab, namespace), 90, "a router target up")
        for t in targets:
            assert t["scrapeUrl"].endswith(f":{router.METRICS_PORT}/metrics"), t
            assert t["labels"]["pdscaler_io_revision"] == CELL_A.rev
        series = wait_router_series(lab, namespace, NAME, "smg_router_requests_total")
        for s in series:
            assert s["metric"]["backend_type"] == "pd"
            assert s["metric"]["pod"].startswith(f"{NAME}-{CELL_A.rev}-router")
        wait_arrival_rate(lab, spec, namespace, NAME)
    sel = router_selector(namespace, NAME)
    counted = settled_total(lab, f"sum(smg_router_requests_total{sel})")
    print(f"smg_router_requests_total: {counted:g}; client: {load!r}")
    assert load.ok <= counted <= load.tried, (counted, load)
    assert load.ok >= 5, load


def test_the_lab_spec_is_the_example_but_for_the_lab_fields() -> None:
    """Without the lab: the spec the lab test renders keeps the example's engine and
    router, only moving the bootstrap port and adding lab placement."""
    spec = lab_spec("http://127.0.0.1:29090")
    assert spec.router_type == "sglang-router"
    engine = copy.deepcopy(spec.prefill.template["spec"]["containers"][0])
    assert f"--disaggregation-bootstrap-port={BOOTSTRAP}" in engine["args"]
    assert router.prefill_annotations(spec, engine) == {router.BOOTSTRAP_ANNOTATION: "9001"}
