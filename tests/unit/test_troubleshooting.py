"""docs/troubleshooting.md has an entry for every condition reason the status can carry
(``types.ConditionReason``, headed ``Condition: Reason`` under the condition the CRD lists
it for), for every alert the chart's PrometheusRule renders (headed by the alert's name),
each with what it means, what to check and what to do; every alert's ``runbook_url``
(``runbookBaseURL#<alert name in lower case>``) names an anchor the file has; every
``#anchor`` link inside the file resolves; and every Event and rollout-step reason the
code can emit (``EventReason``, ``Action``, ``RolloutReason``) is in its tables.

Anchors are GitHub's: the heading in lower case, punctuation but ``-`` and ``_`` dropped,
spaces as ``-``: ``### Stalled: InvalidSpec`` -> ``stalled-invalidspec``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pdscaler.types import Action, ConditionReason, EventReason, RolloutReason
from support.chartkit import template

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "troubleshooting.md"
CRD = REPO / "crds" / "pdscaler.io_pddeployments.yaml"
VALUES = REPO / "charts" / "pdscaler" / "values.yaml"
TYPE_LIST = re.compile(r"\b([A-Z][A-Za-z]*): ([A-Z][A-Za-z0-9]*(?:, [A-Z][A-Za-z0-9]*)*)\.")
PARTS = ("**Means.**", "**Check.**", "**Do.**")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: ``Stalled: InvalidSpec`` -> ``stalled-invalidspec``."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def entries(text: str) -> dict[str, str]:
    """``### `` heading -> its body (to the next heading of any level)."""
    out: dict[str, str] = {}
    for block in re.split(r"(?m)^(?=#{1,3} )", text):
        head, _, body = block.partition("\n")
        if head.startswith("### "):
            out[head[4:].strip()] = body
    return out


def reason_types() -> dict[str, str]:
    """Reason -> the condition type the CRD lists it under."""
    doc = yaml.safe_load(CRD.read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    props = schema["properties"]["status"]["properties"]["conditions"]["items"]["properties"]
    text = props["reason"]["description"]
    return {r: kind for kind, names in TYPE_LIST.findall(text) for r in names.split(", ")}


def alerts() -> dict[str, str]:
    """Alert name -> runbook_url, as the chart renders them with every alert on."""
    docs = template("--set", "monitoring.prometheusRule.enabled=true", monitoring=True)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return {
        r["alert"]: r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }


def test_every_condition_reason_has_an_entry_under_its_condition() -> None:
    found = entries(DOC.read_text())
    types = reason_types()
    missing = [
        f"{types[r.value]}: {r.value}"
        for r in ConditionReason
        if f"{types[r.value]}: {r.value}" not in found
    ]
    assert missing == []


def test_every_alert_has_an_entry_and_its_runbook_url_anchor_exists() -> None:
    text = DOC.read_text()
    found = entries(text)
    anchors = {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}
    base = yaml.safe_load(VALUES.read_text())["monitoring"]["prometheusRule"]["runbookBaseURL"]
    assert base.endswith("docs/troubleshooting.md")
    rendered = alerts()
    assert len(rendered) >= 12
    for name, url in rendered.items():
        assert name in found, name
        page, _, anchor = url.partition("#")
        assert page == base, url
        assert anchor in anchors, url


def test_every_entry_says_what_it_means_what_to_check_and_what_to_do() -> None:
    text = DOC.read_text()
    sections = text.split("\n## ")
    checked = 0
    for section in sections:
        if not section.startswith(("Alerts", "Conditions")):
            continue
        for head, body in entries("## " + section).items():
            assert all(part in body for part in PARTS), head
            checked += 1
    assert checked >= len(ConditionReason) + 12


def test_every_link_inside_the_file_resolves() -> None:
    text = DOC.read_text()
    anchors = {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links, "no internal link checked"
    assert sorted({a for a in links if a not in anchors}) == []


def test_every_event_and_rollout_reason_is_in_the_tables() -> None:
    text = DOC.read_text()
    prefixes = {EventReason.CREATED, EventReason.UPDATED, EventReason.DELETED}
    names = [
        *(f"{r.value}<Kind>" if r in prefixes else r.value for r in EventReason),
        *(a.value for a in Action),
        *(r.value for r in RolloutReason),
    ]
    names = [n if n != EventReason.RECOMMEND.value else "Recommend<Action>" for n in names]
    assert [n for n in names if f"`{n}`" not in text] == []


def test_the_slug_is_githubs() -> None:
    assert slug("Stalled: InvalidSpec") == "stalled-invalidspec"
    assert slug("PdscalerNoLeader") == "pdscalernoleader"
    assert slug("kstatus: what Flux, kpt and `kubectl wait` read") == (
        "kstatus-what-flux-kpt-and-kubectl-wait-read"
    )
