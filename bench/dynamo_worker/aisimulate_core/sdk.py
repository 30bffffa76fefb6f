# mypy: ignore-errors
"""``aisimulate_core.sdk`` shim (package docstring): ``ForwardPassPerfModelConfig`` and
``RustForwardPassPerfModel`` for the planner's ``fpm_regression`` path only.

What the planner reads of them (dynamo/planner/core/perf_model/ais_adapter.py
``_build_ais_config`` / ``_init_engine_model`` and engine_query.py
``AISCoreEnginePerfModel``):

* ``asdict(ForwardPassPerfModelConfig(model=..., system="unprofiled", backend=...,
  worker_type=..., estimation_mode="fpm_regression"))`` and its keys ``tp``, ``pp``,
  ``kv_block_size``, ``nextn``, ``speculation``;
* ``ForwardPassPerfModelConfig.from_legacy_engine_config(legacy, worker_type,
  options).estimator_config``, where ``options`` is the planner's
  ``{max_observations, min_observations, bucket_count, max_num_tokens,
  max_batch_size, max_kv_tokens}``: exactly the options of aiconfigurator-core's
  regression (``ForwardPassPerfOptions``), so the shim carries them through unchanged
  instead of translating them to AISimulate's newer schema;
* ``RustForwardPassPerfModel.best_available(config)`` then ``tune_with_fpms``,
  ``estimate_forward_pass_time_ms``, ``diagnostics``: aiconfigurator-core's
  ``RustForwardPassPerfModel.from_regression(options)`` (its "fallback_regression"
  source: per workload kind, a least-squares fit of the forward-pass wall time on the
  scheduled prefill tokens, or on decode requests and KV tokens, ready after
  ``min_observations`` samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiconfigurator_core.sdk import RustForwardPassPerfModel as _AicModel


@dataclass
class ForwardPassPerfModelConfig:
    model: str
    system: str
    backend: str
    worker_type: str
    estimation_mode: str = "auto"
    fallback_policy: str = "deny"
    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    kv_block_size: int | None = None
    nextn: int = 0
    speculation: dict[str, Any] | None = None
    systems_paths: list[str] | None = None
    transfer_policy: str | None = None
    estimator_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_legacy_engine_config(
        cls, legacy: dict[str, Any], worker_type: str, options: dict[str, Any]
    ) -> ForwardPassPerfModelConfig:
        return cls(
            model=legacy["model_name"],
            system=legacy["system_name"],
            backend=legacy["backend"],
            worker_type=worker_type,
            estimation_mode="fpm_regression",
            tp=legacy.get("tp_size", 1),
            pp=legacy.get("pp_size", 1),
            estimator_config={"aiconfigurator_core_options": dict(options)},
        )


class RustForwardPassPerfModel:
    @classmethod
    def best_available(cls, config: dict[str, Any], options: Any = None) -> _AicModel:
        if config.get("estimation_mode") != "fpm_regression":
            raise RuntimeError(
                "aisimulate_core shim: only estimation_mode='fpm_regression' is available "
                f"(got {config.get('estimation_mode')!r})"
            )
        opts = config.get("estimator_config", {}).get("aiconfigurator_core_options")
        return _AicModel.from_regression(opts)
