"""Reading GGUF files: metadata, tensor table, identity, and every way a file can be bad."""

from __future__ import annotations

import struct
import tracemalloc
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.gguf_file import file_type_name, load_gguf, model_info
from pytest_tokperf.model.spec import ModelSpec
from pytest_tokperf.model.writer import write_model

TINY = ModelSpec(n_layer=2, n_embd=64, n_ff=128, n_head=4, n_head_kv=2, n_vocab=512,
                 context_length=1024, name="tiny")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def header(version: int, tensors: int, kvs: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs)


def test_load_reads_architecture_parameters(tiny_path: Path) -> None:
    model = load_gguf(tiny_path)
    assert model.architecture == "llama"
    assert model.name == "tiny"
    assert (model.n_layer, model.n_embd, model.n_head) == (2, 64, 4)
    assert model.head_count_kv == (2, 2)
    assert model.n_head_kv == 2
    assert (model.key_length, model.value_length) == (16, 16)
    assert model.context_length == 1024
    assert model.vocab_size == 512
    assert (model.expert_count, model.expert_used_count) == (0, 0)
    assert model.file_type_name == "F16"
    assert model.file_bytes == tiny_path.stat().st_size


def test_tensor_table_has_types_shapes_and_bytes(tiny_path: Path) -> None:
    model = load_gguf(tiny_path)
    embd = model.tensor("token_embd.weight")
    assert embd is not None
    assert (embd.type_name, embd.shape, embd.n_elements, embd.n_bytes) == (
        "F16", (64, 512), 64 * 512, 64 * 512 * 2)
    assert embd.n_rows == 512
    norm = model.tensor("blk.1.attn_norm.weight")
    assert norm is not None and (norm.type_name, norm.shape, norm.n_bytes) == ("F32", (64,), 256)
    k = model.tensor("blk.0.attn_k.weight")
    assert k is not None and k.shape == (64, 32)
    assert model.tensor("nope") is None
    assert model.quant_types == ("F16", "F32")


def test_model_info_identity(tiny_path: Path, tmp_path: Path) -> None:
    info = model_info(tiny_path)
    model = load_gguf(tiny_path)
    assert info.file_name == "tiny.gguf"
    assert info.path == str(tiny_path.resolve())
    assert info.file_bytes == tiny_path.stat().st_size
    assert info.architecture == "llama"
    assert info.parameter_count == sum(t.n_elements for t in model.tensors)
    assert info.quant_types == ("F16", "F32")
    assert info.file_type == "F16"
    assert info.context_length == 1024
    assert info.content_hash is not None and len(info.content_hash) == 64
    assert model_info(tiny_path).content_hash == info.content_hash

    changed = tmp_path / "changed.gguf"
    data = bytearray(tiny_path.read_bytes())
    data[model.data_offset + 10] ^= 0xFF
    changed.write_bytes(bytes(data))
    assert model_info(changed).content_hash != info.content_hash


def test_one_parse_gives_identity_and_footprint(tiny_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tokperf.model import gguf_file
    from pytest_tokperf.model.footprint import footprint

    model = load_gguf(tiny_path)
    assert model.content_hash == model_info(tiny_path).content_hash
    monkeypatch.setattr(gguf_file, "read_header", lambda *a, **k: pytest.fail("parsed again"))
    assert model_info(model) == model.info
    assert model.info.file_name == "tiny.gguf"
    assert footprint(model, depth_tokens=100).kv_bytes == 100 * 2 * 2 * (16 + 16) * 2


def test_gguf_reader_and_bounded_reader_agree(tiny_path: Path) -> None:
    reader = gguf.GGUFReader(tiny_path)
    model = load_gguf(tiny_path)
    assert model.data_offset == reader.data_offset
    assert [(t.name, t.n_bytes, t.data_offset) for t in model.tensors] == [
        (t.name, int(t.n_bytes), int(t.data_offset)) for t in reader.tensors]
    assert model.vocab_size == len(reader.fields["tokenizer.ggml.tokens"].data)


def test_same_spec_other_seed_changes_hash(tmp_path: Path) -> None:
    a = write_model(TINY, tmp_path / "a.gguf")
    b = write_model(replace(TINY, seed=7), tmp_path / "b.gguf")
    assert model_info(a).content_hash != model_info(b).content_hash


@pytest.mark.parametrize(("value", "name"), [(0, "F32"), (1, "F16"), (15, "Q4_K_M"),
                                             (7, "Q8_0"), (None, None), (999, "unknown(999)")])
def test_file_type_names(value: int | None, name: str | None) -> None:
    assert file_type_name(value) == name


def test_per_layer_head_count_kv(tmp_path: Path) -> None:
    path = tmp_path / "hybrid.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(3)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv([0, 2, 4])
    writer.add_tensor("blk.2.attn_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = load_gguf(path)
    assert model.head_count_kv == (0, 2, 4)
    assert model.n_head_kv == 4


# --- bad files -------------------------------------------------------------------------

def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ModelFileError, match=r"'.*missing\.gguf' does not exist; pass"):
        load_gguf(missing)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"is a directory; pass the \.gguf file"):
        load_gguf(tmp_path)


def test_text_file(tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("these are not the weights you are looking for\n")
    with pytest.raises(ModelFileError,
                       match=r"notes\.gguf' is not a GGUF file \(starts with b'thes'"):
        model_info(text)


def test_short_file(tmp_path: Path) -> None:
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF\x03")
    with pytest.raises(ModelFileError,
                       match=r"short\.gguf' is 5 bytes, shorter than a GGUF header"):
        load_gguf(short)


def test_unsupported_version(tmp_path: Path) -> None:
    old = tmp_path / "old.gguf"
    old.write_bytes(header(1, 0, 0) + b"\0" * 64)
    with pytest.raises(ModelFileError, match=r"is GGUF version 1; only versions \(2, 3\)"):
        load_gguf(old)


@pytest.mark.parametrize(("tensors", "kvs"), [(2**40, 0), (0, 2**40), (2**63, 2**63), (40, 40)])
def test_absurd_counts_fail_without_allocating(tmp_path: Path, tensors: int, kvs: int) -> None:
    bad = tmp_path / "absurd.gguf"
    bad.write_bytes(header(3, tensors, kvs) + b"\0" * 200)
    tracemalloc.start()
    with pytest.raises(ModelFileError, match=rf"claims {tensors} tensors and {kvs} metadata keys"):
        load_gguf(bad)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20


def test_absurd_array_length_is_refused_by_name(tmp_path: Path) -> None:
    key = b"general.tags"
    body = struct.pack("<Q", len(key)) + key
    body += struct.pack("<IIQ", gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32, 2**60)
    bad = tmp_path / "array.gguf"
    bad.write_bytes(header(3, 0, 1) + body + b"\0" * 16)
    with pytest.raises(ModelFileError, match=r"array\.gguf' is truncated or corrupt: metadata key 'general\.tags' "
                       r"\(1 of 1\): an array of 1152921504606846976 UINT32 items needs at "
                       r"least 4611686018427387904 bytes but only 16 are left"):
        load_gguf(bad)


def test_truncated_tensor_data(tiny_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    data = tiny_path.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"cut\.gguf' is truncated") as excinfo:
        model_info(cut)
    assert "download or write it again" in str(excinfo.value)


def test_truncated_metadata(tiny_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut-meta.gguf"
    cut.write_bytes(tiny_path.read_bytes()[:2000])
    with pytest.raises(ModelFileError, match=r"cut-meta\.gguf' is truncated or corrupt"):
        load_gguf(cut)


def test_garbage_after_valid_header(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(header(3, 1, 1) + bytes(range(256)) * 4)
    with pytest.raises(ModelFileError, match=r"junk\.gguf' is truncated or corrupt"):
        load_gguf(junk)
