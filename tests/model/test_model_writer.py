"""The synthetic model writer: vocabulary, file contents, sizing and the model cache."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from pytest_tokperf.errors import ConfigError, ModelFileError
from pytest_tokperf.model.spec import (
    MAIN_MODEL,
    TEST_MODEL,
    ModelSpec,
    draft_spec_for,
    parse_size,
    predicted_file_bytes,
    spec_for_size,
    tensor_plan,
    vocab_pieces,
)
from pytest_tokperf.model.writer import cached_model, write_model

TINY = ModelSpec(n_layer=2, n_embd=64, n_ff=128, n_head=4, n_head_kv=2, n_vocab=600, name="tiny")


def test_vocab_pieces_are_unique_past_the_old_duplicate_point() -> None:
    pieces = vocab_pieces(40_000)
    assert len(pieces) == 40_000
    assert len(set(pieces)) == 40_000
    assert pieces[:3] == ("<unk>", "<s>", "</s>")
    assert pieces[3] == "<0x00>" and pieces[258] == "<0xFF>"
    assert not any("<" in p for p in pieces[259:])


def test_vocab_depends_only_on_size() -> None:
    assert vocab_pieces(5000) == vocab_pieces(5000)
    assert vocab_pieces(8192)[:5000] == vocab_pieces(5000)


def field(reader: gguf.GGUFReader, key: str) -> Any:
    found = reader.get_field(key)
    assert found is not None, key
    return found.contents()


def test_written_file_reads_back(tmp_path: Path) -> None:
    path = write_model(TINY, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(path)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.block_count") == 2
    assert field(reader, "llama.attention.head_count_kv") == 2
    assert field(reader, "llama.rope.dimension_count") == 16
    assert field(reader, "tokenizer.ggml.model") == "llama"
    assert field(reader, "tokenizer.ggml.add_bos_token") is True
    tokens = reader.get_field("tokenizer.ggml.tokens")
    assert tokens is not None and len(tokens.data) == 600
    assert tokens.contents()[:3] == ["<unk>", "<s>", "</s>"]
    types = field(reader, "tokenizer.ggml.token_type")
    # <0xXX> pieces are NORMAL (1), not BYTE (6): see the writer on invalid UTF-8.
    assert types[:4] == [2, 3, 3, 1] and types[-1] == 1
    plan = tensor_plan(TINY)
    assert [t.name for t in reader.tensors] == [t.name for t in plan]
    assert [int(t.n_bytes) for t in reader.tensors] == [t.n_bytes for t in plan]
    by_name = {t.name: t for t in reader.tensors}
    weights = np.asarray(by_name["blk.0.ffn_up.weight"].data, dtype=np.float32)
    assert weights.shape == (128, 64)
    assert abs(float(weights.mean())) < 0.002
    assert float(weights.std()) == pytest.approx(0.02, rel=0.05)
    assert np.all(np.asarray(by_name["output_norm.weight"].data) == 1.0)
    assert path.stat().st_size == pytest.approx(predicted_file_bytes(TINY), abs=4096)


def test_writing_is_deterministic(tmp_path: Path) -> None:
    a = write_model(TINY, tmp_path / "a.gguf")
    b = write_model(TINY, tmp_path / "b.gguf")
    assert a.read_bytes() == b.read_bytes()


def test_q8_0_model_is_quantized(tmp_path: Path) -> None:
    spec = replace(TINY, tensor_type="Q8_0")
    reader = gguf.GGUFReader(write_model(spec, tmp_path / "q8.gguf"))
    up = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert up.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert int(up.n_bytes) == 128 * 64 // 32 * 34
    values = gguf.quants.dequantize(np.asarray(up.data), gguf.GGMLQuantizationType.Q8_0)
    assert float(values.std()) == pytest.approx(0.02, rel=0.05)
    assert field(reader, "general.file_type") == 7


def test_write_into_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"folder '.*nowhere' does not exist"):
        write_model(TINY, tmp_path / "nowhere" / "m.gguf")


def test_spec_for_size_writes_within_ten_percent(tmp_path: Path) -> None:
    spec = spec_for_size("12MB")
    path = write_model(spec, tmp_path / "sized.gguf")
    assert path.stat().st_size == pytest.approx(12e6, rel=0.10)
    assert spec.n_layer >= 2


@pytest.mark.parametrize("target", ["1GB", "500MB", "3GB", "300MB", "70m", "4MB"])
def test_spec_for_size_predictions(target: str) -> None:
    spec = spec_for_size(target)
    assert predicted_file_bytes(spec) == pytest.approx(parse_size(target), rel=0.10)


def test_spec_for_size_prefers_width_2048() -> None:
    spec = spec_for_size("1GB")
    assert (spec.n_embd, spec.n_head, spec.n_head_kv, spec.n_vocab) == (2048, 32, 4, 32000)
    assert spec_for_size("1GB", "Q8_0").tensor_type == "Q8_0"


def test_spec_for_size_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"within 10% of '10kB'"):
        spec_for_size("10kB")


@pytest.mark.parametrize(("text", "expected"), [
    ("1GB", 10**9), ("500MB", 500 * 10**6), ("1.5GiB", int(1.5 * 2**30)), ("70m", 70 * 10**6),
    ("4096", 4096), ("2 kib", 2048), ("1tb", 10**12), (123, 123),
])
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "1.2.3GB", "ten MB", "-1GB", "1XB", "0", "1iB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match=repr(text).replace(".", r"\.")):
        parse_size(text)


@pytest.mark.parametrize(("changes", "message"), [
    ({"n_layer": 0}, r"ModelSpec.n_layer=0 must be"),
    ({"n_vocab": 100}, r"n_vocab=100 must be >= 260"),
    ({"n_embd": 66}, r"n_embd=66 is not a multiple of n_head=4"),
    ({"n_head_kv": 3}, r"n_head=4 is not a multiple of n_head_kv=3"),
    ({"tensor_type": "Q4_0"}, r"tensor_type='Q4_0'"),
    ({"architecture": "gpt2"}, r"architecture='gpt2'"),
    ({"architecture": "qwen3moe"}, r"'qwen3moe' needs expert_count >= 2"),
    ({"expert_count": 4, "expert_used_count": 5}, r"expert_used_count=5 must be between 1"),
    ({"n_ff": 100, "tensor_type": "Q8_0"}, r"multiples of 32"),
    ({"split_experts": True}, r"split_experts=True needs"),
    ({"name": "a/b"}, r"name='a/b' may hold only"),
    ({"seed": -1}, r"seed=-1 must be"),
])
def test_spec_validation(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        replace(TINY, **changes)  # type: ignore[arg-type]


def test_predefined_specs() -> None:
    assert 30e6 < predicted_file_bytes(TEST_MODEL) < 100e6
    assert predicted_file_bytes(MAIN_MODEL) == pytest.approx(1.14e9, rel=0.05)
    assert (MAIN_MODEL.n_embd, MAIN_MODEL.n_layer, MAIN_MODEL.n_ff) == (2048, 10, 5632)


def test_draft_shares_vocab_and_is_much_smaller() -> None:
    for spec in (TEST_MODEL, MAIN_MODEL):
        draft = draft_spec_for(spec)
        assert draft.n_vocab == spec.n_vocab
        assert draft.architecture == "llama" and draft.tensor_type == spec.tensor_type
        assert predicted_file_bytes(draft) < predicted_file_bytes(spec) / 3
        assert draft.key != spec.key


def test_cached_model_writes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(tmp_path / "cache"))
    first = cached_model(TINY)
    assert first.parent == tmp_path / "cache" / "models"
    assert first.name == f"{TINY.slug}-{TINY.key}.gguf"
    mtime = first.stat().st_mtime_ns
    os.utime(first, ns=(mtime - 10**9, mtime - 10**9))
    again = cached_model(TINY)
    assert again == first
    assert again.stat().st_mtime_ns == mtime - 10**9
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]
    other = cached_model(replace(TINY, seed=1))
    assert other != first and other.is_file()


def test_cached_model_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(blocker))
    with pytest.raises(ModelFileError, match=r"set PYTEST_TOKPERF_CACHE to a writable folder"):
        cached_model(TINY)

