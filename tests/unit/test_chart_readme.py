"""charts/pdscaler/README.md's values table is the one charts/values_table.py generates
from values.yaml: a key added, removed or given another default in values.yaml without
regenerating the README fails here (``python charts/values_table.py`` fixes it)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "pdscaler"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("values_table", REPO / "charts/values_table.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["values_table"] = module
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_generated_from_values() -> None:
    readme = (CHART / "README.md").read_text()
    assert generator().render(readme) == readme, "run: python charts/values_table.py"


def test_every_leaf_value_has_a_row_with_its_default() -> None:
    table = generator().table()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert "| `metrics.port` | int | `8080` |" in table
    assert '| `monitoring.prometheusRule.for.notTicking` | string | `"10m"` |' in table
    for key in values:
        assert f"| `{key}" in table, key


def test_a_changed_values_file_makes_the_readme_stale(tmp_path: Path) -> None:
    chart = tmp_path / "pdscaler"
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("port: 8080", "port: 9090", 1))
    gen = generator()
    readme = (CHART / "README.md").read_text()
    assert gen.render(readme, chart) != readme
    assert "| `metrics.port` | int | `9090` |" in gen.render(readme, chart)
