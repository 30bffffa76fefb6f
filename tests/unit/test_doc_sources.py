"""The last figures of docs/ that named a commit but no results file now come from one
(issue 25): each sentence is rebuilt here from the results file it names and must appear
in the doc word for word (line breaks aside), and that file names its commit and date.

Worked example: install-size.json at bfbf319 measured 189.22 MiB / 44 packages for
``pdscaler`` and 349.73 MiB / 53 for ``pdscaler[sim]``, so docs/install.md must say
"`site-packages` is 189 MiB and 44 packages without the extra, 350 MiB and 53 packages
with it"; speed.json's pdscaler slice replay took 10.27 CPU-s pure and 2.69 compiled,
so docs/design.md says "takes 2.7 CPU-s against 10.3 pure, 3.8x less".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import install_size

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def doc(name: str) -> str:
    """The doc's text with every run of whitespace as one space."""
    return " ".join((REPO / "docs" / name).read_text().split())


def results(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def test_every_results_file_here_names_its_commit_and_date() -> None:
    for name in ("install-size.json", "speed.json", "quality.json", "overhead.json"):
        stamp = results(name)["measured_at"]
        assert re.fullmatch(r"[0-9a-f]{7}(\+dirty)?", stamp["commit"]), (name, stamp)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", stamp["date"]), (name, stamp)


def install_sentence() -> str:
    rows = {r["install"]: r for r in results("install-size.json")["installs"]}
    base, sim = rows["pdscaler"], rows["pdscaler[sim]"]
    return (
        f"`site-packages` is {base['mib']:.0f} MiB and {base['packages']} packages without "
        f"the extra, {sim['mib']:.0f} MiB and {sim['packages']} packages with it"
    )


def speed_sentence() -> str:
    rows = [r for r in results("speed.json")["rows"] if r["policy"] == "pdscaler"]
    slice_ = [r for r in rows if not r["whole_day"] and not r["profiled"]]
    pure = next(r for r in slice_ if r["engine"] == "pure Python")
    compiled = next(r for r in slice_ if r["engine"].startswith("compiled"))
    assert pure["requests"] == compiled["requests"]
    return (
        f"pdscaler's replay of the speed bench's slice ({pure['requests']:,} requests: the "
        f"busiest hour of the ServeGen week at x{pure['scale']}) takes "
        f"{compiled['cpu_s']:.1f} CPU-s against {pure['cpu_s']:.1f} pure, "
        f"{pure['cpu_s'] / compiled['cpu_s']:.1f}x less"
    )


def flips_sentence() -> str:
    cases = results("quality.json")["cases"]

    def q(case: str, row: str, key: str) -> float:
        return float(cases[case]["aggregate"]["policies"][row][key]["mean"])

    def pair(case: str, key: str, scale: float, unit: str) -> tuple[str, str]:
        before, after = (scale * q(case, r, key) for r in ("pdscaler", "pdscaler + role flips"))
        return f"{before:.2f}{unit}", f"{after:.2f}{unit}"

    s90, g90 = (
        pair("code-4x-90s", "slo_attainment", 100, "%"),
        pair("code-4x-90s", "gpu_hours", 1, ""),
    )
    s30, g30 = (
        pair("code-4x-30s", "slo_attainment", 100, "%"),
        pair("code-4x-30s", "gpu_hours", 1, ""),
    )
    return (
        f"flips take pdscaler on the code trace at 4x from {s90[0]} to {s90[1]} of requests "
        f"in SLO for {g90[0]} -> {g90[1]} GPU-h at start-up 90 s, and from {s30[0]} to "
        f"{s30[1]} for {g30[0]} -> {g30[1]} at 30 s (bench/results/quality.json, the "
        "`pdscaler + role flips` rows against `pdscaler`)"
    )


@pytest.mark.parametrize(
    ("name", "sentence"),
    [
        ("install.md", install_sentence),
        ("design.md", speed_sentence),
        ("models.md", flips_sentence),
    ],
    ids=["install-size", "compiled-speed", "flips-third"],
)
def test_the_doc_quotes_its_results_file(name: str, sentence: Any) -> None:
    assert sentence() in doc(name)


def bound(text: str, pattern: str) -> float:
    found = re.search(pattern, text)
    assert found, pattern
    return float(found.group(1))


def test_the_lab_doc_quotes_the_bounds_its_test_holds() -> None:
    """docs/lab.md quotes no hand timing, only the warm-up test's own bounds."""
    test = (REPO / "tests" / "lab" / "test_lab_updown.py").read_text()
    limit, again = (
        bound(test, p)
        for p in (r"WARM_UP_LIMIT_S = ([\d.]+)", r"again\.stdout\)\[0\]\) < ([\d.]+)")
    )
    text = doc("lab.md")
    assert (
        f"a warm `pdlab up` on a fresh, private lab dir under {limit:g} s and a second `up` "
        f"on the running lab under {again:g} s"
    ) in text
    assert "Timed by hand" not in text


@pytest.mark.parametrize("name", ["README.md", "install.md", "design.md", "models.md", "lab.md"])
def test_no_figure_says_it_has_no_results_file(name: str) -> None:
    text = " ".join((REPO / name).read_text().split()) if name == "README.md" else doc(name)
    for phrase in ("not in a results file", "not kept in a results file", "not a results file"):
        assert phrase not in text, (name, phrase)


def test_summarize_counts_files_and_dist_infos(tmp_path: Path) -> None:
    """The module docstring's worked example: 1 + 1 + 0.5 MiB in two distributions."""
    for dist in ("a-1.dist-info", "b-2.dist-info"):
        (tmp_path / dist).mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"\0" * 2**20)
    (tmp_path / "b.bin").write_bytes(b"\0" * 2**20)
    (tmp_path / "b-2.dist-info" / "RECORD").write_bytes(b"\0" * 2**19)
    assert install_size.summarize(tmp_path) == {"mib": 2.5, "packages": 2, "names": ["a", "b"]}
