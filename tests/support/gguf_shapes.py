"""GGUF files in the shapes of published models, tensor data as a hole (no disk, no time).

Shapes and keys follow the published configs and llama.cpp's converter names:

* Gemma 3 4B: 34 layers, width 2560, FFN 10240, 8 query heads, 4 KV heads of 256,
  vocabulary 262144, tied embedding, ``gemma3.attention.sliding_window`` = 1024 (llama.cpp
  applies its own pattern: 5 of every 6 layers windowed). Types as in a Q4_K_M file.
* gpt-oss-20b: 24 layers, width 2880, 64 query heads and 8 KV heads of 64, 32 experts
  of width 2880 with 4 used, vocabulary 201088, ``gpt-oss.attention.sliding_window`` =
  128 (llama.cpp: every other layer windowed), attention sinks, MXFP4 experts.

The expected byte counts are *not* here: the tests write them out from these numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.support.gguf_bytes import QT, VT, kv_array, kv_str, kv_u32, strings, write_tensors

Tensor = tuple[str, Sequence[int], int]

GEMMA3_4B = dict(n_layer=34, n_embd=2560, n_ff=10240, n_head=8, n_head_kv=4, head_dim=256,
                 n_vocab=262144, window=1024)
GPT_OSS_20B = dict(n_layer=24, n_embd=2880, n_ff=2880, n_head=64, n_head_kv=8, head_dim=64,
                   n_expert=32, n_expert_used=4, n_vocab=201088, window=128)


def _tokenizer(tokens: int, merges: int) -> list[bytes]:
    out = []
    if tokens:
        out.append(kv_array("tokenizer.ggml.tokens", VT.STRING, tokens,
                            strings([f"t{i}" for i in range(tokens)])))
    if merges:
        out.append(kv_array("tokenizer.ggml.merges", VT.STRING, merges,
                            strings([f"m{i} n{i}" for i in range(merges)])))
    return out


def gemma3_4b_tensors(n_layer: int = 34) -> list[Tensor]:
    e, ff, hd = GEMMA3_4B["n_embd"], GEMMA3_4B["n_ff"], GEMMA3_4B["head_dim"]
    q, kv = GEMMA3_4B["n_head"] * hd, GEMMA3_4B["n_head_kv"] * hd
    out: list[Tensor] = [("token_embd.weight", [e, GEMMA3_4B["n_vocab"]], QT.Q6_K)]
    for i in range(n_layer):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", [e], QT.F32),
                (b + "attn_q.weight", [e, q], QT.Q4_K),
                (b + "attn_k.weight", [e, kv], QT.Q4_K),
                (b + "attn_v.weight", [e, kv], QT.Q6_K),
                (b + "attn_q_norm.weight", [hd], QT.F32),
                (b + "attn_k_norm.weight", [hd], QT.F32),
                (b + "attn_output.weight", [q, e], QT.Q4_K),
                (b + "post_attention_norm.weight", [e], QT.F32),
                (b + "ffn_norm.weight", [e], QT.F32),
                (b + "ffn_gate.weight", [e, ff], QT.Q4_K),
                (b + "ffn_up.weight", [e, ff], QT.Q4_K),
                (b + "ffn_down.weight", [ff, e], QT.Q6_K),
                (b + "post_ffw_norm.weight", [e], QT.F32)]
    out.append(("output_norm.weight", [e], QT.F32))
    return out


def write_gemma3_4b(path: Path, *, tokens: int = 0, window: int | None = 1024,
                    extra: Sequence[bytes] = ()) -> Path:
    g = GEMMA3_4B
    keys = [kv_str("general.architecture", "gemma3"), kv_str("general.name", "gemma-3-4b-shaped"),
            kv_u32("gemma3.block_count", g["n_layer"]),
            kv_u32("gemma3.embedding_length", g["n_embd"]),
            kv_u32("gemma3.feed_forward_length", g["n_ff"]),
            kv_u32("gemma3.attention.head_count", g["n_head"]),
            kv_u32("gemma3.attention.head_count_kv", g["n_head_kv"]),
            kv_u32("gemma3.attention.key_length", g["head_dim"]),
            kv_u32("gemma3.attention.value_length", g["head_dim"]),
            kv_u32("gemma3.context_length", 131072)]
    if window is not None:
        keys.append(kv_u32("gemma3.attention.sliding_window", window))
    return write_tensors(path, keys + list(extra) + _tokenizer(tokens, 0),
                         gemma3_4b_tensors(g["n_layer"]))


def gpt_oss_20b_tensors() -> list[Tensor]:
    g = GPT_OSS_20B
    e, ff, hd, n_exp = g["n_embd"], g["n_ff"], g["head_dim"], g["n_expert"]
    q, kv = g["n_head"] * hd, g["n_head_kv"] * hd
    out: list[Tensor] = [("token_embd.weight", [e, g["n_vocab"]], QT.Q8_0)]
    for i in range(g["n_layer"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", [e], QT.F32),
                (b + "attn_q.weight", [e, q], QT.Q8_0), (b + "attn_q.bias", [q], QT.F32),
                (b + "attn_k.weight", [e, kv], QT.Q8_0), (b + "attn_k.bias", [kv], QT.F32),
                (b + "attn_v.weight", [e, kv], QT.Q8_0), (b + "attn_v.bias", [kv], QT.F32),
                (b + "attn_output.weight", [q, e], QT.Q8_0), (b + "attn_output.bias", [e], QT.F32),
                (b + "attn_sinks.weight", [g["n_head"]], QT.F32),
                (b + "post_attention_norm.weight", [e], QT.F32),
                (b + "ffn_gate_inp.weight", [e, n_exp], QT.F32),
                (b + "ffn_gate_inp.bias", [n_exp], QT.F32),
                (b + "ffn_gate_exps.weight", [e, ff, n_exp], QT.MXFP4),
                (b + "ffn_gate_exps.bias", [ff, n_exp], QT.F32),
                (b + "ffn_up_exps.weight", [e, ff, n_exp], QT.MXFP4),
                (b + "ffn_up_exps.bias", [ff, n_exp], QT.F32),
                (b + "ffn_down_exps.weight", [ff, e, n_exp], QT.MXFP4),
                (b + "ffn_down_exps.bias", [e, n_exp], QT.F32)]
    out += [("output_norm.weight", [e], QT.F32), ("output.weight", [e, g["n_vocab"]], QT.Q8_0)]
    return out


def write_gpt_oss_20b(path: Path, *, tokens: int = 0, merges: int = 0) -> Path:
    g = GPT_OSS_20B
    a = "gpt-oss"
    keys = [kv_str("general.architecture", a), kv_str("general.name", "gpt-oss-20b-shaped"),
            kv_u32(f"{a}.block_count", g["n_layer"]),
            kv_u32(f"{a}.embedding_length", g["n_embd"]),
            kv_u32(f"{a}.expert_feed_forward_length", g["n_ff"]),
            kv_u32(f"{a}.attention.head_count", g["n_head"]),
            kv_u32(f"{a}.attention.head_count_kv", g["n_head_kv"]),
            kv_u32(f"{a}.attention.key_length", g["head_dim"]),
            kv_u32(f"{a}.attention.value_length", g["head_dim"]),
            kv_u32(f"{a}.attention.sliding_window", g["window"]),
            kv_u32(f"{a}.expert_count", g["n_expert"]),
            kv_u32(f"{a}.expert_used_count", g["n_expert_used"]),
            kv_u32(f"{a}.context_length", 131072)]
    return write_tensors(path, keys + _tokenizer(tokens, merges), gpt_oss_20b_tensors())
