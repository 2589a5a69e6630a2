"""GGUF reading, bytes-per-token footprint and the synthetic model writer."""

from __future__ import annotations

from pytest_tokperf.model.footprint import (
    KV_TYPES,
    bits_per_weight,
    describe,
    estimate_footprint,
    footprint,
)
from pytest_tokperf.model.gguf_file import GGUFModel, GGUFTensor, load_gguf, model_info
from pytest_tokperf.model.spec import (
    MAIN_MODEL,
    TEST_MODEL,
    ModelSpec,
    draft_spec_for,
    parse_size,
    spec_for_size,
)
from pytest_tokperf.model.writer import cached_model, write_model

__all__ = [
    "KV_TYPES",
    "MAIN_MODEL",
    "TEST_MODEL",
    "GGUFModel",
    "GGUFTensor",
    "ModelSpec",
    "bits_per_weight",
    "cached_model",
    "describe",
    "draft_spec_for",
    "estimate_footprint",
    "footprint",
    "load_gguf",
    "model_info",
    "parse_size",
    "spec_for_size",
    "write_model",
]
