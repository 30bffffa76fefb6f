"""The operator image holds the product only, not the lab (docs/install.md, "Building the
image"): the Dockerfile's build stage copies ``operator/pdscaler`` (not ``operator/``,
which holds ``pdlab`` too) and drops the lab's console script and package data from the
copy of pyproject.toml the wheel is built from. No container engine runs here, so the
test replays those two steps in a temporary directory, as the build stage would:

* the Dockerfile's build-stage ``COPY`` sources and its ``sed`` on pyproject.toml, run;
* setuptools' package discovery there (``[tool.setuptools.packages.find]``) finds
  ``pdscaler`` and its subpackages, no ``pdlab``; the console scripts are ``pdscaler`` only;
* every module of that copy of ``pdscaler`` imports with ``pdlab`` unreachable
  (``pdscaler --help`` included), so the image's entrypoint needs nothing it left out.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import setuptools  # type: ignore[import-untyped,unused-ignore]

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def _build_stage() -> str:
    text = DOCKERFILE.read_text()
    return text.split(" AS build", 1)[1].split("\nFROM ", 1)[0]


def _replay(dst: Path) -> Path:
    """The build stage's COPY steps and its sed, replayed into ``dst``; the WORKDIR."""
    stage = _build_stage()
    work = dst / "src"
    work.mkdir()
    copies = re.findall(r"^COPY (?!--from)(.+)$", stage, flags=re.M)
    for line in copies:
        *sources, target = line.split()
        for source in sources:
            src = REPO / source
            out = work / target
            if src.is_dir():
                shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                out = out / src.name if target.endswith("/") else out
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, out)
    joined = stage.replace("\\\n", " ")
    (sed,) = re.findall(r"(sed -i .*? pyproject\.toml)", joined)
    subprocess.run(["bash", "-c", sed], cwd=work, check=True)
    return work


def test_the_build_stage_copies_the_product_and_not_the_lab(tmp_path: Path) -> None:
    work = _replay(tmp_path)
    assert (work / "operator" / "pdscaler" / "cli").is_dir()
    assert not (work / "operator" / "pdlab").exists()
    project = tomllib.loads((work / "pyproject.toml").read_text())
    scripts = project["project"]["scripts"]
    assert scripts["pdscaler"] == "pdscaler.cli:main"
    assert "pdlab" not in scripts, scripts
    assert not [v for v in scripts.values() if v.startswith("pdlab")], scripts
    assert "pdlab" not in (work / "pyproject.toml").read_text().split("[tool.pytest", 1)[0]
    where = project["tool"]["setuptools"]["packages"]["find"]["where"]
    found = setuptools.find_packages(where=str(work / where[0]))
    assert "pdscaler" in found, found
    assert "pdscaler.kube" in found, found
    assert not [p for p in found if p.split(".")[0] != "pdscaler"], found
    # the repository's own pyproject still installs the lab for developers
    ours = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert ours["project"]["scripts"]["pdlab"] == "pdlab.__main__:main"


def test_every_module_of_the_image_imports_without_the_lab(tmp_path: Path) -> None:
    work = _replay(tmp_path)
    code = (
        "import importlib, importlib.util, pkgutil, sys\n"
        f"sys.path = [p for p in sys.path if p not in ({str(REPO)!r}, "
        f"{str(REPO / 'operator')!r}, '')]\n"
        f"sys.path.insert(0, {str(work / 'operator')!r})\n"
        "assert importlib.util.find_spec('pdlab') is None\n"
        "import pdscaler\n"
        f"assert pdscaler.__file__.startswith({str(work)!r}), pdscaler.__file__\n"
        "names = [m.name for m in pkgutil.walk_packages(pdscaler.__path__, 'pdscaler.')\n"
        "         if not m.name.endswith('__main__')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "from pdscaler.cli import main\n"
        "sys.argv = ['pdscaler', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    assert done.code in (0, None), done.code\n"
        "print('imported', len(names), [m for m in sys.modules if m.startswith('pdlab')])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    count = int(last.split()[1])
    assert count > 50, last
    assert last.endswith("[]"), last
