"""NVIDIA aiconfigurator's performance database as ``pdscaler.sim.measured.Answers``.

Owns: importing aiconfigurator (only here, only when asked: ``open_database``; missing,
``AiconfiguratorMissingError`` says how to install the extra), and the calls it answers: its
Python API ``aiconfigurator.cli.api.cli_estimate`` (the command ``aiconfigurator cli
estimate``) in ``static_ctx`` mode for a prefill batch (its TTFT) and ``static_gen`` for
a decode batch (its TPOT, the mean step over the output), the model's config (context,
experts) and ``aiconfigurator_core.sdk.memory.estimate_kv_cache`` for the KV tokens one
replica holds (GPU memory x ``gpu_memory_utilization`` minus weights, activations at the
token budget and runtime). Must not: fit or decide anything (``pdscaler.sim.measured``).

Golden, aiconfigurator 0.12.0 (vLLM 0.24.0 database), Qwen/Qwen3-32B on h200_sxm at
TP 2: 2,000 prompt tokens prefill in 101.2 ms; batches of 16 / 64 / 128 sequences of
2,000 + 200 tokens decode at 12.4 / 16.1 / 21.0 ms a step; a replica holds 751,550
tokens of KV (128 KiB a token on each GPU).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from dataclasses import dataclass, field
from typing import Any

from pdscaler.sim.measured import Deployment, ModelFacts

#: How to get the extra (the message of ``AiconfiguratorMissingError``).
INSTALL_HINT = "pip install 'pdscaler[profiles]' (aiconfigurator 0.12.0)"


class AiconfiguratorMissingError(RuntimeError):
    """aiconfigurator is not installed (``INSTALL_HINT``)."""


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise AiconfiguratorMissingError(
            f"aiconfigurator is not installed ({err}): {INSTALL_HINT}"
        ) from err


def _quiet() -> None:
    """aiconfigurator logs every database it loads at INFO and its fallbacks at WARNING:
    keep its errors only."""
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)


@dataclass
class Aiconfigurator:
    """``Answers`` of aiconfigurator's database for ``deployment`` (one process-wide
    database cache: the first question loads it, ~4 s; later ones take ~0.5-1.5 s)."""

    deployment: Deployment
    _api: Any = field(default=None, repr=False)
    _version: str = ""
    _facts: ModelFacts | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._api = _module("aiconfigurator.cli.api")
        _quiet()
        perf = _module("aiconfigurator_core.sdk.perf_database")
        d = self.deployment
        version = perf.get_latest_database_version(system=d.system, backend=d.backend)
        if version is None:
            raise ValueError(f"aiconfigurator has no {d.backend} database for {d.system}")
        self._version = str(version)

    def _moe(self) -> dict[str, int]:
        """MoE parallelism: as given, else vLLM's default (experts split by TP)."""
        d = self.deployment
        if d.moe_tp is None and d.moe_ep is None:
            return {"moe_tp_size": d.tp, "moe_ep_size": 1} if self._experts() else {}
        return {k: v for k, v in (("moe_tp_size", d.moe_tp), ("moe_ep_size", d.moe_ep)) if v}

    def _config(self) -> dict[str, Any]:
        utils = _module("aiconfigurator_core.sdk.utils")
        config: dict[str, Any] = utils.get_model_config_from_model_path(self.deployment.model)
        return config

    def _experts(self) -> int:
        return int(self._config().get("num_experts") or 0)

    def _estimate(self, mode: str, prompt: int, output: int, batch: int) -> Any:
        d = self.deployment
        return self._api.cli_estimate(
            d.model,
            d.system,
            mode=mode,
            backend_name=d.backend,
            backend_version=self._version,
            isl=prompt,
            osl=output,
            batch_size=batch,
            tp_size=d.tp,
            **self._moe(),
        )

    def facts(self) -> ModelFacts:
        if self._facts is not None:
            return self._facts
        d = self.deployment
        config = self._config()
        experts, top_k = int(config.get("num_experts") or 0), int(config.get("topk") or 0)
        memory = _module("aiconfigurator_core.sdk.memory")
        kv = memory.estimate_kv_cache(
            d.model,
            d.system,
            d.backend,
            self._version,
            max_num_tokens=d.max_batched_tokens,
            max_batch_size=d.max_seqs,
            memory_fraction_kind=self._fraction_kind(),
            memory_fraction_value=d.gpu_memory_utilization,
            tp_size=d.tp,
            **self._moe(),
        )
        self._facts = ModelFacts(
            max_context=int(config["context"]),
            moe_miss=1.0 - top_k / experts if experts and top_k else 1.0,
            kv_tokens=int(kv["total_kv_size_tokens"]),
            # per GPU -> the replica's TP GPUs (attention heads split by TP)
            kv_bytes_per_token=int(kv["kv_size_per_token_bytes"]) * d.tp,
            memory={
                "gpu_bytes": float(kv["total_gpu_capacity_bytes"]),
                "kv_bytes": float(kv["total_kv_size_bytes"]),
                **{k: float(v) for k, v in kv["memory_breakdown"].items()},
            },
        )
        return self._facts

    def prefill_s(self, prompt: int, batch: int) -> float:
        return float(self._estimate("static_ctx", prompt, 1, batch).ttft) / 1e3

    def decode_step_s(self, prompt: int, output: int, batch: int) -> float:
        return float(self._estimate("static_gen", prompt, output, batch).tpot) / 1e3

    def _fraction_kind(self) -> str:
        """vLLM and SGLang take their memory share of the total, TensorRT-LLM of the free."""
        return "of_free" if self.deployment.backend == "trtllm" else "of_total"

    def source(self) -> dict[str, Any]:
        return {
            "tool": "aiconfigurator",
            "version": importlib.metadata.version("aiconfigurator"),
            "backend_version": self._version,
            "database_mode": "SILICON",
            "calls": (
                "aiconfigurator.cli.api.cli_estimate(model, system, mode='static_ctx', "
                "backend_name, backend_version, isl=prompt, osl=1, batch_size=batch, "
                "tp_size) .ttft; mode='static_gen', isl=prompt, osl=output .tpot; "
                "aiconfigurator_core.sdk.memory.estimate_kv_cache(model, system, backend, "
                "backend_version, max_num_tokens=max_batched_tokens, max_batch_size="
                f"max_seqs, memory_fraction_kind='{self._fraction_kind()}', "
                "memory_fraction_value="
                "gpu_memory_utilization, tp_size)"
            ),
        }


def open_database(deployment: Deployment) -> Aiconfigurator:
    """aiconfigurator's answers for ``deployment``; ``AiconfiguratorMissingError`` without
    the extra."""
    return Aiconfigurator(deployment)
