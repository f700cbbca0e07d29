"""The ids of the families of failures (cluster.diagnosis.families has what each one is): apart,
so the tables that name a family need not import the families' texts."""

from __future__ import annotations

from typing import Literal, get_args

FamilyId = Literal[
    "memory_gpu",
    "kv_cache",
    "context_length",
    "memory_host",
    "gpu_arch",
    "cuda_runtime",
    "package_version",
    "model_arch",
    "model_access",
    "model_files",
    "config_invalid",
    "nccl",
    "distributed_init",
    "ray_cluster",
    "port_in_use",
    "engine_hang",
    "tokenizer",
    "node_hardware",
    "other",
]
FAMILY_IDS: tuple[FamilyId, ...] = get_args(FamilyId)
