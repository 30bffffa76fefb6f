"""What the presets' readings mean, where it is shown: the MetricsAvailable condition
says what R counts (completions when no router answered; arrivals in
test_rate_source.py), and every preset (and ``custom``) has that sentence. The PromQL itself is in
test_metricsql.py; that it parses on a real Prometheus in tests/lab/test_presets_parse.py.
"""

from __future__ import annotations

from typing import get_args

from pdscaler import status as st
from pdscaler.presets import PRESETS, RATE_SOURCES, rate_source
from pdscaler.spec import Preset
from support.status_inputs import inp


def test_every_preset_says_what_r_counts() -> None:
    assert set(RATE_SOURCES) == set(get_args(Preset)) == {*PRESETS, "custom"}
    assert rate_source("vllm") == "completed requests/s (vllm:request_success_total, prefill pool)"


def test_the_condition_names_r_s_source() -> None:
    (c,) = [c for c in st.build_status(inp()).conditions or [] if c.type == "MetricsAvailable"]
    assert c.status == "True"
    assert c.message == (
        "load shape known; R = completed requests/s (vllm:request_success_total, prefill pool)"
    )
