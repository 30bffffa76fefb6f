"""Pools pdscaler does not own (``scaleTargetRef``, issue 29 item 1) in the lab: it sizes
a prefill/decode pair it did not create through ``/scale`` only, holds a pair on two
versions, and refuses a target an HPA already drives.

The pairs are what a team runs already: (a) two plain Deployments, as llm-d's charts
deploy prefill and decode; (b) two objects of a custom resource with the ``/scale``
subresource standing in for Dynamo's DynamoGraphDeploymentScalingAdapter (the lab has no
Dynamo operator: the stand-in has the DGDSA's ``/scale`` shape, spec.replicas and
status.selector, and each points at a backing Deployment's pods, as a DGDSA points at its
DGD service's). Their pods are kwok GPU pods labelled ``pdscaler.io/name`` and
``pdscaler.io/role`` in the team's template. The operator ticks in-process
(``opkit.ticking``).

(a) serves real requests: the engine simulator serves the team's pods, the team's own
vllm-router (run by the lab's pod runner) pairs them, and aiperf sends the load through
the team's Service. The other cases read the settable exporter's vLLM metrics (the
adapters' backing pods never change, so requests would prove nothing more there):

Load: 3 req/s of 1750 prompt / 467 output tokens, prefill 3000 tok/s and decode 800 tok/s
per replica at u = 0.7: N_P = 5250/2100 = 2.50 -> 3 and N_D = 1401/560 = 2.50 -> 3, so
the policy wants 3 + 3 from 1 + 1. Both sit midway between 2 and 3 on purpose: the rate
Prometheus gives back is read through a 10 s window of 2 s scrapes, and a scrape served
a second late reads ~10% high. With 2000 / 500 tokens (N_P = 2.86) a reading 5% high asked
for 4 prefill replicas (seen in CI: 2 -> 4 -> 5), and the adapters, which have no
controller here to bring their pods up, never converge, so the policy never shrinks them.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.kubeclient import crd_established
from pdlab.cluster.lab import Lab
from pdlab.cluster.loadclient import AiPerf, TraceRow
from pdscaler.observe import is_ready, labels
from pdscaler.runtime import Runtime
from support.exporter import EngineExporter
from support.labkit import Kube, WaitTimeoutError, gpu_deployment, request_path, wait_for
from support.opkit import (
    as_dict,
    condition,
    create_pdd,
    get_pdd,
    operator_runtime,
    pdd_manifest,
    pod_dicts,
    ticking,
    wait_condition,
)
from support.served_chat import completion, records

NAME = "chat"
RATE, PROMPT, OUTPUT = 3.0, 1750.0, 467.0
WANT = 3  # both pools, from the docstring's numbers
ROLES = ("prefill", "decode")
ARGS = {"prefill": ["--kv-role=kv_producer"], "decode": ["--kv-role=kv_consumer"]}
# the stand-in for Dynamo's DGDSA: /scale at spec.replicas, status.replicas, status.selector
ADAPTER_GROUP, ADAPTER_VERSION = "pdlab.pdscaler.io", "v1alpha1"
ADAPTER_KIND, ADAPTER_PLURAL = "ScalingAdapter", "scalingadapters"


def team_deployment(role: str, image: str = "vllm/vllm-openai:v0.11.0") -> dict[str, Any]:
    """The team's Deployment of one pool (``llm-<role>``): GPU pods whose template carries
    the labels pdscaler's metric queries select on, and the engine's port."""
    dep = gpu_deployment(f"llm-{role}", 1, startup_delay="1s")
    template = dep["spec"]["template"]
    template["metadata"]["labels"].update({"pdscaler.io/name": NAME, "pdscaler.io/role": role})
    container = template["spec"]["containers"][0]
    container.update(image=image, args=ARGS[role], ports=[{"name": "http", "containerPort": 8000}])
    return dep


def targets_manifest(
    lab: Lab, kind: str, api_version: str, names: dict[str, str]
) -> dict[str, Any]:
    """The lab's PDDeployment with both pools as scale targets: no engine, no templates,
    no router fields."""
    manifest = pdd_manifest(NAME, lab.prometheus_url, max_replicas=6, startup_seconds=5.0)
    spec = manifest["spec"]
    spec.pop("engine")
    spec.pop("rollout")
    for role in ("prefill", "decode"):
        spec[role].pop("template")
        spec[role]["scaleTargetRef"] = {
            "apiVersion": api_version,
            "kind": kind,
            "name": names[role],
        }
    return manifest


def deployments_manifest(lab: Lab) -> dict[str, Any]:
    """The PDDeployment over the team's Deployments ``llm-prefill`` and ``llm-decode``."""
    return targets_manifest(lab, "Deployment", "apps/v1", {r: f"llm-{r}" for r in ROLES})


def serve(kube: Kube, exp: EngineExporter, namespace: str) -> None:
    """The Ready team pods serve the docstring's load (the exporter finds them by label)."""

    def ready() -> dict[str, list[str]] | None:
        pods: dict[str, list[str]] = {"prefill": [], "decode": []}
        for pod in pod_dicts(kube, namespace, NAME):
            if is_ready(pod):
                pods[labels(pod)["pdscaler.io/role"]].append(pod["metadata"]["name"])
        return pods if all(pods.values()) else None

    pods = wait_for(ready, 60, "a Ready pod in each team Deployment")
    exp.set_deployment(
        namespace, NAME, pods["prefill"], pods["decode"], rate=RATE, prompt_tokens=PROMPT,
        output_tokens=OUTPUT, ttft=0.3, tpot=0.02,
    )  # fmt: skip


def make_pair(kube: Kube, namespace: str, prefill_image: str | None = None) -> dict[str, Any]:
    """The team's two Deployments; their templates as created."""
    out = {}
    for role in ("prefill", "decode"):
        body = (
            team_deployment(role, prefill_image)
            if role == "prefill" and prefill_image
            else team_deployment(role)
        )
        kube.apps.create_namespaced_deployment(namespace, body)  # type: ignore[arg-type]
        out[role] = body["spec"]["template"]
    return out


def replicas(kube: Kube, namespace: str) -> dict[str, int]:
    read = kube.apps.read_namespaced_deployment
    return {r: int(as_dict(kube, read(f"llm-{r}", namespace))["spec"]["replicas"]) for r in ROLES}


def wait_sizes(kube: Kube, namespace: str, read: Callable[[], dict[str, int]], what: str) -> None:
    """Wait (90 s) until ``read()`` gives WANT for both pools; on a timeout, fail naming
    every distinct reading seen and the operator's last decision."""
    seen: list[dict[str, int]] = []

    def at_want() -> bool:
        now = read()
        if not seen or seen[-1] != now:
            seen.append(now)
        return now == {"prefill": WANT, "decode": WANT}

    try:
        wait_for(at_want, 90, f"{what} at {WANT}")
    except WaitTimeoutError as err:
        last = (get_pdd(kube, namespace, NAME).get("status") or {}).get("lastDecision")
        raise AssertionError(f"{err}; readings {seen}; last decision {last}") from None


def only_scale_writes(rt: Runtime) -> list[tuple[str, str]]:
    """The operator's writes other than /scale patches, Events and its status."""
    return [
        (w.verb, w.kind)
        for w in rt.kube.audit.since(0)
        if w.verb not in ("scale", "event", "status")
    ]


def create_object(kube: Kube, namespace: str, obj: dict[str, Any]) -> None:
    utils.create_from_dict(kube.api, obj, namespace=namespace)  # type: ignore[no-untyped-call]


def team_router(namespace: str) -> list[dict[str, Any]]:
    """The team's own P/D router in front of its two Deployments, as an llm-d or plain
    stack runs one: the real vllm-router discovering ``app=llm-prefill`` / ``app=llm-decode``
    pods (its ServiceAccount may list pods, nothing more), behind the Service ``llm``. The
    lab's pod runner runs it (label ``pdscaler.io/role: router``). Its policy is round
    robin: the default (cache-aware) keeps sending aiperf's prompts, which share a prefix,
    to the first worker at this load, so pods added later would see no traffic."""
    meta = {"name": "llm-router", "namespace": namespace}
    rbac = "rbac.authorization.k8s.io/v1"
    pods_read = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    labels_ = {"app": "llm-router", "pdscaler.io/role": "router"}
    args = [
        "--vllm-pd-disaggregation", "--service-discovery",
        "--service-discovery-namespace", namespace, "--service-discovery-port", "8000",
        "--prefill-selector", "app=llm-prefill", "--decode-selector", "app=llm-decode",
        "--host", "0.0.0.0", "--port", "8000",
        "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
        "--policy", "round_robin",
    ]  # fmt: skip
    container = {
        "name": "router", "image": "vllm-router:team", "command": ["vllm-router"],
        "args": args, "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": 8000}, "periodSeconds": 2},
    }  # fmt: skip
    pod = {"serviceAccountName": "llm-router", "containers": [container]}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": [pods_read]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "llm-router"},
         "subjects": [{"kind": "ServiceAccount", "name": "llm-router",
                       "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm-router"}},
                  "template": {"metadata": {"labels": labels_}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "llm", "namespace": namespace},
         "spec": {"selector": {"app": "llm-router"}, "ports": [{"name": "http", "port": 8000}]}},
    ]  # fmt: skip


def grew(kube: Kube, namespace: str) -> dict[str, int] | None:
    """Both team Deployments' replicas once each is at 2 or more, else None."""
    now = replicas(kube, namespace)
    return now if min(now.values()) >= 2 else None


#: aiperf's load on the team's stack: 4 req/s of 300-token prompts and 12 output tokens
#: for 60 s. The PDDeployment prices a replica low (prefill 700 tok/s, decode 28 tok/s at
#: u = 0.7) so that this load asks for about 1200/490 = 2.4 prefill and 48/19.6 = 2.4
#: decode replicas (the simulator's engines could serve it on one each: the test is about
#: what pdscaler writes, not about the engines' limits).
LOAD_RATE, LOAD_SECONDS, LOAD_PROMPT, LOAD_OUTPUT = 4.0, 60.0, 300, 12


def test_sizes_a_deployment_pair_it_did_not_create_through_scale_only(
    lab: Lab, kube: Kube, namespace: str, crd: str, tmp_path: Path
) -> None:
    """(a) llm-d's shape, with real requests: the team's two Deployments and its own
    vllm-router serve aiperf's load through the Service ``llm``; pdscaler grows both
    pools from 1 + 1 by /scale while every request is answered, each one paired inside
    the team's pools; the templates are untouched, the managedFields show pdscaler on
    spec.replicas only (through the scale subresource), and pdscaler created nothing."""
    templates = make_pair(kube, namespace)
    for obj in team_router(namespace):
        create_object(kube, namespace, obj)
    manifest = deployments_manifest(lab)
    manifest["spec"]["prefill"]["tokensPerSecond"] = 700
    manifest["spec"]["decode"]["tokensPerSecond"] = 28
    with request_path(lab, namespace, "llm") as (front, control, _proxy):
        wait_for(lambda: completion(front), 90, "a completion through the team's router")
        create_pdd(kube, namespace, manifest)
        rt = operator_runtime(lab)
        client_ = AiPerf.ensure()
        rows = [TraceRow(i / LOAD_RATE, LOAD_PROMPT, LOAD_OUTPUT)
                for i in range(int(LOAD_RATE * LOAD_SECONDS))]  # fmt: skip
        proc = client_.start(f"http://127.0.0.1:{front}", rows, tmp_path / "aiperf")
        grown: list[dict[str, int]] = []
        try:
            with ticking(rt, namespace, NAME):
                what = "both team Deployments grown by /scale under load"
                grown.append(wait_for(lambda: grew(kube, namespace), LOAD_SECONDS + 60, what))
                proc.wait(timeout=LOAD_SECONDS + 120)
        finally:
            if proc.poll() is None:
                proc.kill()
        result = AiPerf.result(tmp_path / "aiperf")
        decodes = [r for r in records(control) if r["kind"] == "decode"]
    print(f"grown to {grown}; aiperf {result.requests} requests, {result.errors} errors")
    assert result.errors == 0, result.raw.get("error_summary")
    assert result.requests == len(rows)
    # every request paired inside the team's pools, and the pods /scale added served
    strays = [r for r in decodes if not (str(r["prefill_pod"]).startswith("llm-prefill-")
              and str(r["decode_pod"]).startswith("llm-decode-") and r["kv_transfer"])]  # fmt: skip
    assert strays == []
    # the router adds discovered pods one at a time, each after its first health check:
    # a lab pod is Ready (kwok's timer) a moment before the simulator serves it, so that
    # check fails and the router retries 30 s later; at least one added pod serves
    served = {r["prefill_pod"] for r in decodes} | {r["decode_pod"] for r in decodes}
    assert len(served) >= 3, f"no pod /scale added served a request: {served}"
    assert only_scale_writes(rt) == []
    scales = {(w.kind, w.name) for w in rt.kube.audit.since(0) if w.verb == "scale"}
    assert scales == {("Deployment", "llm-prefill"), ("Deployment", "llm-decode")}
    for role in ("prefill", "decode"):
        dep = as_dict(kube, kube.apps.read_namespaced_deployment(f"llm-{role}", namespace))
        assert (
            dep["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.11.0"
        )
        assert (
            dep["spec"]["template"]["metadata"]["labels"] == templates[role]["metadata"]["labels"]
        )
        mine = [m for m in dep["metadata"]["managedFields"] if m["manager"] == "pdscaler"]
        assert [(m.get("subresource"), m["fieldsV1"]) for m in mine] == [
            ("scale", {"f:spec": {"f:replicas": {}}})
        ]
    names = {
        as_dict(kube, d)["metadata"]["name"]
        for d in kube.apps.list_namespaced_deployment(namespace).items
    }
    assert names == {"llm-prefill", "llm-decode", "llm-router"}
    services = {
        as_dict(kube, svc)["metadata"]["name"]
        for svc in kube.core.list_namespaced_service(namespace).items
    }
    assert services == {"llm"}
    pdd = get_pdd(kube, namespace, NAME)
    desired = pdd["status"]["decode"]["desiredReplicas"]
    key = {"namespace": namespace, "name": NAME, "pool": "decode"}  # the operator's metrics
    assert rt.telemetry.registry.get_sample_value("pdscaler_desired_replicas", key) == desired
    assert (condition(pdd, "Stalled") or {}).get("status") == "False"


def adapter_crd() -> dict[str, Any]:
    """A namespaced CRD with the /scale subresource of Dynamo's DGDSA."""
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
            "status": {
                "type": "object",
                "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}},
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{ADAPTER_PLURAL}.{ADAPTER_GROUP}"},
        "spec": {
            "group": ADAPTER_GROUP,
            "scope": "Namespaced",
            "names": {"plural": ADAPTER_PLURAL, "singular": "scalingadapter", "kind": ADAPTER_KIND},
            "versions": [{
                "name": ADAPTER_VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"}},
            }],
        },
    }  # fmt: skip


def test_sizes_a_scale_custom_resource_pair_standing_in_for_dynamo(
    lab: Lab, kube: Kube, namespace: str, crd: str, exporter: EngineExporter
) -> None:
    """(b) Dynamo's shape: one adapter object per pool; pdscaler writes the adapters'
    /scale (3 + 3) and never the backing Deployments (a DGDSA's controller would carry
    the replicas to the DGD: the lab has none, so they stay at 1)."""
    with contextlib.suppress(ApiException):  # another run made it: same body
        kube.apiext.create_custom_resource_definition(adapter_crd())  # type: ignore[arg-type]
    wait_for(lambda: crd_established(kube, f"{ADAPTER_PLURAL}.{ADAPTER_GROUP}"), 30, "adapter CRD")
    make_pair(kube, namespace)
    serve(kube, exporter, namespace)
    for role in ("prefill", "decode"):
        body = {"apiVersion": f"{ADAPTER_GROUP}/{ADAPTER_VERSION}", "kind": ADAPTER_KIND,
                "metadata": {"name": f"chat-{role}"}, "spec": {"replicas": 1}}  # fmt: skip
        kube.custom.create_namespaced_custom_object(
            ADAPTER_GROUP, ADAPTER_VERSION, namespace, ADAPTER_PLURAL, body
        )
        kube.custom.patch_namespaced_custom_object_status(
            ADAPTER_GROUP, ADAPTER_VERSION, namespace, ADAPTER_PLURAL, f"chat-{role}",
            {"status": {"replicas": 1, "selector": f"app=llm-{role}"}},
        )  # fmt: skip
    manifest = targets_manifest(lab, ADAPTER_KIND, f"{ADAPTER_GROUP}/{ADAPTER_VERSION}",
                                {r: f"chat-{r}" for r in ("prefill", "decode")})  # fmt: skip
    create_pdd(kube, namespace, manifest)
    rt = operator_runtime(lab)

    def adapters() -> dict[str, int]:
        get = kube.custom.get_namespaced_custom_object
        args = (ADAPTER_GROUP, ADAPTER_VERSION, namespace, ADAPTER_PLURAL)
        return {r: int(cast(Any, get(*args, f"chat-{r}"))["spec"]["replicas"]) for r in ROLES}

    with ticking(rt, namespace, NAME):
        wait_sizes(kube, namespace, adapters, "both adapters")
    assert only_scale_writes(rt) == []
    assert {(w.kind, w.name) for w in rt.kube.audit.since(0) if w.verb == "scale"} == {
        (ADAPTER_KIND, "chat-prefill"), (ADAPTER_KIND, "chat-decode")
    }  # fmt: skip
    assert replicas(kube, namespace) == {"prefill": 1, "decode": 1}


def test_holds_a_mixed_version_pair_with_a_condition(
    lab: Lab, kube: Kube, namespace: str, crd: str, exporter: EngineExporter
) -> None:
    """(c) prefill on v0.12.0, decode on v0.11.0: Progressing True, MixedVersions; the
    policy wants 3 + 3 (the condition says so) and neither Deployment is scaled."""
    make_pair(kube, namespace, prefill_image="vllm/vllm-openai:v0.12.0")
    serve(kube, exporter, namespace)
    create_pdd(kube, namespace, deployments_manifest(lab))
    rt = operator_runtime(lab)
    with ticking(rt, namespace, NAME):
        progressing = wait_condition(kube, namespace, NAME, "Progressing", "True", 60)
        assert progressing["reason"] == "MixedVersions"
        assert (
            "prefill runs vllm/vllm-openai:v0.12.0, decode vllm/vllm-openai:v0.11.0"
            in (progressing["message"])
        )
        wanted = f"the policy wants prefill {WANT}, decode {WANT}"
        wait_for(
            lambda: wanted in str(condition(get_pdd(kube, namespace, NAME), "Progressing")),
            60,
            "MixedVersions names what the policy wants",
        )
    assert replicas(kube, namespace) == {"prefill": 1, "decode": 1}
    assert [w for w in rt.kube.audit.since(0) if w.verb == "scale"] == []


def test_refuses_a_target_an_hpa_already_drives(
    lab: Lab, kube: Kube, namespace: str, crd: str, exporter: EngineExporter
) -> None:
    """(d) an autoscaling/v2 HPA on llm-decode: Stalled True, ScaleTargetConflict naming
    it, and pdscaler writes no /scale (not even prefill's)."""
    make_pair(kube, namespace)
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "decode-hpa"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "name": "llm-decode"},
                 "minReplicas": 1, "maxReplicas": 2,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                     "type": "Utilization", "averageUtilization": 80}}}]},
    }  # fmt: skip
    client.AutoscalingV2Api(kube.api).create_namespaced_horizontal_pod_autoscaler(
        namespace, cast(Any, hpa)
    )
    serve(kube, exporter, namespace)
    create_pdd(kube, namespace, deployments_manifest(lab))
    rt = operator_runtime(lab)
    with ticking(rt, namespace, NAME):
        stalled = wait_condition(kube, namespace, NAME, "Stalled", "True", 60)
        time.sleep(3)  # a few more ticks
    assert stalled["reason"] == "ScaleTargetConflict"
    assert "already driven by HorizontalPodAutoscaler decode-hpa" in stalled["message"]
    assert [w for w in rt.kube.audit.since(0) if w.verb == "scale"] == []
    assert replicas(kube, namespace) == {"prefill": 1, "decode": 1}
    assert (
        copy.deepcopy(condition(get_pdd(kube, namespace, NAME), "Reconciling") or {}).get("status")
        == "False"
    )
