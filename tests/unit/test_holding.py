"""holding: with scaleToZero the request path goes through the holding proxy: the
holder Deployment, the routers' Service as its upstream, the front Service turned to
the holder; without it nothing changes (issue 29, item 3)."""

from __future__ import annotations

from pdscaler import manifests
from pdscaler.holding import DEFAULT_HOLDER_IMAGE, holding_objects
from pdscaler.objects import SPEC_HASH_ANNOTATION, Meta, spec_hash
from support.builders import chat_spec

META = Meta(name="chat", namespace="serving", uid="u-1")
ZERO = {"min": 0, "max": 8}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_scale_to_zero_puts_the_holder_in_front() -> None:
    spec = chat_spec(
        prefill={"replicas": ZERO},
        decode={"replicas": ZERO},
        scaleToZero={"idleSeconds": 60},
        router={"template": {"spec": {"tolerations": [TOLERATION]}}},
    )
    front = manifests.front_service(META, 8000)
    holder, routers, turned = holding_objects(META, spec, front)
    assert holder["metadata"]["name"] == "chat-holder"
    pod = holder["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == DEFAULT_HOLDER_IMAGE
    assert container["command"] == ["python", "-m", "pdscaler.holder"]
    assert container["args"][:2] == ["--upstream", "chat-routers.serving.svc:8000"]
    assert {p["name"] for p in container["ports"]} == {"http", "metrics"}
    assert pod["tolerations"] == [TOLERATION]
    labels = holder["spec"]["template"]["metadata"]["labels"]
    assert labels == {"pdscaler.io/name": "chat", "pdscaler.io/role": "holder"}
    assert routers["metadata"]["name"] == "chat-routers"
    assert routers["spec"]["selector"]["pdscaler.io/role"] == "router"
    assert turned["metadata"]["name"] == "chat"
    assert turned["spec"]["selector"] == labels
    assert turned["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == spec_hash(turned)
    assert front["spec"]["selector"]["pdscaler.io/role"] == "router"  # not changed in place


def test_without_scale_to_zero_the_front_selects_the_routers() -> None:
    front = manifests.front_service(META, 8000)
    assert holding_objects(META, chat_spec(), front) == [front]


def test_the_holder_image_from_the_spec() -> None:
    image = "registry.example/pdscaler/pdscaler:0.1.0"
    spec = chat_spec(
        prefill={"replicas": ZERO},
        decode={"replicas": ZERO},
        scaleToZero={"idleSeconds": 60, "image": image},
    )
    holder = holding_objects(META, spec, manifests.front_service(META, 8000))[0]
    assert holder["spec"]["template"]["spec"]["containers"][0]["image"] == image
