"""The record of the operator's writes (part of ``pdscaler.kube``).

Owns: ``WriteAudit``, which every write through ``Kube._write`` is added to before it
is sent (``WriteRecord``: ``apply Deployment serving/chat-v1-abcde-decode``): the lab
tests count writes there to prove a converged tick makes none. Lease writes (the
elector's) are not in it. Must not: send anything.

    before = kube.audit.count
    ...                                         # one converged tick
    assert kube.audit.since(before) == []       # it wrote nothing
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WriteRecord:
    """One write sent to the API server: ``apply Deployment serving/chat-v1-abcde-decode``."""

    time: float
    verb: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.namespace}/{self.name}"


@dataclass
class WriteAudit:
    """Counts every write (thread-safe); keeps the last ``keep`` records."""

    count: int = 0
    keep: int = 2000
    records: deque[WriteRecord] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: WriteRecord) -> None:
        with self._lock:
            self.count += 1
            self.records.append(record)
            while len(self.records) > self.keep:
                self.records.popleft()

    def since(self, count: int) -> list[WriteRecord]:
        """The records written after the audit showed ``count`` (as far as kept)."""
        with self._lock:
            n = self.count - count
            return list(self.records)[-n:] if n > 0 else []

    def for_namespace(self, namespace: str) -> list[WriteRecord]:
        with self._lock:
            return [r for r in self.records if r.namespace == namespace]
