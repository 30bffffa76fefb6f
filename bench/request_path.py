"""The request-path rollout's measured figures (``bench/results/request_path.json``) and
the README sentence quoting them.

Owns: the document the lab test ``tests/lab/test_request_path_operator.py`` (the rollout
v1 -> v2 under aiperf) writes when ``PDSCALER_RESULTS_OUT`` names a directory (unset:
nothing is written, so an ordinary test run leaves the tree clean), and ``sentence``,
the README's words for it. Must not: hold a figure of its own (no file: "not
measured").

    PDSCALER_RESULTS_OUT=bench/results pytest tests/lab/test_request_path_operator.py
    # -> request_path.json: {"requests": 300, "errors": 0, "mixed_pairs": 0,
    #    "tolerance": 0.15, "both_serving_s": 4.3, "requests_both_serving": 17,
    #    "cells": [{"cell": "old", "traffic": 0.35, "capacity": 0.31}, ...],
    #    "measured_at": {...}}
    # sentence -> "300 requests, 0 failed, 0 cross-version or cross-config pairs, ...
    #    (measured 35/65 against 31/69 ...)"
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench import provenance

#: The directory a lab test writes its results file to (unset: none is written).
OUT_ENV = "PDSCALER_RESULTS_OUT"
NAME = "request_path.json"


def out_dir() -> Path | None:
    value = os.environ.get(OUT_ENV, "")
    return Path(value) if value else None


def write(doc: dict[str, Any], directory: Path | None = None) -> Path | None:
    """``doc`` with where it was measured, as ``<directory>/request_path.json``
    (``directory`` defaults to ``$PDSCALER_RESULTS_OUT``; None when unset)."""
    target = directory or out_dir()
    if target is None:
        return None
    target.mkdir(parents=True, exist_ok=True)
    path = target / NAME
    full = {**doc, provenance.KEY: provenance.measured_at()}
    path.write_text(json.dumps(full, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _shares(cells: list[dict[str, Any]], key: str) -> str:
    """``35/65`` (old cell first), in whole percent."""
    return "/".join(f"{100 * c[key]:.0f}" for c in cells)


def sentence(doc: dict[str, Any] | None) -> str:
    """The README's words for the rollout under aiperf, every figure from ``doc``."""
    if doc is None:
        return (
            "under aiperf's load: not measured (no bench/results/request_path.json; "
            f"run the test with {OUT_ENV}=bench/results)."
        )
    stamp = doc.get(provenance.KEY) or {}
    return (
        f"under aiperf's load: {doc['requests']} requests, {doc['errors']} failed, "
        f"{doc['mixed_pairs']} cross-version or cross-config pairs, each cell's share of "
        f"requests within {100 * doc['tolerance']:.0f} points of its share of Ready "
        f"prefill while both served (measured {_shares(doc['cells'], 'traffic')} "
        f"against {_shares(doc['cells'], 'capacity')}, old cell first, over "
        f"{doc['both_serving_s']:.1f} s and {doc['requests_both_serving']} requests, at "
        f"commit {stamp.get('commit', 'unknown')}, {stamp.get('date', 'date unknown')}: "
        "[bench/results/request_path.json](bench/results/request_path.json))."
    )
