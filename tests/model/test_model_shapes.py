"""Gemma 3 and gpt-oss, in their published shapes: sliding windows, MXFP4 experts, K/V types.

The files are full-size tensor tables over a hole (``gguf_shapes.py``); the expected
bytes below are written out from the published dimensions and the ggml block sizes,
not from the footprint code or the tensor list, so a counting mistake cannot cancel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.gguf_bytes import VT, kv_array, kv_u32
from tests.support.gguf_shapes import write_gemma3_4b, write_gpt_oss_20b

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.model.estimate import estimate_footprint
from pytest_tokperf.model.footprint import at_depth, footprint, kv_bytes
from pytest_tokperf.model.gguf_file import GGUFModel, load_gguf

DEPTHS = (0, 1024, 32768)
F32, F16 = 4, 2


def q4_k(n: int) -> int:
    return n // 256 * 144


def q6_k(n: int) -> int:
    return n // 256 * 210


def q8_0(n: int) -> int:
    return n // 32 * 34


def mxfp4(n: int) -> int:
    return n // 32 * 17


# --- Gemma 3 4B --------------------------------------------------------------------------

G_L, G_E, G_FF, G_Q, G_KV, G_HD, G_V = 34, 2560, 10240, 8 * 256, 4 * 256, 256, 262144
G_FULL_LAYERS = (5, 11, 17, 23, 29)
"""Gemma 3's sliding_window_pattern 6: every sixth layer attends globally."""
G_KV_F16 = 4 * 256 * F16 * 2
"""K and V of 4 KV heads of 256, f16, per layer and position."""


def gemma_weights() -> int:
    layer = (4 * G_E * F32 + 2 * G_HD * F32
             + q4_k(G_E * G_Q) + q4_k(G_E * G_KV) + q6_k(G_E * G_KV) + q4_k(G_Q * G_E)
             + 2 * q4_k(G_E * G_FF) + q6_k(G_FF * G_E))
    return G_L * layer + q6_k(G_E * G_V) + G_E * F32  # tied: the whole table is the head


def gemma_kv(depth: int, per_layer: int = G_KV_F16, window: int = 1024) -> int:
    full = len(G_FULL_LAYERS)
    return per_layer * (full * depth + (G_L - full) * min(depth, window))


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> GGUFModel:
    return load_gguf(write_gemma3_4b(tmp_path_factory.mktemp("g3") / "gemma-3-4b.gguf"))


def test_gemma3_layers_follow_llama_cpp_pattern(gemma: GGUFModel) -> None:
    assert gemma.sliding_window == 1024
    assert tuple(i for i, w in enumerate(gemma.swa_layers) if not w) == G_FULL_LAYERS
    assert "llama.cpp's pattern for gemma3" in gemma.swa_source


@pytest.mark.parametrize("depth", DEPTHS)
def test_gemma3_4b_bytes_per_token(gemma: GGUFModel, depth: int) -> None:
    fp = footprint(gemma, depth_tokens=depth)
    expected = gemma_weights() + gemma_kv(depth)
    assert fp.total_bytes == pytest.approx(expected, rel=0.005)
    assert fp.weights_bytes == gemma_weights()
    assert fp.kv_bytes == pytest.approx(gemma_kv(depth), abs=depth)
    assert fp.tied_output and fp.warnings == ()


def test_gemma3_4b_at_32k_reads_0_79_gb_of_kv_not_4_56(gemma: GGUFModel) -> None:
    fp = footprint(gemma, depth_tokens=32768)
    assert fp.kv_bytes / 1e9 == pytest.approx(0.79, abs=0.005)
    assert G_L * G_KV_F16 * 32768 / 1e9 == pytest.approx(4.56, abs=0.005)  # the old charge
    assert kv_bytes(gemma, 32768) == gemma_kv(32768)


def test_gemma3_k_and_v_cache_types_apart(gemma: GGUFModel) -> None:
    per_layer = q8_0(4 * 256) + 4 * 256 * F16  # -ctk q8_0 -ctv f16
    fp = footprint(gemma, depth_tokens=32768, kv_type_k="q8_0", kv_type_v="f16")
    assert fp.kv_type == "q8_0/f16"
    assert fp.kv_bytes == pytest.approx(gemma_kv(32768, per_layer), abs=32768)
    both = footprint(gemma, depth_tokens=32768, kv_type="q8_0")
    assert both.kv_type == "q8_0"
    assert both.kv_bytes == pytest.approx(gemma_kv(32768, 2 * q8_0(4 * 256)), abs=32768)
    only_k = footprint(gemma, depth_tokens=32768, kv_type_k="q8_0")  # -ctk alone: V stays f16
    assert only_k.kv_bytes == fp.kv_bytes
    with pytest.raises(ConfigError, match=r"kv_type_v='fp8' is not a llama.cpp KV cache type"):
        footprint(gemma, kv_type_v="fp8")


def test_at_depth_recounts_windows_with_the_model(gemma: GGUFModel) -> None:
    shallow = footprint(gemma, depth_tokens=1024, kv_type_k="q8_0")
    deep = at_depth(shallow, 32768, gemma)
    assert deep.kv_bytes == pytest.approx(gemma_kv(32768, q8_0(4 * 256) + 4 * 256 * F16),
                                          abs=32768)
    assert at_depth(shallow, 2048).kv_bytes == 2 * shallow.kv_bytes  # linear without the model


def test_gemma3_without_window_key_is_full_attention(tmp_path: Path) -> None:
    model = load_gguf(write_gemma3_4b(tmp_path / "g.gguf", window=None))
    assert not any(model.swa_layers)
    assert footprint(model, depth_tokens=32768).kv_bytes == G_L * G_KV_F16 * 32768


@pytest.mark.parametrize(("pattern", "full_layers"), [
    (kv_u32("gemma3.attention.sliding_window_pattern", 4), tuple(range(3, 34, 4))),
    (kv_array("gemma3.attention.sliding_window_pattern", VT.BOOL, 34,
              bytes([i % 2 for i in range(34)])), tuple(range(0, 34, 2))),
], ids=["period-4", "per-layer-array"])
def test_pattern_key_overrides_the_architecture(tmp_path: Path, pattern: bytes,
                                                full_layers: tuple[int, ...]) -> None:
    model = load_gguf(write_gemma3_4b(tmp_path / "g.gguf", extra=[pattern]))
    assert tuple(i for i, w in enumerate(model.swa_layers) if not w) == full_layers
    windowed = G_L - len(full_layers)
    assert footprint(model, depth_tokens=32768).kv_bytes == pytest.approx(
        G_KV_F16 * (len(full_layers) * 32768 + windowed * 1024), abs=32768)


# --- gpt-oss-20b -------------------------------------------------------------------------

O_L, O_E, O_Q, O_KV, O_H, O_FF, O_X, O_USED, O_V = 24, 2880, 64 * 64, 8 * 64, 64, 2880, 32, 4, 201088
O_KV_F16 = 8 * 64 * F16 * 2


def oss_dense_layer() -> int:
    return (2 * O_E * F32
            + q8_0(O_E * O_Q) + O_Q * F32 + 2 * (q8_0(O_E * O_KV) + O_KV * F32)
            + q8_0(O_Q * O_E) + O_E * F32
            + O_H * F32 + O_E * O_X * F32 + O_X * F32)


def oss_experts_layer() -> int:
    """All 32 experts of one layer: MXFP4 gate, up and down plus their F32 biases."""
    return 3 * mxfp4(O_E * O_FF * O_X) + (2 * O_FF + O_E) * O_X * F32


def oss_weights() -> int:
    active = oss_experts_layer() * O_USED // O_X
    return O_L * (oss_dense_layer() + active) + q8_0(O_E) + q8_0(O_E * O_V) + O_E * F32


def oss_kv(depth: int) -> int:
    return O_KV_F16 * (12 * depth + 12 * min(depth, 128))  # even layers slide (128 tokens)


@pytest.fixture(scope="module")
def oss(tmp_path_factory: pytest.TempPathFactory) -> GGUFModel:
    return load_gguf(write_gpt_oss_20b(tmp_path_factory.mktemp("oss") / "gpt-oss-20b.gguf"))


@pytest.mark.parametrize("depth", DEPTHS)
def test_gpt_oss_20b_bytes_per_token(oss: GGUFModel, depth: int) -> None:
    fp = footprint(oss, depth_tokens=depth)
    assert fp.total_bytes == pytest.approx(oss_weights() + oss_kv(depth), rel=0.005)
    assert fp.kv_bytes == pytest.approx(oss_kv(depth), abs=depth)
    assert (fp.expert_count, fp.experts_used) == (O_X, O_USED)
    assert fp.warnings == ()


def test_gpt_oss_prices_each_tensor_at_its_type(oss: GGUFModel) -> None:
    fp = footprint(oss)
    resident = (O_L * (oss_dense_layer() + oss_experts_layer())
                + 2 * q8_0(O_E * O_V) + O_E * F32)
    assert fp.resident_bytes == resident
    assert oss.swa_layers == tuple(i % 2 == 0 for i in range(O_L))
    assert oss.tensor("blk.0.ffn_up_exps.weight").type_name == "MXFP4"  # type: ignore[union-attr]
    # every active weight at 4.25 bits (the old estimate) under-counts the stored mix by 25%:
    assert fp.active_parameters * 4.25 / 8 < 0.8 * fp.weights_bytes


def test_estimate_prices_experts_and_the_rest_apart(oss: GGUFModel) -> None:
    fp = footprint(oss, depth_tokens=32768)
    dense = fp.active_parameters - O_L * 3 * O_E * O_FF * O_USED  # all but the active experts
    experts = O_L * 3 * O_E * O_FF * O_X
    est = estimate_footprint(dense + experts, "Q8_0", active_parameters=fp.active_parameters,
                             expert_parameters=experts, expert_quant="MXFP4",
                             n_layer=O_L, n_head_kv=8, head_dim=64, depth_tokens=32768,
                             sliding_window=128, sliding_layers=12)
    assert est.kv_bytes == pytest.approx(oss_kv(32768), abs=32768)
    assert est.weights_bytes == pytest.approx(fp.weights_bytes, rel=0.05)
    flat = estimate_footprint(dense + experts, "MXFP4", active_parameters=fp.active_parameters)
    assert flat.weights_bytes < 0.8 * fp.weights_bytes  # the 4.25-bit under-count
