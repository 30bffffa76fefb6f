"""Argument checks shared by the capacity models.

Owns: turning a bad number (negative, NaN, infinite, zero where a divisor is needed)
into a ``ValueError`` that names the argument, so the CLI can print it as a one-line
error. Must not: do I/O or clamp silently (a bad input is an error, never a guess).
Example: ``positive("prefill_tps", 0.0)`` raises ``prefill_tps must be > 0, got 0.0``,
which ``pdscaler plan ratio`` prints as ``Error: --prefill-tps must be > 0, got 0.0``.
"""

from __future__ import annotations

import math

#: Relative tolerance used when a float that is "an integer up to rounding" is rounded
#: up. 19.0000000001 is 19, not 20.
REL_EPS = 1e-9
#: Relative tolerance when a time is compared with a deadline: mu - lambda loses digits
#: when the margin is tiny next to lambda, so 60.00000001 s still meets 60 s.
TIME_REL_EPS = 1e-6


def finite(name: str, value: float) -> float:
    """``value`` when it is a finite number, else ValueError naming ``name``."""
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    """``value`` when finite and >= 0: ``non_negative("rate", -1)`` raises."""
    finite(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def positive(name: str, value: float) -> float:
    """``value`` when finite and > 0: ``positive("prefill_tps", 0)`` raises."""
    finite(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def fraction(name: str, value: float) -> float:
    """``value`` when 0 < value <= 1 (a target utilisation)."""
    finite(name, value)
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)


def ceil_replicas(value: float) -> int:
    """Round a fractional replica count UP, without bumping exact integers that picked
    up float noise: 19.05 -> 20, 17.86 -> 18, 19.0000000001 -> 19, 0.0 -> 0.

    Monotone: a larger ``value`` never gives a smaller result."""
    non_negative("replicas", value)
    return max(0, math.ceil(value * (1.0 - REL_EPS)))


def at_most(value: float, limit: float) -> bool:
    """``value <= limit`` up to the time tolerance (60.00000001 <= 60 is True)."""
    return value <= limit + TIME_REL_EPS * max(1.0, abs(limit))
