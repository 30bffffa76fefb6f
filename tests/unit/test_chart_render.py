"""The chart rendered by real Helm (``helm lint --strict``, ``helm template``) with each
optional feature on and off: the Prometheus Operator objects exist only when enabled
AND the cluster serves their kind, the PodMonitor gives the engine series exactly the
labels the metrics presets select on, the CRD template is crds/ with Helm's metadata,
and the pod-level knobs (pull secrets, annotations, labels, env, extra arguments,
topology spread, disruption budget, NetworkPolicy, the ``helm test`` pod) land where
Kubernetes reads them. The test pod's own command is run against a real /healthz.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
import yaml

from pdscaler.metricsql.templates import PROM_NAME, PROM_ROLE
from pdscaler.telemetry import MetricsServer, Telemetry
from support.chartkit import CHART, NAMESPACE, RELEASE, helm, schema, template, values

ALL_ON = [
    "--set", "monitoring.serviceMonitor.enabled=true",
    "--set", "monitoring.podMonitor.enabled=true",
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", "networkPolicy.enabled=true",
    "--set", "replicaCount=2",
    "--set", "imagePullSecrets={regcred}",
    "--set", "podAnnotations.team=serving",
    "--set", "podLabels.tier=control",
    "--set", "env[0].name=HTTPS_PROXY,env[0].value=http://proxy:3128",
    "--set", "extraArgs={--log-format=plain}",
    "--set", "topologySpreadConstraints[0].maxSkew=1",
    "--set", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
    "--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
]  # fmt: skip


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = kinds(docs)[kind]
    return doc


@pytest.mark.parametrize("args", [[], ALL_ON], ids=["defaults", "all-features"])
def test_chart_lints_strictly(args: list[str]) -> None:
    helm("lint", str(CHART), "--strict", *args)


@pytest.mark.parametrize("enabled", [False, True])
@pytest.mark.parametrize("served", [False, True])
def test_monitoring_objects_need_the_value_and_the_crds(enabled: bool, served: bool) -> None:
    args = ALL_ON if enabled else []
    present = set(kinds(template(*args, monitoring=served)))
    expected = {"ServiceMonitor", "PodMonitor", "PrometheusRule"} if enabled and served else set()
    assert present & {"ServiceMonitor", "PodMonitor", "PrometheusRule"} == expected


def test_service_monitor_scrapes_the_metrics_service_with_its_own_labels() -> None:
    docs = template(*ALL_ON, monitoring=True)
    sm, svc = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["honorLabels"] is True  # the series' own namespace label wins
    with pytest.raises(AssertionError, match=r"metrics\.service"):
        template(*ALL_ON, "--set", "metrics.service=false", monitoring=True)


def relabelled_targets(relabelings: list[dict[str, Any]]) -> dict[str, str]:
    """target label -> the discovery label it is copied from."""
    return {r["targetLabel"]: r["sourceLabels"][0] for r in relabelings if r.get("targetLabel")}


def test_pod_monitor_gives_the_labels_the_presets_select_on() -> None:
    pm = one(template(*ALL_ON, monitoring=True), "PodMonitor")
    engines, routers = pm["spec"]["podMetricsEndpoints"]
    # the same relabelling as the plain scrape job users paste (deploy/prometheus/)
    (job,) = yaml.safe_load((CHART.parents[1] / "deploy/prometheus/kubernetes-sd.yaml").read_text())
    plain = {r["target_label"]: r["source_labels"][0] for r in job["relabel_configs"]
             if not r.get("target_label", "__").startswith("__")}  # fmt: skip
    for endpoint in (engines, routers):
        targets = relabelled_targets(endpoint["relabelings"])
        assert targets["namespace"] == "__meta_kubernetes_namespace"
        assert targets["pod"] == "__meta_kubernetes_pod_name"
        assert targets[PROM_NAME] == "__meta_kubernetes_pod_label_pdscaler_io_name"
        assert targets[PROM_ROLE] == "__meta_kubernetes_pod_label_pdscaler_io_role"
        assert targets == plain
    # engines on their port (manifests.PORT_NAME), the routers on theirs (router.py)
    assert engines["port"] == "http"
    assert routers["port"] == "metrics"

    def keeps(endpoint: dict[str, Any], role: str) -> bool:
        (rule,) = [r for r in endpoint["relabelings"]
                   if r.get("sourceLabels") == ["__meta_kubernetes_pod_label_pdscaler_io_role"]
                   and r.get("action") == "keep"]  # fmt: skip
        return re.fullmatch(rule["regex"], role) is not None

    # frontend: a stack's own (Dynamo's); holder: the holding proxy (scaleToZero)
    roles = ("prefill", "decode", "router", "frontend", "holder")
    assert [keeps(engines, r) for r in roles] == [True, True, False, True, False]  # router http: no
    assert [keeps(routers, r) for r in roles] == [False, False, True, False, True]
    exprs = {e["key"]: e for e in pm["spec"]["selector"]["matchExpressions"]}
    assert exprs["pdscaler.io/role"]["values"] == [
        "prefill",
        "decode",
        "router",
        "holder",
        "frontend",
    ]
    assert pm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}  # the default scope
    wide = template(*ALL_ON, "--set", "clusterWide=true", monitoring=True)
    assert one(wide, "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}
    scoped = template(*ALL_ON, "--set", "watchNamespaces={a,b}", monitoring=True)
    assert one(scoped, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}


def test_the_crd_template_is_the_source_crd_plus_helm_metadata() -> None:
    source = yaml.safe_load((CHART.parents[1] / "crds/pdscaler.io_pddeployments.yaml").read_text())
    crd = one(template(), "CustomResourceDefinition")
    meta = crd.pop("metadata")
    assert meta["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert source["metadata"]["labels"].items() <= meta["labels"].items()
    assert meta["name"] == source.pop("metadata")["name"]
    assert crd == source
    crd = one(template("--set", "crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]
    assert "CustomResourceDefinition" not in kinds(template("--set", "crds.install=false"))


def test_pod_level_values_land_in_the_pod() -> None:
    docs = template(*ALL_ON, "--set", "global.imagePullSecrets[0].name=shared")
    pod = one(docs, "Deployment")["spec"]["template"]
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "shared"}, {"name": "regcred"}]
    assert pod["metadata"]["annotations"] == {"team": "serving"}
    assert pod["metadata"]["labels"]["tier"] == "control"
    (container,) = spec["containers"]
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in container["env"]
    assert container["args"][-1] == "--log-format=plain"  # after the chart's own
    (spread,) = spec["topologySpreadConstraints"]
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert spread["labelSelector"] == {"matchLabels": selector}


def test_disruption_budget_only_with_more_than_one_replica() -> None:
    assert "PodDisruptionBudget" not in kinds(template())
    pdb = one(template("--set", "replicaCount=2"), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    selector = one(template(), "Deployment")["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    off = template("--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=false")
    assert "PodDisruptionBudget" not in kinds(off)


def test_network_policy_opens_only_the_metrics_port() -> None:
    """Enabled with its defaults, the metrics port (/metrics, /healthz) is reachable
    only by what scrapes or tests it: Prometheus pods (``app.kubernetes.io/name:
    prometheus``, as the Prometheus Operator and the prometheus chart label them) in any
    namespace, and the release's own pods (the ``helm test`` pod); other peers replace
    the Prometheus default, the release's pods stay; ``metricsFrom: []`` is anywhere."""
    assert "NetworkPolicy" not in kinds(template())
    docs = template(*ALL_ON)
    np = one(docs, "NetworkPolicy")
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"port": values()["metrics"]["port"], "protocol": "TCP"}]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    assert selector.items() <= test_pod["metadata"]["labels"].items()
    own = {"podSelector": {"matchLabels": selector}}
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    assert rule["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": prometheus}},
        own,
    ]
    peer = "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring"
    egress = "networkPolicy.egress[0].ports[0].port=443"
    np = one(template(*ALL_ON, "--set", peer, "--set", egress), "NetworkPolicy")
    assert np["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}},
        own,
    ]
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    anywhere = one(template(*ALL_ON, "--set-json", "networkPolicy.metricsFrom=[]"), "NetworkPolicy")
    assert "from" not in anywhere["spec"]["ingress"][0]


def test_the_helm_test_pod_asks_healthz_and_its_command_works() -> None:
    docs = template()
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert (
        container["image"]
        == one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert "command" not in container  # the image's entrypoint, `pdscaler`
    svc = one(docs, "Service")
    port = svc["spec"]["ports"][0]["port"]
    verb, url = container["args"]
    assert verb == "healthcheck"
    assert url == f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{port}/healthz"
    assert f"{RELEASE}-pdscaler-metrics" in url
    # the pod's command, as is, against a real /healthz (healthy, then unhealthy)
    healthy = [True]
    server = MetricsServer(Telemetry(), 0, healthy=lambda: healthy[0]).start()
    try:
        local = f"http://127.0.0.1:{server.port}/healthz"
        argv = [sys.executable, "-m", "pdscaler", verb, local]
        ok = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == "200 ok"
        healthy[0] = False
        bad = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert bad.returncode == 1, bad.stderr  # 503: the pod fails, helm test fails
    finally:
        server.stop()
    assert "Pod" not in kinds(template("--set", "tests.enabled=false"))


def test_schema_accepts_global_values_of_a_parent_chart() -> None:
    v = values()
    v["global"] = {"imagePullSecrets": ["regcred"], "storageClass": "fast", "x": {"y": 1}}
    jsonschema.validate(v, schema())
    v["monitoring"]["prometheusRule"]["disabled"] = {"PdscalerNoSuchAlert": True}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(v, schema())
