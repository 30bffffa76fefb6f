"""The lab's Prometheus scrapes a target a test starts (registered through file_sd) and
answers PromQL for it, keeping the labels the target exports (honor_labels)."""

from __future__ import annotations

import secrets
from typing import Any

from pdlab import prometheus
from pdlab.lab import Lab
from support.labkit import metrics_exporter, wait_for


def test_prometheus_scrapes_a_registered_target_and_answers_promql(lab: Lab) -> None:
    assert prometheus.ready(lab.prometheus_url)
    token = secrets.token_hex(4)
    metric = f"pdlab_test_requests_total_{token}"
    state = {"count": 0}

    def exposition() -> str:
        state["count"] += 5
        return (
            f"# TYPE {metric} counter\n"
            f'{metric}{{namespace="serving",pod="chat-prefill-0",pdscaler_io_name="chat",'
            f'pdscaler_io_role="prefill"}} {state["count"]}\n'
        )

    name = f"test-{token}"
    with metrics_exporter(exposition) as host_port:
        # The group's namespace label loses to the exported one (honor_labels).
        lab.add_scrape_target(name, host_port, {"namespace": "ignored", "job": f"job-{token}"})
        try:
            result: list[dict[str, Any]] = wait_for(
                lambda: lab.query(f"{metric}[30s]") and lab.query(f"rate({metric}[30s])"),
                60,
                f"two scrapes of {host_port}",
            )
            target = wait_for(
                lambda: [
                    t
                    for t in prometheus.active_targets(lab.prometheus_url)
                    if t["scrapeUrl"] == f"http://{host_port}/metrics"
                ],
                10,
                "the target in /api/v1/targets",
            )[0]
        finally:
            lab.remove_scrape_target(name)
    assert target["health"] == "up"
    labels = result[0]["metric"]
    assert labels["namespace"] == "serving"
    assert labels["pod"] == "chat-prefill-0"
    assert labels["pdscaler_io_name"] == "chat"
    assert labels["pdscaler_io_role"] == "prefill"
    assert labels["job"] == f"job-{token}"
    assert float(result[0]["value"][1]) > 0  # the counter grew between scrapes
