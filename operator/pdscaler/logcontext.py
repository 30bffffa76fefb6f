"""Which PDDeployment and which tick a log line belongs to.

Owns: the tick context (``object_tick``: a context variable holding the namespace, the
name and the tick number while one PDDeployment's tick runs), the logging filter that
stamps it on every record logged inside (``TickFields``, on the operator's log
handler), and the structured fields a JSON log line gets from it (``json_fields``).
Ticks are numbered per process: every tick of every PDDeployment takes the next
number, so ``tick`` picks out one tick's lines and ``namespace``/``name`` one object's.
Records kopf logs about an object (its ``k8s_ref``) get ``namespace`` and ``name`` too.
Must not: format or emit anything itself (the run command's JSON formatter does).

Example: inside ``with object_tick("serving", "chat")`` (the 17th tick of the process),
``log.info("serving/chat: scale Deployment/chat-v1-abcde-decode 4->6")`` is written by
``pdscaler run --log-format json`` as ``{"message": "serving/chat: scale ...",
"namespace": "serving", "name": "chat", "tick": 17, "severity": "info", ...}``.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: The record attribute ``TickFields`` stamps (kept out of JSON lines as a raw field).
RECORD_ATTR = "pdscaler_tick"


@dataclass(frozen=True)
class TickContext:
    namespace: str
    name: str
    tick: int


_current: contextvars.ContextVar[TickContext | None] = contextvars.ContextVar(
    "pdscaler_tick", default=None
)
_numbers = itertools.count(1)
_numbers_lock = threading.Lock()


def current() -> TickContext | None:
    """The tick running in this thread (or task), if any."""
    return _current.get()


@contextmanager
def object_tick(namespace: str, name: str) -> Iterator[TickContext]:
    """Run the body as the next tick of ``namespace/name``: every record logged inside
    (in this thread) carries its namespace, name and number."""
    with _numbers_lock:
        number = next(_numbers)
    ctx = TickContext(namespace, name, number)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


class TickFields(logging.Filter):
    """Stamps the running tick (or None) on each record as ``record.pdscaler_tick``.
    On a handler it sees every record the handler emits, from any logger; it runs in
    the thread that logged, where the tick's context is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, RECORD_ATTR):
            setattr(record, RECORD_ATTR, _current.get())
        return True


def json_fields(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields of ``record``: ``namespace``, ``name`` and ``tick`` of the
    tick it was logged in; else ``namespace`` and ``name`` of the object kopf logged it
    about; else none."""
    ctx = getattr(record, RECORD_ATTR, None)
    if isinstance(ctx, TickContext):
        return {"namespace": ctx.namespace, "name": ctx.name, "tick": ctx.tick}
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, dict) and ref.get("name"):
        return {"namespace": ref.get("namespace"), "name": ref.get("name")}
    return {}
