"""Bytes per decoded token, checked against numbers computed here from the shapes.

Expected values are written out from the tensor shapes of each family, not by asking
the writer's plan or the footprint code, so a counting mistake cannot cancel itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np
import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.model.footprint import (
    bits_per_weight,
    describe,
    estimate_footprint,
    footprint,
)
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.model.spec import ModelSpec
from pytest_tokperf.model.writer import write_model
from pytest_tokperf.results import Footprint

E, FF, H, KV, V, L = 64, 128, 4, 2, 512, 2
HD = E // H
F16, F32 = 2, 4


def spec(**changes: object) -> ModelSpec:
    base: dict[str, object] = dict(n_layer=L, n_embd=E, n_ff=FF, n_head=H, n_head_kv=KV, n_vocab=V)
    base.update(changes)
    return ModelSpec(**base)  # type: ignore[arg-type]


def written(tmp_path: Path, s: ModelSpec) -> Footprint:
    return footprint(load_gguf(write_model(s, tmp_path / "m.gguf")))


def attention_bytes(q: int, kv: int, width: int = F16) -> int:
    """q, k, v, o projections plus the two RMS norms of one layer."""
    return width * (E * q + 2 * E * kv + q * E) + F32 * 2 * E


def dense_ffn_bytes(width: int = F16) -> int:
    return width * 3 * E * FF


def head_bytes(width: int = F16) -> int:
    return F32 * E + width * V * E


def test_llama_untied(tmp_path: Path) -> None:
    fp = written(tmp_path, spec())
    layer = attention_bytes(H * HD, KV * HD) + dense_ffn_bytes()
    assert fp.weights_bytes == L * layer + head_bytes() + F16 * E
    assert fp.resident_bytes == L * layer + head_bytes() + F16 * V * E
    assert fp.tied_output is False
    layer_params = 2 * E * H * HD + 2 * E * KV * HD + 2 * E + 3 * E * FF
    assert fp.active_parameters == L * layer_params + E + V * E + E
    assert fp.total_parameters == L * layer_params + E + 2 * V * E
    assert fp.kv_bytes_per_position == L * KV * (HD + HD) * F16
    assert fp.warnings == ()


def test_llama_tied_streams_whole_embedding(tmp_path: Path) -> None:
    fp = written(tmp_path, spec(tied_output=True))
    layer = attention_bytes(H * HD, KV * HD) + dense_ffn_bytes()
    assert fp.tied_output is True
    assert fp.weights_bytes == L * layer + F32 * E + F16 * V * E
    assert fp.resident_bytes == fp.weights_bytes


def test_gemma_is_tied_by_default(tmp_path: Path) -> None:
    fp = written(tmp_path, spec(architecture="gemma"))
    assert fp.architecture == "gemma"
    assert fp.tied_output is True
    layer = attention_bytes(H * HD, KV * HD) + dense_ffn_bytes()
    assert fp.weights_bytes == L * layer + F32 * E + F16 * V * E


def test_qwen2_counts_attention_biases(tmp_path: Path) -> None:
    fp = written(tmp_path, spec(architecture="qwen2"))
    layer = attention_bytes(H * HD, KV * HD) + dense_ffn_bytes() + F32 * (H * HD + 2 * KV * HD)
    assert fp.weights_bytes == L * layer + head_bytes() + F16 * E


def test_qwen3_uses_key_length_for_kv(tmp_path: Path) -> None:
    head_dim = 32
    fp = written(tmp_path, spec(architecture="qwen3", head_dim=head_dim))
    layer = attention_bytes(H * head_dim, KV * head_dim) + dense_ffn_bytes() + F32 * 2 * head_dim
    assert fp.weights_bytes == L * layer + head_bytes() + F16 * E
    assert fp.kv_bytes_per_position == L * KV * (head_dim + head_dim) * F16


def test_q8_0_tensors_count_34_bytes_per_32_weights(tmp_path: Path) -> None:
    fp = written(tmp_path, spec(tensor_type="Q8_0"))
    q8 = 34 / 32
    layer = int(q8 * (E * E + 2 * E * KV * HD + E * E + 3 * E * FF)) + F32 * 2 * E
    assert fp.weights_bytes == L * layer + F32 * E + int(q8 * V * E) + int(q8 * E)


def test_qwen3moe_counts_only_used_experts(tmp_path: Path) -> None:
    experts, used = 4, 2
    fp = written(tmp_path, spec(architecture="qwen3moe", expert_count=experts,
                                expert_used_count=used))
    stacked = F16 * 3 * experts * E * FF
    fixed = attention_bytes(H * HD, KV * HD) + F32 * 2 * HD + F32 * experts * E
    assert fp.weights_bytes == L * (fixed + stacked * used // experts) + head_bytes() + F16 * E
    assert fp.resident_bytes == L * (fixed + stacked) + head_bytes() + F16 * V * E
    assert (fp.expert_count, fp.experts_used) == (experts, used)
    expert_params = 3 * experts * E * FF
    assert fp.total_parameters - fp.active_parameters == (
        L * expert_params // 2 + V * E - E)


def test_qwen2moe_counts_shared_expert_in_full(tmp_path: Path) -> None:
    experts, used = 4, 1
    fp = written(tmp_path, spec(architecture="qwen2moe", expert_count=experts,
                                expert_used_count=used))
    fixed = (attention_bytes(H * HD, KV * HD) + F32 * (H * HD + 2 * KV * HD)
             + F32 * experts * E + F32 * E + F16 * 3 * E * FF)
    routed = F16 * 3 * experts * E * FF * used // experts
    assert fp.weights_bytes == L * (fixed + routed) + head_bytes() + F16 * E


def test_old_mixtral_per_expert_tensors(tmp_path: Path) -> None:
    experts, used = 4, 2
    fp = written(tmp_path, spec(expert_count=experts, expert_used_count=used, split_experts=True))
    fixed = attention_bytes(H * HD, KV * HD) + F32 * experts * E
    assert fp.weights_bytes == L * (fixed + F16 * 3 * E * FF * used) + head_bytes() + F16 * E
    assert (fp.expert_count, fp.experts_used) == (experts, used)


def test_kv_at_depth_f16_and_q8_0(tmp_path: Path) -> None:
    model = load_gguf(write_model(spec(), tmp_path / "m.gguf"))
    f16 = footprint(model, depth_tokens=1000)
    assert f16.kv_bytes == 1000 * L * 2 * KV * HD * F16
    assert f16.total_bytes == f16.weights_bytes + f16.kv_bytes
    q8 = footprint(model, depth_tokens=1000, kv_type="Q8_0")
    assert q8.kv_type == "q8_0"
    assert q8.kv_bytes == 1000 * L * 2 * (KV * HD // 32 * 34)
    assert footprint(model, depth_tokens=0).kv_bytes == 0


# --- hand-written files: mixed quants, per-layer KV heads, MLA, unknown architectures ------

def write_gguf(path: Path, arch: str, keys: dict[str, int | list[int]],
               tensors: Sequence[tuple[str, tuple[int, ...], str]]) -> Path:
    """A GGUF whose tensors are zeros of the right byte size; shapes in ggml order."""
    writer = gguf.GGUFWriter(path, arch)
    for key, value in keys.items():
        name = key.format(arch=arch)
        if isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_uint32(name, value)
    sizes = []
    for name, shape, type_name in tensors:
        qtype = gguf.GGMLQuantizationType[type_name]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_bytes = math.prod(shape) // block * size
        sizes.append(n_bytes)
        writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), n_bytes,
                               raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for n_bytes in sizes:
        writer.write_tensor_data(np.zeros(n_bytes, dtype=np.uint8))
    writer.close()
    return path


def test_mixed_quant_types_use_stored_bytes(tmp_path: Path) -> None:
    w, vocab = 256, 1000
    path = write_gguf(tmp_path / "mixed.gguf", "llama",
                      {"{arch}.block_count": 1, "{arch}.embedding_length": w,
                       "{arch}.attention.head_count": 2},
                      [("token_embd.weight", (w, vocab), "Q4_K"),
                       ("blk.0.attn_norm.weight", (w,), "F32"),
                       ("blk.0.attn_q.weight", (w, w), "Q4_K"),
                       ("blk.0.ffn_down.weight", (w, w), "Q6_K"),
                       ("output.weight", (w, vocab), "Q6_K")])
    fp = footprint(load_gguf(path))
    q4k_row, q6k_row = 144, 210  # bytes per 256 weights
    assert fp.weights_bytes == q4k_row + 4 * w + w * q4k_row + w * q6k_row + vocab * q6k_row
    assert fp.resident_bytes == (vocab * q4k_row + 4 * w + w * q4k_row + w * q6k_row
                                 + vocab * q6k_row)
    assert fp.kv_bytes_per_position == 2 * (w // 2 + w // 2) * F16  # n_head_kv = n_head = 2


def test_per_layer_kv_heads_are_summed(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "hybrid.gguf", "llama",
                      {"{arch}.block_count": 3, "{arch}.embedding_length": 64,
                       "{arch}.attention.head_count": 4,
                       "{arch}.attention.head_count_kv": [0, 2, 4]},
                      [("output.weight", (64, 10), "F16"), ("token_embd.weight", (64, 10), "F16")])
    fp = footprint(load_gguf(path), depth_tokens=10)
    assert fp.kv_bytes_per_position == (0 + 2 + 4) * (16 + 16) * F16
    assert fp.kv_bytes == 10 * fp.kv_bytes_per_position


def deepseek_keys(mla: bool) -> dict[str, int | list[int]]:
    keys: dict[str, int | list[int]] = {
        "{arch}.block_count": 2, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4,
        "{arch}.attention.head_count_kv": 1, "{arch}.attention.key_length": 96,
        "{arch}.attention.value_length": 64, "{arch}.expert_count": 4,
        "{arch}.expert_used_count": 1}
    if mla:
        keys["{arch}.attention.key_length_mla"] = 48
        keys["{arch}.attention.value_length_mla"] = 32
    return keys


@pytest.mark.parametrize("mla", [True, False])
def test_deepseek2(tmp_path: Path, mla: bool) -> None:
    path = write_gguf(tmp_path / "ds.gguf", "deepseek2", deepseek_keys(mla), [
        ("token_embd.weight", (64, 100), "F16"),
        ("blk.0.ffn_gate.weight", (64, 32), "F16"),
        ("blk.1.ffn_gate_inp.weight", (64, 4), "F32"),
        ("blk.1.exp_probs_b.bias", (4,), "F32"),
        ("blk.1.ffn_gate_exps.weight", (64, 32, 4), "F16"),
        ("blk.1.ffn_gate_shexp.weight", (64, 32), "F16"),
        ("output.weight", (64, 100), "F16"),
    ])
    fp = footprint(load_gguf(path))
    assert fp.weights_bytes == (64 * 2 + 64 * 32 * 2 + 64 * 4 * 4 + 4 * 4 + 64 * 32 * 2
                                + 64 * 32 * 2 + 64 * 100 * 2)
    assert fp.kv_bytes_per_position == (2 * 96 * F16 if mla else 2 * (96 + 64) * F16)
    assert fp.warnings == ()


def test_unknown_architecture_warns_and_counts(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "odd.gguf", "mystery", {},
                      [("token_embd.weight", (32, 50), "F16"),
                       ("blk.0.ffn_up_exps.weight", (32, 16, 8), "F16"),
                       ("blk.0.mixer.weight", (32, 32), "F32")])
    fp = footprint(load_gguf(path), depth_tokens=100)
    assert fp.architecture == "mystery"
    assert fp.weights_bytes == 32 * 50 * 2 + 32 * 16 * 8 * 2 + 32 * 32 * 4  # tied, all experts
    assert fp.expert_count == 8 and fp.experts_used == 8
    joined = " ".join(fp.warnings)
    assert "architecture 'mystery' is not one tokperf has checked" in joined
    assert "read 8 experts from the tensor shapes" in joined
    assert "expert_used_count=0 is missing or invalid" in joined


def test_sliding_window_without_a_known_pattern_warns_past_the_window(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "sc2.gguf", "starcoder2",
                      {"{arch}.block_count": 1, "{arch}.embedding_length": 64,
                       "{arch}.attention.head_count": 4, "{arch}.attention.sliding_window": 128},
                      [("token_embd.weight", (64, 10), "F16")])
    model = load_gguf(path)
    assert not any("sliding window" in w for w in footprint(model, depth_tokens=128).warnings)
    deep = footprint(model, depth_tokens=4096)
    assert deep.kv_bytes == 4096 * 4 * (16 + 16) * F16  # charged the full depth
    assert "128-token sliding window but no starcoder2.attention.sliding_window_pattern" in (
        deep.warnings[-1])
    assert "upper bound" in deep.warnings[-1]


def test_gemma2_windows_every_other_layer(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "g2.gguf", "gemma2",
                      {"{arch}.block_count": 2, "{arch}.embedding_length": 64,
                       "{arch}.attention.head_count": 4, "{arch}.attention.sliding_window": 128},
                      [("token_embd.weight", (64, 10), "F16")])
    model = load_gguf(path)
    assert model.swa_layers == (True, False)  # llama.cpp set_swa_pattern(2): layer 0 slides
    fp = footprint(model, depth_tokens=4096)
    assert fp.kv_bytes == pytest.approx((128 + 4096) * 4 * (16 + 16) * F16, abs=4096)
    assert fp.warnings == ()


def test_gemma2_without_window_key_assumes_4096(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "g2.gguf", "gemma2",
                      {"{arch}.block_count": 2, "{arch}.embedding_length": 64,
                       "{arch}.attention.head_count": 4},
                      [("token_embd.weight", (64, 10), "F16")])
    model = load_gguf(path)
    assert model.sliding_window == 4096
    assert footprint(model, depth_tokens=4096).warnings == ()
    deep = footprint(model, depth_tokens=8192)
    assert deep.kv_bytes == pytest.approx((4096 + 8192) * 4 * (16 + 16) * F16, abs=8192)
    assert "assumed llama.cpp's default window of 4096 tokens for gemma2" in deep.warnings[0]


def test_bad_kv_type_lists_choices(tmp_path: Path) -> None:
    model = load_gguf(write_model(spec(), tmp_path / "m.gguf"))
    with pytest.raises(ConfigError, match=r"kv_type='q3_x' is not a llama.cpp KV cache type; "
                                          r"use one of f32, f16, bf16, q8_0"):
        footprint(model, kv_type="q3_x")
    with pytest.raises(ConfigError, match=r"depth_tokens=-1 must be a whole number"):
        footprint(model, depth_tokens=-1)


# --- estimates without a file ------------------------------------------------------------

def test_estimate_8b_q4_k_m_is_about_4_9_gb() -> None:
    fp = estimate_footprint(8.03e9, "Q4_K_M")
    assert fp.weights_bytes == pytest.approx(4.9e9, rel=0.10)
    assert estimate_footprint(8.03e9, "F16").weights_bytes == pytest.approx(16.06e9)


def test_estimate_kv_matches_llama3_8b() -> None:
    fp = estimate_footprint(8.03e9, 4.84, n_layer=32, n_head_kv=8, head_dim=128, depth_tokens=65536)
    assert fp.kv_bytes_per_position == 2 * 32 * 8 * 128 * 2  # 128 KiB per token
    assert fp.kv_bytes == 65536 * 131072
    q8 = estimate_footprint(8.03e9, "Q8_0", n_layer=32, n_head_kv=8, head_dim=128, kv_type="q8_0")
    assert q8.kv_bytes_per_position == 2 * 32 * (8 * 128 // 32 * 34)


def test_estimate_moe_streams_active_only() -> None:
    fp = estimate_footprint(30.5e9, "Q4_K_M", active_parameters=3.3e9)
    assert fp.weights_bytes == round(3.3e9 * 4.84 / 8)
    assert fp.resident_bytes == round(30.5e9 * 4.84 / 8)


def test_estimate_prices_experts_apart() -> None:
    # 1e9 non-expert weights at Q8_0 (8.5 bits) + 16e9 expert weights at MXFP4 (4.25),
    # of which 2e9 are read per token
    fp = estimate_footprint(17e9, "Q8_0", active_parameters=3e9, expert_parameters=16e9,
                            expert_quant="MXFP4")
    assert fp.weights_bytes == round(1e9 * 8.5 / 8 + 2e9 * 4.25 / 8)
    assert fp.resident_bytes == round(1e9 * 8.5 / 8 + 16e9 * 4.25 / 8)
    same = estimate_footprint(17e9, "Q8_0", active_parameters=3e9, expert_parameters=16e9)
    assert same.weights_bytes == round(3e9 * 8.5 / 8)


def test_estimate_sliding_layers_and_kv_types() -> None:
    fp = estimate_footprint(4e9, "Q4_K_M", n_layer=34, n_head_kv=4, head_dim=256,
                            depth_tokens=32768, sliding_window=1024, sliding_layers=29)
    assert fp.kv_bytes == pytest.approx(4096 * (5 * 32768 + 29 * 1024), abs=32768)
    split = estimate_footprint(4e9, "Q4_K_M", n_layer=2, n_head_kv=4, head_dim=256,
                               depth_tokens=10, kv_type_k="q8_0", kv_type_v="f16")
    assert split.kv_type == "q8_0/f16"
    assert split.kv_bytes == 10 * 2 * (1024 // 32 * 34 + 1024 * 2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"expert_parameters": 9e9}, r"expert_parameters=9000000000.0 exceeds parameters"),
    ({"expert_parameters": 6e9}, r"expert_parameters=6000000000.0 needs active_parameters"),
    ({"expert_parameters": 6e9, "active_parameters": 1e9},
     r"active_parameters=1000000000.0 is less than the non-expert parameters \(2e\+09"),
    ({"expert_quant": "MXFP4"}, r"expert_quant='MXFP4' needs expert_parameters"),
    ({"sliding_layers": 3, "n_layer": 2, "sliding_window": 10}, r"sliding_layers=3 must be at most"),
    ({"sliding_layers": 1, "n_layer": 2}, r"needs sliding_window > 0"),
    ({"kv_type_k": "q9"}, r"kv_type_k='q9' is not a llama.cpp KV cache type"),
])
def test_estimate_rejects_bad_moe_and_window_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        estimate_footprint(8e9, "Q4_K_M", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("quant", "bpw"), [("Q8_0", 8.5), ("f16", 16.0), ("Q4_K_M", 4.84),
                                            ("IQ4_XS", 4.25), ("Q4_0", 4.5), ("MXFP4", 4.25), (5.5, 5.5)])
def test_bits_per_weight(quant: str | float, bpw: float) -> None:
    assert bits_per_weight(quant) == bpw


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"parameters": 0, "bits_per_weight_or_quant": 4}, r"parameters=0 must be"),
    ({"parameters": float("nan"), "bits_per_weight_or_quant": 4}, r"parameters=nan"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": "Q9_Z"},
     r"unknown quantization 'Q9_Z'.*Q4_K_M"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": -4}, r"bits per weight -4 must be > 0"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": 4, "active_parameters": 9e9},
     r"active_parameters=9000000000.0 exceeds"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": 4, "depth_tokens": 10},
     r"depth_tokens=10 needs n_layer, n_head_kv and head_dim"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": 4, "n_layer": -2}, r"n_layer=-2 must be"),
    ({"parameters": 8e9, "bits_per_weight_or_quant": 4, "kv_type": "fp8"}, r"kv_type='fp8'"),
])
def test_estimate_rejects_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        estimate_footprint(**kwargs)  # type: ignore[arg-type]


def test_describe_one_line() -> None:
    fp = Footprint(architecture="llama", weights_bytes=11_500_000_000, kv_bytes_per_position=70_000,
                   depth_tokens=4000, kv_type="f16", resident_bytes=11_500_000_000,
                   active_parameters=1, total_parameters=1)
    assert describe(fp) == "weights 11.50 GB + KV 0.28 GB at depth 4000 = 11.78 GB per token"
    moe = Footprint(architecture="qwen3moe", weights_bytes=2_000_000_000, kv_bytes_per_position=0,
                    depth_tokens=0, kv_type="f16", resident_bytes=17_000_000_000,
                    active_parameters=1, total_parameters=1, expert_count=128, experts_used=8)
    assert describe(moe).endswith("(8 of 128 experts active; 17.00 GB resident)")
