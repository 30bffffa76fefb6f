"""Every ``console`` block of README.md and docs/install.md says what it needs, and the
ones that need no cluster run as written (tests/support/doccommands.py has the markers).

* every block has a marker, and every marker opens a block;
* ``offline`` blocks: each command exits 0, and every number of the output it shows
  (the ``# `` lines, parentheses aside, which comment rather than quote) is in what it
  printed: README's ``# N_P 19.05 -> 20 replicas`` needs 19.05 and 20 in ``pdscaler plan
  ratio``'s table;
* ``images`` blocks run with the settings and ``DRY_RUN=1``: they print the builds and
  pushes of both images under ``$REGISTRY``;
* ``cluster`` blocks cannot run here, but their ``helm install``/``upgrade`` render offline
  (``helm template``, same arguments), and README's quick start renders what it promises:
  the RoleBinding in ``serving``, the image from ``$REGISTRY``, ``$PROMETHEUS_URL``
  allowed, the PodMonitor labelled for kube-prometheus-stack; its ``sed`` gives the
  example PDDeployment with the router image from ``$REGISTRY`` and ``$PROMETHEUS_URL``.
  Every ``$VARIABLE`` they use is set by a ``settings`` block.

Needs the helm ``make lab-build`` builds: skipped without it locally, failed in CI.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdlab.cluster.config import helm_path
from support.chartkit import tool
from support.doccommands import DOCS, NEEDS, REPO, Block, Command, blocks, markers, of

README = REPO / "README.md"
NUMBER = re.compile(r"\d+(?:\.\d+)*")
SETTINGS = {
    "REGISTRY": "registry.example.com/you",
    "PROMETHEUS_URL": "http://kube-prometheus-stack-prometheus.monitoring.svc:9090",
}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}:{tool(helm_path()).parent}:{os.environ['PATH']}"
    return {**os.environ, "PATH": path, **(extra or {})}


def _run(shell: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + shell],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text.replace(",", "")))


def _settings() -> dict[str, str]:
    """The variables the docs' settings blocks export, as they set them."""
    out: dict[str, str] = {}
    for path in DOCS:
        for block in of(path, "settings"):
            for command in block.commands:
                m = re.fullmatch(r"export (\w+)=(\S+)", command.shell)
                assert m, f"{path.name}:{block.line}: not an export: {command.shell}"
                out[m.group(1)] = m.group(2)
    return out


def _all() -> list[Block]:
    return [b for path in DOCS for b in blocks(path)]


def _ids(items: list[Any]) -> list[str]:
    return [f"{b.path.name}:{b.line}" for b in items]


OFFLINE = [b for b in _all() if b.need == "offline"]


def test_every_console_block_says_what_it_needs() -> None:
    for path in DOCS:
        found = blocks(path)
        unmarked = [b.line for b in found if b.need not in NEEDS]
        assert not unmarked, f"{path.name}: console blocks without a marker at lines {unmarked}"
        opened = {b.line - 1 for b in found}
        stray = [n for n, _ in markers(path) if n not in opened]
        assert not stray, f"{path.name}: markers opening no console block at lines {stray}"
        assert all(b.commands for b in found), path
    assert of(README, "offline")
    assert of(README, "settings")
    assert of(README, "images")
    assert of(README, "cluster")


def test_the_settings_are_what_the_docs_and_tests_say() -> None:
    assert _settings() == SETTINGS


@pytest.mark.parametrize("block", OFFLINE, ids=_ids(OFFLINE))
def test_an_offline_block_runs_as_written(block: Block) -> None:
    env = _env()
    for command in block.commands:
        done = _run(command.shell, env)
        printed = done.stdout + done.stderr
        assert done.returncode == 0, f"{command.shell}\n{printed[-3000:]}"
        shown = " ".join(re.sub(r"\([^)]*\)", "", line) for line in command.says)
        missing = _numbers(shown) - _numbers(printed)
        assert not missing, f"{command.shell}: shows {sorted(missing)}, printed:\n{printed}"


def test_the_images_blocks_build_and_push_both_images() -> None:
    """``make images`` runs with ``DRY_RUN=1`` (it prints what it would run); a builder's
    own commands (``docker buildx ...``) cannot run here and are only checked to be one."""
    env = _env({**_settings(), "DRY_RUN": "1", "BUILDER": ""})
    registry = SETTINGS["REGISTRY"]
    made = 0
    for block in [b for b in _all() if b.need == "images"]:
        for command in block.commands:
            if not command.shell.startswith("make images"):
                assert command.shell.split()[0] in ("docker", "podman", "buildah"), command
                continue
            made += 1
            done = _run(command.shell, env)
            assert done.returncode == 0, done.stderr + done.stdout
            lines = done.stdout.splitlines()
            assert f"docker build -t {registry}/pdscaler:0.1.0 ." in lines, lines
            assert f"docker build -t {registry}/vllm-router:0.1.17 deploy/router" in lines
            if "PUSH=1" in command.shell:
                assert f"docker push {registry}/pdscaler:0.1.0" in lines, lines
                assert f"docker push {registry}/vllm-router:0.1.17" in lines, lines
            assert set(command.says) <= set(lines), (command.says, lines)
    assert made >= 2


def _cluster_commands(path: Path) -> list[Command]:
    return [c for b in of(path, "cluster") for c in b.commands]


def test_cluster_blocks_use_only_the_settings() -> None:
    for path in DOCS:
        for command in _cluster_commands(path):
            used = set(re.findall(r"\$(\w+)|\$\{(\w+)\}", command.shell))
            names = {a or b for a, b in used}
            assert names <= set(SETTINGS), f"{path.name}: {command.shell} uses {names}"


def _template(command: Command, env: dict[str, str], *more: str) -> list[dict[str, Any]]:
    """``helm install``/``upgrade`` of ``command`` rendered offline with ``helm template``."""
    shell = re.sub(r"^helm (install|upgrade)\b", "helm template", command.shell)
    shell = shell.replace("--create-namespace", "").replace("--reuse-values", "")
    shell = shell.replace("--wait", "")
    done = _run(shell + " " + " ".join(shlex.quote(m) for m in more), env)
    assert done.returncode == 0, f"{shell}\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_every_helm_install_of_the_docs_renders() -> None:
    env = _env(SETTINGS)
    seen = 0
    for path in DOCS:
        for command in _cluster_commands(path):
            if re.match(r"helm (install|upgrade)\b", command.shell):
                docs = _template(command, env)
                assert any(d["kind"] == "Deployment" for d in docs), command.shell
                seen += 1
    assert seen >= 2


def test_the_quick_start_installs_what_it_says() -> None:
    env = _env(SETTINGS)
    commands = _cluster_commands(README)
    shells = [c.shell for c in commands]
    assert shells[0] == "kubectl create namespace serving"  # before the RoleBinding in it
    (install,) = [c for c in commands if c.shell.startswith("helm install")]
    docs = _template(install, env, "--api-versions", "monitoring.coreos.com/v1/PodMonitor")
    binds = [d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"]
    assert "serving" in binds, binds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{SETTINGS['REGISTRY']}/pdscaler:0.1.0"
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    assert env_vars["PDSCALER_PROMETHEUS_ALLOWED_URLS"] == SETTINGS["PROMETHEUS_URL"]
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["serving"]}

    (apply,) = [c for c in commands if "kubectl apply -f -" in c.shell]
    done = _run(apply.shell.replace("kubectl apply -f -", "cat"), env)
    assert done.returncode == 0, done.stderr
    pdd = yaml.safe_load(done.stdout)
    assert pdd["kind"] == "PDDeployment"
    assert pdd["metadata"]["namespace"] == "serving"
    assert pdd["spec"]["router"]["image"] == f"{SETTINGS['REGISTRY']}/vllm-router:0.1.17"
    assert pdd["spec"]["metrics"]["prometheus"]["url"] == SETTINGS["PROMETHEUS_URL"]
    assert any("wait pdd/chat --for=condition=Ready" in s for s in shells), shells
