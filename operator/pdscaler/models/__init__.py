"""The capacity models of docs/models.md as pure, typed functions with small frozen results.

Owns: ratio (docs/models.md §2), the decode memory bound (docs/models.md §2b), drain
(docs/models.md §3), bottleneck (docs/models.md §4), budget split (docs/design.md §3.5)
and migration/reconfiguration (docs/models.md §5). Must not: do I/O, read clocks, import
kopf, kubernetes, prometheus_client or HTTP clients (import-linter enforces it). Floats
are SI units (req/s, tokens/s, seconds, bytes); ``None`` means "never" or "infeasible".
"""

from pdscaler.models._checks import ceil_replicas
from pdscaler.models.bottleneck import Bottleneck, PoolSignals, locate_bottleneck, pool_pressure
from pdscaler.models.budget import BudgetSplit, split_budget, utilization
from pdscaler.models.drain import (
    DrainResult,
    backlog,
    drain_time,
    min_service_rate,
    replicas_for_deadline,
)
from pdscaler.models.memory import (
    DecodeBound,
    MemoryResult,
    decode_bound,
    decode_memory,
    fits_one_replica,
    memory_service_rate,
    with_memory,
)
from pdscaler.models.migration import (
    CatchUp,
    bandwidth_gain,
    catch_up,
    kv_bytes,
    reconfigure_time,
)
from pdscaler.models.ratio import RatioResult, ratio_model, shape_ratio

__all__ = [
    "Bottleneck",
    "BudgetSplit",
    "CatchUp",
    "DecodeBound",
    "DrainResult",
    "MemoryResult",
    "PoolSignals",
    "RatioResult",
    "backlog",
    "bandwidth_gain",
    "catch_up",
    "ceil_replicas",
    "decode_bound",
    "decode_memory",
    "drain_time",
    "fits_one_replica",
    "kv_bytes",
    "locate_bottleneck",
    "memory_service_rate",
    "min_service_rate",
    "pool_pressure",
    "ratio_model",
    "reconfigure_time",
    "replicas_for_deadline",
    "shape_ratio",
    "split_budget",
    "utilization",
    "with_memory",
]
