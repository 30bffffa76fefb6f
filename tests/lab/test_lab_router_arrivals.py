"""R as ARRIVALS from the real router, in the lab: the operator deploys the cell of a
scaled-down ``deploy/examples/chat.yaml`` (the request path of
test_request_path_operator.py: the real ``vllm-router`` run by the pod runner at its
pod IP, with ``--prometheus-host/--prometheus-port 29000`` and a container port named
``metrics``), requests go client -> front Service -> router -> prefill -> decode, and:

1. the lab's Prometheus (the relabelling of deploy/prometheus/kubernetes-sd.yaml)
   scrapes every router pod of the PDDeployment on ``<podIP>:29000/metrics`` with
   ``pdscaler_io_role="router"``, and its arrival counter
   ``vllm_router_processed_requests_total`` carries namespace, pod, pdscaler_io_name and
   pdscaler_io_revision (of a serving cell), one series per worker;
2. the preset's own arrival query (``metricsql.build_queries``, ``Key.ARRIVAL_RATE``)
   answers a positive rate while requests flow;
3. the operator says R is arrivals from the routers: ``MetricsAvailable`` True with
   the message ``load shape known; R = arriving requests/s
   (vllm_router_processed_requests_total / 2, cell routers)``;
4. the counter over 2 is the number of requests the client sent through the front (a
   router that counted each request once, not once per worker, would fail it).
"""

from __future__ import annotations

from typing import Any

from pdlab.cluster.lab import Lab
from pdscaler import router
from pdscaler.presets import rate_source
from pdscaler.spec import PDDeploymentSpec
from support import router_counts as rc
from support.labkit import Kube, wait_for
from support.opkit import condition, get_pdd
from support.served_chat import NAME, completion, scaled_chat, serving

ARRIVALS = "load shape known; R = " + rate_source("vllm", arrivals=True)


def test_the_routers_arrival_counter_is_scraped_and_read_as_r(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    assert ARRIVALS.endswith("(vllm_router_processed_requests_total / 2, cell routers)")
    with serving(lab, kube, namespace) as (front, _control, _proxy):
        # a request every 0.2 s, so the window's rate stays > 0
        load = rc.CountedLoad(lambda: completion(front, max_tokens=4))
        load.first()
        with load:
            # 1. the routers are targets on their metrics port, with the pod labels
            targets = wait_for(lambda: rc.router_targets(lab, namespace), 90, "a router target up")
            for t in targets:
                assert t["scrapeUrl"].endswith(f":{router.METRICS_PORT}/metrics"), t
                assert t["labels"]["pdscaler_io_name"] == NAME
                assert t["labels"]["pod"].startswith(f"{NAME}-")
                assert "-router-" in t["labels"]["pod"]
            series = rc.wait_router_series(
                lab, namespace, NAME, "vllm_router_processed_requests_total"
            )
            for s in series:
                labels = s["metric"]
                assert labels["pod"].startswith(f"{NAME}-{labels['pdscaler_io_revision']}-router")
                assert labels["worker"].startswith("http://")
            # 2. the preset's arrival query answers a positive rate
            doc = scaled_chat(namespace, lab.prometheus_url)
            spec = PDDeploymentSpec.model_validate(doc["spec"])
            rate = rc.wait_arrival_rate(lab, spec, namespace, NAME)
            assert len(rate) == 1

            # 3. the operator reads R as arrivals and says so
            def says_arrivals() -> dict[str, Any] | None:
                c = condition(get_pdd(kube, namespace, NAME), "MetricsAvailable")
                ok = c is not None and c["status"] == "True" and c.get("message") == ARRIVALS
                if not ok:  # raised, so a timeout reports the condition last seen
                    raise AssertionError(f"MetricsAvailable is {c!r}")
                return c

            wait_for(says_arrivals, 120, f"MetricsAvailable True saying {ARRIVALS!r}")
        # 4. the "/ 2" is the router's behaviour: its counter over 2 is the requests it
        # was sent (every one that succeeded at most, every one tried at least), once the
        # last scrape has the final counts
        sel = rc.router_selector(namespace, NAME)
        counted = rc.settled_total(lab, f"sum(vllm_router_processed_requests_total{sel}) / 2")
        print(f"router counter / 2: {counted:g}; client: {load!r}")
        assert load.ok <= counted <= load.tried, (counted, load)
        assert load.ok >= 5, load
