"""The demo's traffic as the client and the engines saw it: aiperf's per-request records
(client side, streamed to ``profile_export.jsonl`` while it runs) and the engine
simulator's request records (``GET /requests``: which prefill and decode pod of which
cell served each request).

Owns: reading both incrementally (``ClientLog.poll``, ``EngineLog.poll``), windowed
percentiles for the live view (client TTFT/ITL p95 over the last 15 s of finished
requests), the served request rate, the request-path check (every decode record's
prefill of the same cell, with the KV hand-off), one probe completion through the front
Service, and parsing the operator's status durations ("1.2s", "45ms"). Must not: start
or stop processes, or talk to Kubernetes.

    client = ClientLog(workdir / "artifacts")
    client.poll()                       # new lines of profile_export.jsonl
    client.p95("ttft_s", now, 15.0)     # -> 0.84 (seconds), None without requests
    engines = EngineLog(29400, since=12)
    engines.poll(); engines.path_check()  # {"decode_records": 410, "mixed": 0, ...}
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdlab.cluster.loadclient import MODEL_NAME

#: Live percentiles are over requests finished in the last this many seconds.
WINDOW_S = 15.0
_MS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile: q=0.95 of 1..20 -> 19; of [] -> None."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def seconds(text: Any) -> float | None:
    """A duration as the operator's status writes it: "1.25s" -> 1.25, "45ms" -> 0.045,
    "-"/None -> None; a bare number is seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    match = re.fullmatch(r"\s*([0-9.]+(?:e-?[0-9]+)?)\s*(ns|us|ms|s|sec)?\s*", str(text or ""))
    if not match:
        return None
    try:
        return float(match.group(1)) * _MS[match.group(2) or "s"]
    except ValueError:
        return None


def _metric_s(metrics: dict[str, Any], tag: str) -> float | None:
    entry = metrics.get(tag)
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)):
        return None
    return float(entry["value"]) * _MS.get(str(entry.get("unit", "ms")), 1e-3)


@dataclass(frozen=True)
class ClientRecord:
    """One request as aiperf saw it (wall seconds; latencies in seconds)."""

    start: float
    end: float
    ttft_s: float | None
    itl_s: float | None
    ok: bool


@dataclass
class ClientLog:
    """aiperf's per-request records, read as it appends them."""

    artifacts: Path
    records: list[ClientRecord] = field(default_factory=list)
    _path: Path | None = None
    _offset: int = 0

    def poll(self) -> int:
        """Read the lines added since the last poll; how many records were new."""
        if self._path is None:
            found = sorted(self.artifacts.rglob("profile_export.jsonl"))
            if not found:
                return 0
            self._path = found[0]
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return 0
        end = data.rfind(b"\n")
        if end < 0:
            return 0
        self._offset += end + 1
        added = 0
        for line in data[: end + 1].splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                doc = json.loads(line)
                meta, metrics = doc.get("metadata") or {}, doc.get("metrics") or {}
                self.records.append(
                    ClientRecord(
                        start=float(meta["request_start_ns"]) / 1e9,
                        end=float(meta.get("request_end_ns") or meta["request_start_ns"]) / 1e9,
                        ttft_s=_metric_s(metrics, "time_to_first_token"),
                        itl_s=_metric_s(metrics, "inter_token_latency"),
                        ok=not doc.get("error"),
                    )
                )
                added += 1
        return added

    def p95(self, attr: str, now: float, window: float = WINDOW_S) -> float | None:
        """p95 of ``attr`` ("ttft_s" or "itl_s") over requests finished in
        (now - window, now]."""
        values = [
            v
            for r in self.records
            if now - window < r.end <= now and r.ok and (v := getattr(r, attr)) is not None
        ]
        return quantile(values, 0.95)

    def errors(self) -> int:
        return sum(1 for r in self.records if not r.ok)


@dataclass
class EngineLog:
    """The engine simulator's request records from sequence number ``since`` on."""

    port: int
    since: int = 0
    prefill: list[dict[str, Any]] = field(default_factory=list)
    decode: list[dict[str, Any]] = field(default_factory=list)
    pairing_errors: int = 0

    def poll(self) -> int:
        """Fetch the new records; how many (0 when the simulator does not answer)."""
        try:
            url = f"http://127.0.0.1:{self.port}/requests?since={self.since}"
            with urllib.request.urlopen(url, timeout=5) as resp:
                page = json.loads(resp.read())
        except (OSError, ValueError):
            return 0
        for rec in page.get("records") or []:
            (self.prefill if rec.get("kind") == "prefill" else self.decode).append(rec)
        self.since = int(page.get("next") or self.since)
        self.pairing_errors = int(page.get("pairing_errors") or 0)
        return len(page.get("records") or [])

    def first_arrival(self) -> float | None:
        """Wall time of the earliest request seen (its arrival at a prefill pod)."""
        times = [float(r["time"]) for r in self.prefill + self.decode if "time" in r]
        return min(times) if times else None

    def served_rate(self, now: float, window: float = 10.0) -> float | None:
        """Requests whose decode finished in the last ``window`` seconds, per second."""
        done = [
            r for r in self.decode if now - window < float(r["time"]) + float(r.get("e2e_s") or 0)
        ]
        return len(done) / window if self.decode else None

    def path_check(self) -> dict[str, Any]:
        """How the requests went: decode records, per cell (revision), the pairs across
        cells or configurations, those without a KV hand-off, the failed ones."""
        cells: dict[str, int] = {}
        for r in self.decode:
            rev = str(r.get("decode_revision"))
            cells[rev] = cells.get(rev, 0) + 1
        return {
            "decode_records": len(self.decode),
            "prefill_records": len(self.prefill),
            "cells": cells,
            "mixed": sum(
                1
                for r in self.decode
                if r.get("prefill_revision") != r.get("decode_revision")
                or r.get("prefill_config") != r.get("decode_config")
            ),
            "without_kv_transfer": sum(1 for r in self.decode if not r.get("kv_transfer")),
            "failed": sum(1 for r in self.decode if not r.get("ok")),
            "pairing_errors": self.pairing_errors,
        }


def probe_completion(front: int, timeout: float = 10.0) -> bool:
    """One short streamed completion through the front Service: True if it finished."""
    body = {"model": MODEL_NAME, "prompt": "hello " * 16, "max_tokens": 2, "stream": True}
    req = urllib.request.Request(
        f"http://127.0.0.1:{front}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status == 200 and b"[DONE]" in resp.read()
    except OSError:
        return False
