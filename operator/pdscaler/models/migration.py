"""Moving state (docs/models.md §5): live catch-up copy of a decode worker's KV, and
reconfiguration time. Calculators for `pdscaler plan migrate` / `plan reconfigure`.

Owns: t_catch_up = S_0 / (copy_bw - growth) and the state added meanwhile (or never),
and t_reconfigure = bytes / link_bw + software_prep. Purely computational; must not
perform or schedule a migration. Bytes, bytes/s and seconds (1 GB = 1e9 bytes;
KV bytes per token are usually given in KiB = 1024 bytes).

Golden setup: 32 requests x 8,704 tokens x 144 KiB/token = 41,070,624,768 B = 41.1 GB
of KV; decode at 1,166 tokens/s x 144 KiB = 171,933,696 B/s = 0.172 GB/s of growth;
a 25 GB/s link -> catch-up 41.07 / (25 - 0.172) = 1.654 s, adding 0.284 GB meanwhile.

Reconfiguration floor: moving 66 GB over 25 GB/s takes 2.64 s + 9 s preparation =
11.64 s; 4x the bandwidth (100 GB/s) gives 0.66 + 9 = 9.66 s, only 17% shorter.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdscaler.models._checks import non_negative, positive

#: Typical software preparation of a reconfiguration (communicator groups, graph
#: capture, re-attaching traffic), seconds.
SOFTWARE_PREP_SECONDS = 9.0
KIB = 1024
GB = 1e9


@dataclass(frozen=True)
class CatchUp:
    """``seconds`` until the copy catches up with the growing state, and
    ``added_bytes`` the state grown meanwhile; both ``None`` = never
    (copy bandwidth <= growth rate). A final hand-over still follows."""

    seconds: float | None
    added_bytes: float | None


def kv_bytes(requests: float, tokens_per_request: float, bytes_per_token: float) -> float:
    """KV state of ``requests`` of ``tokens_per_request`` context each:
    32 x 8704 x 144 KiB = 41,070,624,768 bytes."""
    requests = non_negative("requests", requests)
    tokens_per_request = non_negative("tokens_per_request", tokens_per_request)
    bytes_per_token = non_negative("bytes_per_token", bytes_per_token)
    return requests * tokens_per_request * bytes_per_token


def catch_up(
    state_bytes: float, growth_bytes_per_s: float, bandwidth_bytes_per_s: float
) -> CatchUp:
    """Time for a live copy of ``state_bytes`` that keeps growing to catch up:
    ``S_0 / (bw - growth)``, and ``growth * t`` added meanwhile; never when
    bw <= growth. 41.07 GB, 0.172 GB/s, 25 GB/s -> 1.654 s, 0.284 GB."""
    state_bytes = non_negative("state_bytes", state_bytes)
    growth_bytes_per_s = non_negative("growth_bytes_per_s", growth_bytes_per_s)
    bandwidth_bytes_per_s = positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    margin = bandwidth_bytes_per_s - growth_bytes_per_s
    if margin <= 0:
        return CatchUp(seconds=None, added_bytes=None)
    seconds = state_bytes / margin
    return CatchUp(seconds=seconds, added_bytes=growth_bytes_per_s * seconds)


def reconfigure_time(
    bytes_to_move: float, bandwidth: float, software_prep: float = SOFTWARE_PREP_SECONDS
) -> float:
    """``bytes / bandwidth + software_prep`` seconds: 66 GB at 25 GB/s + 9 s = 11.64 s."""
    bytes_to_move = non_negative("bytes_to_move", bytes_to_move)
    bandwidth = positive("bandwidth", bandwidth)
    software_prep = non_negative("software_prep", software_prep)
    return bytes_to_move / bandwidth + software_prep


def bandwidth_gain(
    bytes_to_move: float,
    bandwidth: float,
    factor: float,
    software_prep: float = SOFTWARE_PREP_SECONDS,
) -> float:
    """Fraction by which ``factor`` x the bandwidth shortens the reconfiguration:
    66 GB, 25 GB/s, 4x, 9 s prep -> 1 - 9.66/11.64 = 0.170 (only 17%: prep is the floor).
    """
    factor = positive("factor", factor)
    before = reconfigure_time(bytes_to_move, bandwidth, software_prep)
    after = reconfigure_time(bytes_to_move, bandwidth * factor, software_prep)
    return 0.0 if before == 0 else 1.0 - after / before
