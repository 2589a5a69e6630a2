"""GGUF reading, bytes-per-token footprint and the synthetic model writer."""

from __future__ import annotations

from pytest_tokperf.model.estimate import bits_per_weight, estimate_footprint
from pytest_tokperf.model.footprint import at_depth, describe, footprint, kv_bytes
from pytest_tokperf.model.gguf_file import GGUFModel, GGUFTensor, load_gguf, model_info
from pytest_tokperf.model.gguf_header import check_header, read_header
from pytest_tokperf.model.kv import KV_TYPES, kv_type_label, kv_types
from pytest_tokperf.model.spec import (
    MAIN_MODEL, TEST_MODEL, ModelSpec, draft_spec_for, parse_size, spec_for_size,
)
from pytest_tokperf.model.writer import cached_model, write_model

__all__ = [
    "KV_TYPES", "MAIN_MODEL", "TEST_MODEL", "GGUFModel", "GGUFTensor", "ModelSpec", "at_depth",
    "bits_per_weight", "cached_model", "check_header", "describe", "draft_spec_for",
    "estimate_footprint", "footprint", "kv_bytes", "kv_type_label", "kv_types", "load_gguf",
    "model_info", "parse_size", "read_header", "spec_for_size", "write_model",
]
