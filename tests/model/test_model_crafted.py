"""Crafted GGUF files: every lie is refused by name, before anything is looped over.

One test per kind of crafted file, each checking the refusal message (file, key or
tensor, what is wrong). ``tests/model/test_gguf_corpus.py`` times the same kinds at up to
100 MB in a subprocess each; here the files are small or holes, and memory is checked
with tracemalloc (no timing assertions).
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import gguf
import pytest
from tests.support.gguf_bytes import (
    QT,
    VT,
    array,
    gstr,
    kv,
    kv_array,
    kv_str,
    kv_u32,
    strings,
    tensor_info,
    write_file,
    write_tensors,
)

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.model import gguf_walk
from pytest_tokperf.model.gguf_header import (
    MAX_METADATA_STRINGS,
    MAX_NESTED_ARRAYS,
    read_header,
)

MiB = 1 << 20
ARCH = kv_str("general.architecture", "llama")


def refused(path: Path, pattern: str) -> str:
    """Load ``path``, expect a refusal matching ``pattern``, with < 8 MiB allocated."""
    tracemalloc.start()
    try:
        with pytest.raises(ModelFileError, match=pattern) as excinfo:
            load_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(excinfo.value)
    assert repr(str(path)) in message
    assert peak < 8 * MiB
    return message


# --- arrays -----------------------------------------------------------------------------

def test_issue_case_2_to_the_40_uint8_then_4_mib_of_zeros(tmp_path: Path) -> None:
    path = write_file(tmp_path / "u8.gguf", [kv_array("general.tags", VT.UINT8, 2**40)],
                      filler=4 * MiB)
    refused(path, r"is truncated or corrupt: metadata key 'general\.tags' \(1 of 1\): an array "
                  r"of 1099511627776 UINT8 items needs at least 1099511627776 bytes but only "
                  r"4194304 are left in the file")


def test_string_array_count_times_8_bytes_past_the_end(tmp_path: Path) -> None:
    path = write_file(tmp_path / "s.gguf", [kv_array("tokenizer.ggml.tokens", VT.STRING, 2**40)],
                      filler=MiB)
    refused(path, r"metadata key 'tokenizer\.ggml\.tokens' \(1 of 1\): an array of "
                  r"1099511627776 STRING items needs at least 8796093022208 bytes")


def test_string_length_inside_an_array_past_the_end(tmp_path: Path) -> None:
    payload = strings(["a", "b"]) + gstr(b"c", length=2**60)
    path = write_file(tmp_path / "s.gguf",
                      [kv_array("tokenizer.ggml.tokens", VT.STRING, 5, payload)], filler=64)
    refused(path, r"metadata key 'tokenizer\.ggml\.tokens' \(1 of 1\): string 3 of 5 "
                  r"\(1152921504606846976 bytes\) needs 1152921504606846976 bytes but only")


def test_more_strings_than_any_model_is_refused_before_walking(tmp_path: Path) -> None:
    count = MAX_METADATA_STRINGS + 1  # all empty strings: 8 zero bytes each, a hole
    path = write_file(tmp_path / "many.gguf",
                      [kv_array("tokenizer.ggml.merges", VT.STRING, count)], filler=8 * count)
    refused(path, rf"metadata key 'tokenizer\.ggml\.merges' \(1 of 1\): the metadata holds "
                  rf"more than {MAX_METADATA_STRINGS} strings in arrays \(this array adds "
                  rf"{count}\); real models hold under a million")


def test_string_cap_counts_all_arrays_together(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_walk, "MAX_METADATA_STRINGS", 1000)
    half = 501
    kvs = [kv_array("a.strings", VT.STRING, half, bytes(8 * half)),
           kv_array("b.strings", VT.STRING, half, bytes(8 * half))]
    path = write_file(tmp_path / "two.gguf", kvs)
    refused(path, r"metadata key 'b\.strings' \(2 of 2\): the metadata holds more than")


def test_nested_array_inner_length_past_the_end(tmp_path: Path) -> None:
    inner = array(VT.UINT64, 2**40)
    path = write_file(tmp_path / "nested.gguf",
                      [kv_array("general.nested", VT.ARRAY, 2, array(VT.UINT8, 3, b"abc") + inner)],
                      filler=64)
    refused(path, r"metadata key 'general\.nested' \(1 of 1\), item 1 of 2: an array of "
                  r"1099511627776 UINT64 items needs at least 8796093022208 bytes")


def test_nested_array_count_times_12_bytes_past_the_end(tmp_path: Path) -> None:
    path = write_file(tmp_path / "nested.gguf",
                      [kv_array("general.nested", VT.ARRAY, 2**40)], filler=MiB)
    refused(path, r"an array of 1099511627776 ARRAY items needs at least 13194139533312 bytes")


def test_too_many_nested_arrays(tmp_path: Path) -> None:
    count = MAX_NESTED_ARRAYS + 1
    path = write_file(tmp_path / "nested.gguf", [kv_array("general.nested", VT.ARRAY, count)],
                      filler=12 * count)
    refused(path, rf"more than {MAX_NESTED_ARRAYS} arrays inside arrays .*llama\.cpp refuses "
                  rf"nested arrays altogether")


def test_arrays_nested_too_deep(tmp_path: Path) -> None:
    value = array(VT.UINT8, 0)
    for _ in range(6):
        value = array(VT.ARRAY, 1, value)
    path = write_file(tmp_path / "deep.gguf", [kv("general.deep", VT.ARRAY, value)])
    refused(path, r"arrays are nested more than 4 deep")


def test_nested_arrays_within_limits_are_read(tmp_path: Path) -> None:
    value = array(VT.ARRAY, 2, array(VT.UINT8, 2, b"ab") + array(VT.STRING, 1, gstr("x")))
    path = write_tensors(tmp_path / "ok.gguf", [ARCH, kv("general.nested", VT.ARRAY, value)],
                         [("output_norm.weight", [8], QT.F32)])
    assert read_header(path).fields["general.nested"].count == 2


def test_unknown_value_type(tmp_path: Path) -> None:
    path = write_file(tmp_path / "t.gguf", [kv("general.odd", 99, b"\0" * 8)])
    refused(path, r"metadata key 'general\.odd' \(1 of 1\): the value type is 99, not a GGUF "
                  r"value type \(0-12\)")


# --- strings and keys -------------------------------------------------------------------

def test_scalar_string_length_past_the_end(tmp_path: Path) -> None:
    path = write_file(tmp_path / "s.gguf", [kv("general.name", VT.STRING, gstr(b"x", 2**62))],
                      filler=MiB)
    refused(path, r"metadata key 'general\.name' \(1 of 1\): a string of 4611686018427387904 "
                  r"bytes needs 4611686018427387904 bytes but only")


def test_key_length_past_the_end(tmp_path: Path) -> None:
    path = write_file(tmp_path / "k.gguf", [gstr(b"general.name", 2**40)], filler=MiB)
    refused(path, r"metadata key 1 of 1: the key name of 1099511627776 bytes needs "
                  r"1099511627776 bytes")


def test_key_longer_than_allowed_but_present(tmp_path: Path) -> None:
    path = write_file(tmp_path / "k.gguf", [gstr(b"k" * 70000) + struct.pack("<IB", VT.UINT8, 1)])
    refused(path, r"metadata key 1 of 1: the key name is 70000 bytes long, more than the 65536")


def test_empty_and_duplicate_keys(tmp_path: Path) -> None:
    empty = write_file(tmp_path / "e.gguf", [kv_u32("", 1)])
    refused(empty, r"metadata key 1 of 1: the key name is empty")
    twice = write_file(tmp_path / "d.gguf", [kv_u32("general.x", 1), kv_u32("general.x", 2)])
    refused(twice, r"metadata key 'general\.x' \(2 of 2\): the key appears twice")


def test_key_that_is_not_utf8(tmp_path: Path) -> None:
    path = write_file(tmp_path / "u.gguf", [kv(b"general.\xff\xfe", VT.UINT8, b"\1")])
    refused(path, r"metadata key 1 of 1: the key name is not valid UTF-8")


def test_key_count_lie_over_zeros(tmp_path: Path) -> None:
    path = write_file(tmp_path / "kvlie.gguf", [ARCH], n_kv=5000, filler=MiB)
    refused(path, r"metadata key 2 of 5000: the key name is empty")


def test_long_scalar_string_is_skipped_not_kept(tmp_path: Path) -> None:
    template = "x" * (3 * MiB)
    path = write_tensors(tmp_path / "chat.gguf", [ARCH, kv_str("tokenizer.chat_template", template)],
                         [("output_norm.weight", [8], QT.F32)])
    field = read_header(path).fields["tokenizer.chat_template"]
    assert field.value is None


# --- the header and the tensor table ---------------------------------------------------

@pytest.mark.parametrize(("tensors", "kvs"), [(2**40, 0), (0, 2**40), (2**63, 2**63), (40, 40)])
def test_absurd_counts_fail_without_allocating(tmp_path: Path, tensors: int, kvs: int) -> None:
    path = write_file(tmp_path / "absurd.gguf", [], n_tensors=tensors, n_kv=kvs, filler=200)
    refused(path, rf"claims {tensors} tensors and {kvs} metadata keys, implausible for a file "
                  rf"of 224 bytes .*header is corrupt")


def test_tensor_count_lie_over_zeros(tmp_path: Path) -> None:
    entry = tensor_info("output_norm.weight", [8], QT.F32, 0)
    path = write_file(tmp_path / "tlie.gguf", [ARCH], [entry], n_tensors=30000, filler=0)
    with path.open("ab") as fh:
        fh.truncate(path.stat().st_size + 4 * MiB)
    refused(path, r"tensor '' \(3 of 30000\): a second tensor has the same name")


def test_tensor_count_lie_past_the_end(tmp_path: Path) -> None:
    entry = tensor_info("output_norm.weight", [8], QT.F32, 0)
    path = write_file(tmp_path / "tlie.gguf", [ARCH], [entry] * 1, n_tensors=3)
    with path.open("ab") as fh:
        fh.write(bytes(10))
    refused(path, r"tensor '' \(2 of 3\): the dimension count needs 4 bytes but only 2 are left")


def test_dims_that_overflow_int64(tmp_path: Path) -> None:
    path = write_file(tmp_path / "dims.gguf", [ARCH],
                      [tensor_info("blk.0.attn_q.weight", [2**62, 2**62], QT.F32, 0)])
    refused(path, r"tensor 'blk\.0\.attn_q\.weight' \(1 of 1\): shape \[4611686018427387904, "
                  r"4611686018427387904\] has more than 2\^63 elements")


def test_dims_bigger_than_the_file(tmp_path: Path) -> None:
    path = write_file(tmp_path / "dims.gguf", [ARCH],
                      [tensor_info("token_embd.weight", [2**31, 2**20], QT.F16, 0)])
    refused(path, r"tensor 'token_embd\.weight' \(1 of 1\): shape \[2147483648, 1048576\] in "
                  r"F16 is 4503599627370496 bytes, more than the whole file")


def test_too_many_dimensions(tmp_path: Path) -> None:
    path = write_file(tmp_path / "dims.gguf", [ARCH], [tensor_info("t", [1] * 5, QT.F32, 0)])
    refused(path, r"tensor 't' \(1 of 1\): it has 5 dimensions; ggml tensors have at most 4")


def test_dimension_count_lie(tmp_path: Path) -> None:
    entry = gstr("t") + struct.pack("<I", 2**31)
    path = write_file(tmp_path / "dims.gguf", [ARCH], [entry])
    refused(path, r"it has 2147483648 dimensions")


def test_unknown_tensor_type(tmp_path: Path) -> None:
    path = write_file(tmp_path / "type.gguf", [ARCH], [tensor_info("t", [32], 1234, 0)])
    refused(path, r"tensor 't' \(1 of 1\): type 1234 is not a ggml tensor type")


def test_row_not_a_whole_number_of_blocks(tmp_path: Path) -> None:
    path = write_file(tmp_path / "block.gguf", [ARCH], [tensor_info("t", [100, 4], QT.Q4_K, 0)])
    refused(path, r"rows of 100 Q4_K elements are not a whole number of 256-element blocks")


def test_offset_past_the_end(tmp_path: Path) -> None:
    path = write_file(tmp_path / "off.gguf", [ARCH],
                      [tensor_info("output_norm.weight", [8], QT.F32, 2**50)], data_bytes=64)
    refused(path, r"off\.gguf' is truncated: tensor 'output_norm\.weight' ends at byte "
                  r"1125899906842\d+ but the file has \d+ bytes")


def test_unaligned_offset(tmp_path: Path) -> None:
    path = write_file(tmp_path / "align.gguf", [ARCH],
                      [tensor_info("output_norm.weight", [8], QT.F32, 4)], data_bytes=64)
    refused(path, r"tensor 'output_norm\.weight': its data offset 4 is not a multiple of the "
                  r"alignment 32")


def test_overlapping_tensors(tmp_path: Path) -> None:
    entries = [tensor_info(f"blk.{i}.w", [1024], QT.F32, 0) for i in range(4)]
    path = write_file(tmp_path / "overlap.gguf", [ARCH], entries, data_bytes=4096)
    refused(path, r"the tensor table: its 4 tensors claim 16384 bytes but the data section "
                  r"holds 4096: their offsets overlap")


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    entries = [tensor_info("w", [8], QT.F32, 0), tensor_info("w", [8], QT.F32, 32)]
    path = write_file(tmp_path / "dup.gguf", [ARCH], entries, data_bytes=64)
    refused(path, r"tensor 'w' \(2 of 2\): a second tensor has the same name")


@pytest.mark.parametrize(("value", "problem"), [
    (kv_u32("general.alignment", 48), r"alignment 48 is not a power of two"),
    (kv_u32("general.alignment", 0), r"alignment 0 is not a power of two"),
    (kv("general.alignment", VT.UINT64, struct.pack("<Q", 32)), r"it is a UINT64, not a UINT32"),
], ids=["48", "0", "uint64"])
def test_bad_alignment(tmp_path: Path, value: bytes, problem: str) -> None:
    path = write_file(tmp_path / "align.gguf", [ARCH, value])
    refused(path, rf"metadata key 'general\.alignment': {problem}")


@pytest.mark.parametrize("cut", [30, 60, 100, 140])
def test_truncated_anywhere_in_the_header(tmp_path: Path, cut: int) -> None:
    whole = write_tensors(tmp_path / "whole.gguf",
                          [ARCH, kv_u32("llama.block_count", 1),
                           kv_array("tokenizer.ggml.tokens", VT.STRING, 3, strings(["a", "bc", "d"]))],
                          [("output_norm.weight", [8], QT.F32)])
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole.read_bytes()[:cut])
    refused(path, r"cut\.gguf' (is truncated or corrupt: .* needs \d+ bytes but only \d+ are "
                  r"left|claims 1 tensors and 3 metadata keys)")


# --- well-formed files at the limits are accepted ----------------------------------------

def test_big_endian_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_block_count(1)
    writer.add_uint32("llama.attention.head_count", 4)
    writer.add_embedding_length(64)
    import numpy as np

    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = load_gguf(path)
    assert (model.n_layer, model.n_embd, model.n_head) == (1, 64, 4)
    assert model.tensor("output_norm.weight") is not None


def test_real_sized_tokenizer_is_counted_not_kept(tmp_path: Path) -> None:
    tokens = [f"tok{i}" for i in range(262_144)]
    path = write_tensors(tmp_path / "vocab.gguf",
                         [ARCH, kv_array("tokenizer.ggml.tokens", VT.STRING, len(tokens),
                                         strings(tokens))],
                         [("output_norm.weight", [8], QT.F32)])
    model = load_gguf(path)
    assert model.vocab_size == 262_144
    kept = read_header(path, keep_string_arrays={"tokenizer.ggml.tokens"})
    value = kept.fields["tokenizer.ggml.tokens"].value
    assert isinstance(value, tuple) and value[-1] == b"tok262143"


def test_numeric_arrays_long_or_short(tmp_path: Path) -> None:
    big = 3 * MiB
    path = write_tensors(tmp_path / "arr.gguf",
                         [ARCH, kv_array("llama.attention.head_count_kv", VT.UINT32, 3,
                                         struct.pack("<3I", 0, 2, 4)),
                          kv_array("tokenizer.ggml.token_type", VT.UINT8, big, bytes(big))],
                         [("blk.2.attn_norm.weight", [8], QT.F32)])
    header = read_header(path)
    assert header.fields["llama.attention.head_count_kv"].value == (0, 2, 4)
    assert header.fields["tokenizer.ggml.token_type"].value is None
    assert load_gguf(path).head_count_kv == (0, 2, 4)


def test_every_refusal_names_the_fix(tmp_path: Path) -> None:
    path = write_file(tmp_path / "x.gguf", [kv_array("general.tags", VT.UINT8, 2**40)], filler=8)
    assert refused(path, r"general\.tags").endswith("download or write it again")


def test_footprint_of_a_hole_backed_file_needs_no_data(tmp_path: Path) -> None:
    path = write_tensors(tmp_path / "hole.gguf",
                         [ARCH, kv_u32("llama.block_count", 1), kv_u32("llama.embedding_length", 256),
                          kv_u32("llama.attention.head_count", 2)],
                         [("token_embd.weight", [256, 1000], QT.Q4_K),
                          ("output.weight", [256, 1000], QT.Q6_K)])
    fp = footprint(load_gguf(path))
    assert fp.weights_bytes == 144 + 1000 * 210
