"""Moving state (docs/models.md §5): catch-up copy and reconfiguration, golden numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdscaler.models import bandwidth_gain, catch_up, kv_bytes, reconfigure_time

KIB, GB = 1024, 1e9
STATE = 32 * 8704 * 144 * KIB  # 41,070,624,768 bytes
GROWTH = 1166 * 144 * KIB  # 171,933,696 bytes/s


def test_golden_setup() -> None:
    """32 requests x 8,704 tokens x 144 KiB = 41.1 GB; 1,166 tok/s x 144 KiB = 0.172 GB/s."""
    assert kv_bytes(32, 8704, 144 * KIB) == STATE == 41_070_624_768
    assert round(STATE / GB, 1) == 41.1
    assert round(GROWTH / GB, 3) == 0.172


def test_golden_catch_up_at_25_gbps() -> None:
    """41.07 / (25 - 0.172) = 1.654 s; 0.172 GB/s x 1.654 s = 0.284 GB added."""
    result = catch_up(STATE, GROWTH, 25 * GB)
    assert result.seconds == pytest.approx(1.654, abs=1e-3)
    assert result.added_bytes is not None
    assert result.added_bytes / GB == pytest.approx(0.284, abs=1e-3)


def test_catch_up_never_when_the_link_is_not_faster_than_growth() -> None:
    assert catch_up(STATE, GROWTH, GROWTH).seconds is None
    assert catch_up(STATE, GROWTH, 0.1 * GB).added_bytes is None


def test_golden_reconfigure_prep_is_the_floor() -> None:
    """66 GB over 25 GB/s + 9 s = 11.64 s; 4x bandwidth: 0.66 + 9 = 9.66 s, only 17%."""
    assert reconfigure_time(66 * GB, 25 * GB) == pytest.approx(11.64)
    assert reconfigure_time(66 * GB, 100 * GB, software_prep=9.0) == pytest.approx(9.66)
    assert bandwidth_gain(66 * GB, 25 * GB, 4.0) == pytest.approx(0.17, abs=0.005)


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        catch_up(STATE, GROWTH, 0.0)
    with pytest.raises(ValueError, match="bytes_to_move"):
        reconfigure_time(-1.0, GB)


sizes = st.floats(0.0, 1e12)
rates = st.floats(0.0, 1e11)


@given(sizes, rates, st.floats(1.0, 1e11))
def test_catch_up_is_never_exactly_when_bandwidth_le_growth(s: float, g: float, bw: float) -> None:
    result = catch_up(s, g, bw)
    assert (result.seconds is None) == (bw <= g)
    if result.seconds is not None and result.added_bytes is not None:
        # at catch-up the copy has moved the initial state plus what grew meanwhile
        assert bw * result.seconds == pytest.approx(s + result.added_bytes, rel=1e-9, abs=1e-3)


@given(sizes, st.floats(1.0, 1e11), st.floats(1.0, 100.0), st.floats(0.0, 60.0))
def test_more_bandwidth_never_slower_and_never_below_prep(
    b: float, bw: float, k: float, prep: float
) -> None:
    slow = reconfigure_time(b, bw, prep)
    fast = reconfigure_time(b, bw * k, prep)
    assert prep <= fast <= slow
    assert 0.0 <= bandwidth_gain(b, bw, k, prep) < 1.0
