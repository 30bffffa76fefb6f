"""Drill D11, poison writes: a version ending in '-', a 45-character name, an exhausted
Service quota and a rejecting admission policy. The first two are refused at admission
(the CRD's CEL rules, with the sentence ``pdscaler plan`` prints); the other two can only
be refused at the write: the serving cell is still created and scaled (within two ticks
of a load change) and the WritesFailing condition names the refused write with the API
server's reason.

Against the lab's API server (a ResourceQuota ``services: 0`` in the test namespace, a
ValidatingAdmissionPolicy bound to the test namespace only and deleted afterwards),
the operator in-process ticking every second, fed through ``metrics_source``
(``runtime.Runtime``) so the load change is exact: R 1 req/s (1 / 1) -> R 4 (4 / 4).
Each case < 30 s. The CRD is cluster-scoped: on a shared lab another user may apply an
older copy between this test's apply and its create, so the admission cases re-apply it
just before; run them on a private lab for a clean result (PDLAB_DIR and every
PDLAB_PORT_<NAME> shifted, as docs/lab.md describes).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from drills.report import DrillRecord
from pdlab.cluster.kubeclient import apply_crd
from pdlab.cluster.lab import Lab
from pdscaler import router
from pdscaler.spec import MSG_NAME_LENGTH, MSG_VERSION_LABEL
from pdscaler.types import ConditionReason, ConditionType, Role
from support.builders import snapshot
from support.labkit import Kube, wait_for
from support.metrics_feed import fed_runtime, manifest
from support.opkit import (
    create_pdd,
    patch_spec,
    ticking,
    total,
    wait_both_pools,
    wait_condition,
    wait_stable,
)

LOW = snapshot(1.0, ttft=0.3, tpot=0.02, running=0.0)
HIGH = snapshot(4.0, ttft=0.3, tpot=0.02, running=0.0)


def rejected(kube: Kube, drill: DrillRecord, write: Callable[[], object]) -> str:
    """The message of the API server's refusal of ``write`` (a create or patch; fails
    the test if it is admitted), counted in the drill's record (an admitted write is a
    violation). The CRD is cluster-scoped and a shared lab's other users apply their own
    copy: this branch's is applied again first (a private lab, as the module docstring
    says, has no such race)."""
    apply_crd(kube)
    try:
        write()
    except ApiException as err:
        refusal = err
    else:
        drill.sampled(1, 1)
        pytest.fail("admitted")
    drill.sampled(1, int(refusal.status != 422))
    assert refusal.status == 422, refusal.body
    assert refusal.body is not None
    return str(json.loads(refusal.body)["message"])


def test_drill_d11_a_version_that_is_no_label_value_is_refused_at_admission(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    """``v2-`` (a valid image tag, not a label value) is refused on create, and on a
    patch of a running PDDeployment, with the CEL rule's sentence."""
    drill.describe(
        "D11",
        fault="engine.version 'v2-' (a valid tag, no label value) on create and on a patch",
        invariant="refused at admission (422) with the field's sentence",
    )
    bad = manifest("dash", lab)
    bad["spec"]["engine"]["version"] = "v2-"  # type: ignore[index]
    body = rejected(kube, drill, lambda: create_pdd(kube, namespace, bad))
    assert MSG_VERSION_LABEL in body
    assert "spec.engine.version" in body
    create_pdd(kube, namespace, manifest("dash", lab))
    body = rejected(
        kube, drill, lambda: patch_spec(kube, namespace, "dash", {"engine": {"version": "v2-"}})
    )
    assert MSG_VERSION_LABEL in body


def test_drill_d11_a_name_too_long_for_its_objects_is_refused_at_admission(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    """45 characters: ``<name>-<revision>-prefill`` would be 80 > 63."""
    drill.describe(
        "D11",
        fault="a 45-character PDDeployment name (its objects' names would pass 63)",
        invariant="refused at admission (422) naming metadata.name; 28 characters admitted",
    )
    name = "a-pddeployment-name-of-forty-five-characters"
    name += "x" * (45 - len(name))
    assert len(name) == 45
    body = rejected(kube, drill, lambda: create_pdd(kube, namespace, manifest(name, lab)))
    assert MSG_NAME_LENGTH in body
    assert "metadata.name" in body
    create_pdd(kube, namespace, manifest("n" * 28, lab))  # the longest name admitted


def scales_within_two_ticks(
    kube: Kube, namespace: str, name: str, rt: Any, feed: Any, drill: DrillRecord
) -> None:
    """Once the cell serves at 1 / 1 (every pod Ready), R 1 -> 4: both pools at 4 after
    at most two ticks that started after the change (plus the one that may be running
    when it happens). Recorded: one sample, a violation if it took more than 3 ticks."""
    # the cell starts decode first: prefill follows once a decode pod is Ready, so a
    # stable (0, 1) can be seen on the way (under load); wait for the 1 / 1 it settles at
    wait_for(
        lambda: wait_stable(kube, namespace, name, hold=1.0, timeout=30) == (1, 1),
        60,
        "the cell stable at 1 / 1",
    )
    before, t0 = rt.ticks, time.monotonic()
    feed.set(HIGH)
    wait_both_pools(kube, namespace, name, 4, 30, "4 / 4 after R 4")
    took = rt.ticks - before  # 0 when the tick running at the change did it all
    drill.sampled(1, int(took > 3))
    drill.recovered("scaled 1 / 1 -> 4 / 4 despite the refused write", time.monotonic() - t0)
    assert took <= 3, f"took {took} ticks"


def test_drill_d11_an_exhausted_service_quota_does_not_freeze_the_cell(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    """ResourceQuota services: 0: the front Service is refused (403 exceeded quota) on
    every tick; the cell's Deployments are created and scaled all the same, and
    WritesFailing names the refused create. (Before: creates ran first and the refusal
    aborted every tick: no scale, no status.)"""
    name = "poison-quota"
    drill.describe(
        "D11",
        fault="ResourceQuota services: 0 (the front Service refused on every tick)",
        invariant="the cell still scales within 2 ticks; WritesFailing names the write",
        shortened="in-process operator at 1 tick/s",
    )
    quota: Any = {"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}}
    kube.core.create_namespaced_resource_quota(namespace, quota)
    rt, feed = fed_runtime(lab)
    feed.set(LOW)
    with ticking(rt, namespace, name):
        create_pdd(kube, namespace, manifest(name, lab))
        c = wait_condition(kube, namespace, name, ConditionType.WRITES_FAILING, "True", 20)
        assert c["reason"] == ConditionReason.WRITE_FAILED
        assert f"create Service/{name}: 403 Forbidden" in c["message"]
        assert "exceeded quota" in c["message"]
        wait_for(lambda: total(kube, namespace, name, Role.DECODE) >= 1, 20, "decode created")
        scales_within_two_ticks(kube, namespace, name, rt, feed, drill)
        kube.core.delete_namespaced_resource_quota("no-services", namespace)
        wait_condition(kube, namespace, name, ConditionType.WRITES_FAILING, "False", 20)
        kube.core.read_namespaced_service(name, namespace)


@contextlib.contextmanager
def refusing_policy(kube: Kube, namespace: str, binding: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy refusing the RoleBinding ``binding`` in ``namespace``
    only (bound by a namespace selector); deleted afterwards. Yields its message."""
    api = client.AdmissionregistrationV1Api(kube.api)
    name = f"drill-d11-{secrets.token_hex(3)}"
    message = f"drill D11 refuses rolebinding {binding}"
    policy: Any = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["rbac.authorization.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["rolebindings"],
                    }
                ]
            },
            "validations": [
                {"expression": f"object.metadata.name != '{binding}'", "message": message}
            ],
        },
    }
    bound: Any = {
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    api.create_validating_admission_policy(policy)
    try:
        api.create_validating_admission_policy_binding(bound)
        probe: Any = {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"},
            "subjects": [],
        }

        def enforced() -> bool:
            try:
                kube.rbac.create_namespaced_role_binding(namespace, probe, dry_run="All")
            except ApiException as err:
                return message in str(err.body)
            return False

        wait_for(enforced, 30, "the admission policy enforced")
        yield message
    finally:
        with contextlib.suppress(ApiException):
            api.delete_validating_admission_policy_binding(name)
        with contextlib.suppress(ApiException):
            api.delete_validating_admission_policy(name)


def test_drill_d11_a_rejecting_admission_policy_does_not_freeze_the_cell(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    """The routers' RoleBinding is refused by an admission policy on every tick: the
    pools are created and scaled all the same; WritesFailing quotes the policy."""
    name = "poison-policy"
    drill.describe(
        "D11",
        fault="a ValidatingAdmissionPolicy refusing the routers' RoleBinding on every tick",
        invariant="the cell still scales within 2 ticks; WritesFailing quotes the policy; no "
        "tick raises",
        shortened="in-process operator at 1 tick/s",
    )
    binding = router.account_name(name)
    with refusing_policy(kube, namespace, binding) as message:
        rt, feed = fed_runtime(lab)
        feed.set(LOW)
        with ticking(rt, namespace, name):
            create_pdd(kube, namespace, manifest(name, lab))
            c = wait_condition(kube, namespace, name, ConditionType.WRITES_FAILING, "True", 20)
            assert f"create RoleBinding/{binding}:" in c["message"]
            assert message in c["message"]
            wait_for(lambda: total(kube, namespace, name, Role.DECODE) >= 1, 20, "decode")
            scales_within_two_ticks(kube, namespace, name, rt, feed, drill)
            ticked = rt.ticks  # a second more, and at least one more tick ended (refused)
            time.sleep(1.0)
            wait_for(lambda: rt.ticks > ticked or None, 30, "a tick after the scale-up")
            assert errors_flat(rt, namespace, name)


def errors_flat(rt: Any, namespace: str, name: str) -> bool:
    return float(rt.telemetry.errors.labels(namespace, name)._value.get()) == 0.0
