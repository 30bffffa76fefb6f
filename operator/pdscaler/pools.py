"""The two pools of a PDDeployment: ``Role.PREFILL`` and ``Role.DECODE``.

Owns: ``Role``, the word both the CRD's schema (``spec``: ``PDDeploymentSpec.pool(role)``,
``SLOSpec.latency_seconds(role)``) and the tick's vocabulary (``types``, which
re-exports it: callers write ``from pdscaler.types import Role``) are built on. It sits
on the floor under both so that ``types`` may import ``spec`` (a ``TickInput`` carries
the spec) without ``spec`` importing ``types`` back. Must not: import anything of the
operator.

    Role("decode").other    # Role.PREFILL
    f"{Role.DECODE}"        # 'decode' (a StrEnum: the CRD's field names)
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"

    @property
    def other(self) -> Role:
        """The other pool: ``Role.PREFILL.other`` is ``Role.DECODE``."""
        return Role.DECODE if self is Role.PREFILL else Role.PREFILL
