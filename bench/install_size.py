"""What ``pip install pdscaler`` puts in a fresh virtualenv, with and without the
simulator extra (docs/install.md, "Building the image"): ``site-packages``' size and
how many distributions it holds.

Owns: the measurement (a clone of HEAD, one fresh virtualenv per install, ``pip
install <clone>`` and ``pip install '<clone>[sim]'``), ``summarize`` (the size and the
distributions of one ``site-packages``) and ``bench/results/install-size.json`` with
its ``measured_at`` (the clone's commit, so another helper's uncommitted files in the
working tree are not measured). Must not: touch the project's own virtualenv.

Size is the apparent size (the sum of the files' byte counts, symlinks not followed) in
MiB of 2^20 bytes; a distribution is a ``*.dist-info`` directory, pip and pdscaler
included. Worked: a ``site-packages`` holding ``a-1.dist-info`` and ``b-2.dist-info``
and 3 files of 1 MiB, 1 MiB and 512 KiB is ``{"mib": 2.5, "packages": 2, "names":
["a", "b"]}``.

    python -m bench.install_size            # ~2-4 minutes an install on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import provenance

RESULTS = provenance.REPO / "bench" / "results"
OUT = RESULTS / "install-size.json"
#: The installs measured: a label and the pip requirement's suffix on the clone's path.
INSTALLS: tuple[tuple[str, str], ...] = (("pdscaler", ""), ("pdscaler[sim]", "[sim]"))
MIB = 2**20


def summarize(site: Path) -> dict[str, Any]:
    """``site``'s apparent size in MiB (2 decimals), its ``*.dist-info`` count and their
    distribution names, sorted (module docstring's worked example)."""
    total = 0
    for root, _dirs, files in os.walk(site):
        for name in files:
            total += os.lstat(Path(root) / name).st_size
    names = sorted(p.name.split("-")[0] for p in site.glob("*.dist-info"))
    return {"mib": round(total / MIB, 2), "packages": len(names), "names": names}


def _run(args: Sequence[str], cwd: Path | None = None) -> str:
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench install_size: {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


def _site(venv: Path) -> Path:
    py = venv / "bin" / "python"
    return Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))


def measure(python: str, source: Path, work: Path, label: str, suffix: str) -> dict[str, Any]:
    """A fresh virtualenv under ``work`` made by ``python``, ``pip install
    <source><suffix>`` into it, and ``summarize`` of its ``site-packages``."""
    venv = work / ("venv-" + (suffix.strip("[]") or "base"))
    _run([python, "-m", "venv", str(venv)])
    start = time.monotonic()
    _run([str(venv / "bin" / "pip"), "install", "--quiet", f"{source}{suffix}"])
    seconds = time.monotonic() - start
    return {"install": label, "pip_seconds": round(seconds, 1), **summarize(_site(venv))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.install_size", description=__doc__.split("\n")[0]
    )
    p.add_argument("--python", default="python3.11", help="the interpreter making the virtualenvs")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pdscaler-install-size-") as tmp:
        work = Path(tmp)
        source = work / "src"
        _run(["git", "clone", "--quiet", str(provenance.REPO), str(source)])
        stamp = provenance.measured_at(source)
        version = _run([args.python, "-c", "import platform; print(platform.python_version())"])
        rows = []
        for label, suffix in INSTALLS:
            rows.append(measure(args.python, source, work, label, suffix))
            r = rows[-1]
            print(f"bench install_size: {label}: {r['mib']} MiB, {r['packages']} packages")
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m bench.install_size", *given])
    doc = {"installs": rows, "python": version, "command": command, provenance.KEY: stamp}
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
