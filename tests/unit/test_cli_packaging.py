"""Packaging and the basics of the command line: ``pdscaler --version`` is the
package's version, boolean flags render as flags in every help page, ``pdscaler run``
never imports the simulator's numpy/matplotlib (the ``pdscaler[sim]`` extra, left out
of the operator image), ``simulate`` without that extra says how to install it, and
``explain`` takes ``--kubeconfig``/``--context`` and defaults the namespace the way
kubectl does."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pdscaler.cli import SIM_EXTRA_HINT, build_app, package_version
from pdscaler.cli.explain import default_namespace

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def invoke(*args: str) -> Any:
    return CliRunner().invoke(build_app(), list(args), terminal_width=200)


def test_version_is_the_package_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"pdscaler {metadata.version('pdscaler')}"
    assert package_version() == PYPROJECT["project"]["version"]


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["explain"], ["simulate"], ["plan"], ["plan", "ratio"], ["plan", "drain"]],
)
def test_boolean_flags_render_as_flags(command: list[str]) -> None:
    """``--json``, ``--help``, ``--all-namespaces`` show no ``<bool>`` value."""
    out = invoke(*command, "--help").output
    assert "--help" in out
    assert "<bool>" not in out, out


def _modules_after(code: str, *, block_sim: bool = False) -> str:
    prefix = "import sys\n"
    if block_sim:  # as in an environment without the extra
        prefix += "sys.modules['numpy'] = None\nsys.modules['matplotlib'] = None\n"
    done = subprocess.run(
        [sys.executable, "-c", prefix + code], capture_output=True, text=True, timeout=120
    )
    return done.stdout + done.stderr + f"\nrc={done.returncode}"


def test_run_imports_no_simulator_dependencies() -> None:
    code = (
        "from pdscaler.cli import main\n"
        "import pdscaler.cli.run, pdscaler.handlers, pdscaler.reconcile\n"
        "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('SIM', sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'matplotlib'}))\n"
    )
    assert "SIM []" in _modules_after(code)


def test_the_operator_runs_without_the_extra_and_simulate_says_how_to_get_it() -> None:
    out = _modules_after("from pdscaler.cli import main\nmain(['run', '--help'])\n", block_sim=True)
    assert "rc=0" in out
    assert "--leader-elect" in out
    out = _modules_after(
        "from pdscaler.cli import main\nmain(['simulate', '--trace', 'x.csv'])\n",
        block_sim=True,
    )
    assert "rc=1" in out
    assert SIM_EXTRA_HINT in out
    assert "Traceback" not in out
    out = _modules_after("from pdscaler.cli import main\nmain(['--help'])\n", block_sim=True)
    assert "rc=0" in out
    assert "simulate" in out  # listed, with the hint as its help


def test_simulator_dependencies_are_an_extra() -> None:
    deps = " ".join(PYPROJECT["project"]["dependencies"])
    assert "numpy" not in deps
    assert "matplotlib" not in deps
    sim = " ".join(PYPROJECT["project"]["optional-dependencies"]["sim"])
    assert "numpy" in sim
    assert "matplotlib" in sim
    assert "pdscaler[sim]" in PYPROJECT["project"]["optional-dependencies"]["dev"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "[sim]" not in dockerfile.split("FROM")[-1]  # the runtime stage


def _kubeconfig(path: Path, current: str, contexts: dict[str, str | None]) -> Path:
    entries = []
    for name, namespace in contexts.items():
        context: dict[str, str] = {"cluster": "c", "user": "u"}
        if namespace:
            context["namespace"] = namespace
        entries.append({"name": name, "context": context})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": entries,
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_namespace_defaults_like_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _kubeconfig(tmp_path / "config", "lab", {"lab": "serving", "other": None})
    assert default_namespace(str(cfg), None) == "serving"  # the current context's
    assert default_namespace(str(cfg), "other") == "default"  # a context without one
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{cfg}")
    assert default_namespace(None, None) == "serving"  # the files of $KUBECONFIG
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    pod_ns = tmp_path / "namespace"
    pod_ns.write_text("tenant-a\n")
    assert default_namespace(None, None, pod_ns) == "tenant-a"  # in a pod, no kubeconfig


def test_explain_options(tmp_path: Path) -> None:
    out = invoke("explain", "--help").output
    assert "--kubeconfig" in out
    assert "--context" in out
    result = invoke("explain", "chat", "--kubeconfig", str(tmp_path / "nope"))
    assert result.exit_code == 2
    cfg = _kubeconfig(tmp_path / "config", "lab", {"lab": "serving"})
    result = invoke("explain", "chat", "--kubeconfig", str(cfg), "--context", "nosuch")
    assert result.exit_code == 1  # one line, no traceback
    assert "Traceback" not in result.output
