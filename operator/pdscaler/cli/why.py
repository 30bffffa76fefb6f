"""``pdscaler why-not-scaling NAME`` (``kubectl pdd why-not-scaling``): why the last
decision of a PDDeployment did not change its pools, from its status alone.

Owns: reading one PDDeployment's status and listing, in order, what held its pools:
the last decision's own reason (a ``Hold...`` action or ``CapacityLimited``, with its
sentence), the Recommend mode (decisions published, not applied), the pause
annotation, the conditions that stop or bound scaling (MetricsAvailable False;
CapacityLimited, DeadlineInfeasible, SLOUnreachable, WritesFailing, Stalled, Paused
True, each with its message), a spec the operator has not observed yet, and pools
asked for more than are ready. Must not: recompute a decision or write anything.

    $ pdscaler why-not-scaling chat -n serving
    chat (serving): the last decision, HoldMetricsUnavailable at 2025-01-01T10:00:15Z,
    changed no pool:
    - HoldMetricsUnavailable: Held: prefill queue depth unknown
    - MetricsAvailable=False (PrometheusUnreachable): GET http://prometheus...: refused

A decision that scaled prints what it did and ``nothing held it``; ``-o json|yaml``
prints ``{"name", "namespace", "scaled", "action", "reasons": [...]}``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pdscaler import status
from pdscaler.cli.common import FormatOpt, OneLineCommand, dump
from pdscaler.cli.explain import ContextOpt, KubeconfigOpt, NamespaceOpt, read_pdd
from pdscaler.naming import ANNOTATION_PAUSED
from pdscaler.spec import PDDeploymentStatus
from pdscaler.types import Action, ConditionType

#: Conditions that hold or bound scaling while True (MetricsAvailable: while False).
HOLDING_TRUE = (
    ConditionType.CAPACITY_LIMITED,
    ConditionType.DEADLINE_INFEASIBLE,
    ConditionType.SLO_UNREACHABLE,
    ConditionType.WRITES_FAILING,
    ConditionType.STALLED,
    ConditionType.PAUSED,
)
#: What each action that changes no replica means, for a person.
ACTION_MEANING = {
    Action.HOLD: "the models see no shortfall and nothing to give back",
    Action.HOLD_METRICS_UNAVAILABLE: "the load shape or a pool's signals were unknown",
    Action.HOLD_STABILIZING: "a scale-down waits out the stabilization window",
    Action.HOLD_ROLLOUT: "a version rollout is shifting capacity",
    Action.HOLD_AT_LIMIT: "the pool is at replicas.min / replicas.max or maxGPUs",
    Action.CAPACITY_LIMITED: "the GPU budget (scaling.maxGPUs) or free GPUs cap the pools",
    Action.HOLD_AT_ZERO: "both pools are at zero and the holding proxy holds no request",
}


def analyse(pdd: dict[str, Any]) -> dict[str, Any]:
    """The reasons as data: ``scaled`` (the last decision changed a pool), its
    ``action`` and ``reasons`` (sentences, most direct first). Example: a status whose
    last decision is ``HoldStabilizing`` and whose mode is Recommend gives two reasons,
    the decision's and ``spec.scaling.mode is Recommend: ...``."""
    meta = pdd.get("metadata") or {}
    spec = pdd.get("spec") or {}
    st = status.parse_status(pdd.get("status")) or PDDeploymentStatus()
    ld = st.last_decision
    reasons: list[str] = []
    action = ld.action if ld is not None else None
    recommend = ((spec.get("scaling") or {}).get("mode") or "Auto") == "Recommend"
    annotated = str((meta.get("annotations") or {}).get(ANNOTATION_PAUSED, "")).lower()
    moved = action in set(Action) and not Action(action).holds
    scaled = moved and action != Action.CAPACITY_LIMITED and not recommend and annotated != "true"
    if ld is None:
        reasons.append(
            "the operator has not ticked it: is its namespace one the operator watches "
            "(the chart's watchNamespaces), and is the operator running?"
        )
    elif not scaled:
        meaning = ACTION_MEANING.get(Action(action)) if action in set(Action) else None
        reasons.append(
            f"{action}: {ld.message or ''}".rstrip(": ") + (f" ({meaning})" if meaning else "")
        )
    if recommend:
        reasons.append(
            "spec.scaling.mode is Recommend: decisions are published (Events, status), "
            "never applied to the pools"
        )
    held = [
        c
        for c in st.conditions or []
        if (c.type == ConditionType.METRICS_AVAILABLE and c.status == "False")
        or (c.type in HOLDING_TRUE and c.status == "True")
    ]
    if annotated == "true" and not any(c.type == ConditionType.PAUSED for c in held):
        reasons.append(f"the {ANNOTATION_PAUSED} annotation is true: no pool is written")
    reasons.extend(f"{c.type}={c.status} ({c.reason}): {c.message}" for c in held)
    generation = int(meta.get("generation") or 0)
    observed = st.observed_generation
    if observed is not None and observed < generation:
        reasons.append(
            f"the operator has not observed the latest spec yet (generation "
            f"{generation}, observed {observed})"
        )
    for role, pool in (("prefill", st.prefill), ("decode", st.decode)):
        if pool is None or pool.desired_replicas is None or pool.ready_replicas is None:
            continue
        if pool.ready_replicas < pool.desired_replicas:
            reasons.append(
                f"{role} asks for {pool.desired_replicas} replicas, "
                f"{pool.ready_replicas} are ready (pods starting or unschedulable)"
            )
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "scaled": scaled,
        "action": action,
        "time": ld.time.strftime("%Y-%m-%dT%H:%M:%SZ") if ld and ld.time else None,
        "message": ld.message if ld else None,
        "reasons": reasons,
    }


def render(found: dict[str, Any]) -> str:
    """``analyse``'s answer for a person."""
    head = f"{found['name']} ({found['namespace']})"
    when = f" at {found['time']}" if found["time"] else ""
    if found["action"] is None:
        lines = [f"{head}: no decision yet"]
    elif found["scaled"]:
        lines = [f"{head}: the last decision, {found['action']}{when}, scaled:"]
        lines.append(f"  {found['message']}")
        if not found["reasons"]:
            lines.append("nothing held it")
    else:
        what = "was capped" if found["action"] == Action.CAPACITY_LIMITED else "changed no pool"
        lines = [f"{head}: the last decision, {found['action']}{when}, {what}:"]
    if found["scaled"] and found["reasons"]:
        lines.append("what still holds or bounds it:")
    lines.extend(f"- {reason}" for reason in found["reasons"])
    return "\n".join(lines)


def cmd_why_not_scaling(
    name: Annotated[str, typer.Argument(help="The PDDeployment's name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: FormatOpt = None,
) -> None:
    """Why the last decision did not scale: its reason, the mode, conditions, pools."""
    found = analyse(read_pdd(name, namespace, kubeconfig, context))
    typer.echo(dump(found, output) if output is not None else render(found))


def register(app: typer.Typer) -> None:
    """Add ``why-not-scaling`` to an app (``pdscaler``, ``kubectl pdd``)."""
    app.command("why-not-scaling", cls=OneLineCommand)(cmd_why_not_scaling)
