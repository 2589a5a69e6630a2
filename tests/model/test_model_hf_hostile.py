"""Hostile Hugging Face folders: every one is read or refused with one ModelFileError line
naming the file, the key and the fix; nothing hangs, nothing is read whole.

Before: 13 of these 21 kinds of folder ended in a traceback (ValueError, TypeError,
OverflowError, RecursionError, MemoryError), a FIFO of weights hung the session, and a
shape of [2^63, 2^63] was read as 1.7e29 GB per token. Memory is checked with
tracemalloc; ``bounded`` only turns a hang into a failure.
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.cli import main
from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.hf_file import MAX_HEADER_BYTES, hf_footprint, load_hf
from tests.transport.test_engines_faults import bounded

MiB = 1 << 20
CONFIG: dict[str, Any] = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8,
                          "num_attention_heads": 2, "num_key_value_heads": 1,
                          "dtype": "float16"}
TENSORS: dict[str, Any] = {
    "model.embed_tokens.weight": {"dtype": "F16", "shape": [4, 8], "data_offsets": [0, 64]},
    "model.layers.0.self_attn.q_proj.weight": {"dtype": "F16", "shape": [8, 8],
                                               "data_offsets": [64, 192]},
}


def safetensors(path: Path, header: bytes | dict[str, Any], data: int = 192) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(data))
    return path


def folder(tmp_path: Path, config: bytes | dict[str, Any] = CONFIG,
           header: bytes | dict[str, Any] | None = None, index: bytes | None = None) -> Path:
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_bytes(config if isinstance(config, bytes)
                                       else json.dumps(config).encode())
    safetensors(root / "model.safetensors", TENSORS if header is None else header)
    if index is not None:
        (root / "model.safetensors.index.json").write_bytes(index)
    return root


def refused(root: Path, file: str, pattern: str) -> str:
    """Load ``root``: a one-line ModelFileError naming ``file`` and matching ``pattern``,
    with under 40 MiB allocated on the way (``read_regular`` asks for a buffer of its cap,
    16 MiB for config.json and 32 MiB for the index, whose pages are never touched)."""
    tracemalloc.start()
    try:
        with pytest.raises(ModelFileError) as caught:
            bounded(lambda: hf_footprint(load_hf(root), 4096), 5.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert "\n" not in message and len(message) < 500, message
    assert repr(str(root / file)) in message, message
    assert re.search(pattern, message), message
    assert peak < 40 * MiB, peak
    return message


def test_the_base_folder_is_read(tmp_path: Path) -> None:
    fp = hf_footprint(load_hf(folder(tmp_path)), 100)
    assert fp.total_parameters == 4 * 8 + 8 * 8 and fp.kv_bytes_per_position == 2 * 4 * 2


CONFIGS = {
    "text for a number": ({"hidden_size": "lots"}, r"'hidden_size' is 'lots', not a whole"),
    "text heads": ({"num_attention_heads": "x"}, r"'num_attention_heads' is 'x'"),
    "1e30 kv heads": ({"num_key_value_heads": 1e30}, r"'num_key_value_heads' is 1e\+30"),
    "inf head_dim": ({"head_dim": float("inf")}, r"'head_dim' is inf"),
    "negative head_dim": ({"head_dim": -5}, r"'head_dim' is -5"),
    "text experts": ({"num_experts": "8"}, r"'num_experts' is '8'"),
    "list window": ({"sliding_window": [1]}, r"'sliding_window' is \[1\]"),
    "2^70 context": ({"max_position_embeddings": 2**70}, r"'max_position_embeddings' is"),
    "text tie": ({"tie_word_embeddings": "false"}, r"'tie_word_embeddings' is 'false', not a bool"),
    "bool layers": ({"num_hidden_layers": True}, r"says num_hidden_layers True"),
    "in text_config": ({"text_config": {"num_experts": "x"}}, r"'num_experts' is 'x'"),
}


@pytest.mark.parametrize("change", CONFIGS.values(), ids=CONFIGS)
def test_a_config_value_of_the_wrong_type_or_size_is_refused(
    tmp_path: Path, change: tuple[dict[str, Any], str]
) -> None:
    values, pattern = change
    message = refused(folder(tmp_path, {**CONFIG, **values}), "config.json", pattern)
    assert "download the model again" in message or "download it again" in message


@pytest.mark.parametrize("text", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"a":' * 5000 + b"1" + b"}" * 5000,
                                  b"\xff\xfe garbage", b'"just text"', b"[1, 2]"],
                         ids=["deep list", "deep object", "bytes", "string", "list"])
def test_a_config_that_is_no_object_is_refused(tmp_path: Path, text: bytes) -> None:
    refused(folder(tmp_path, text), "config.json",
            r"config.json (is not JSON|is \w+, not a JSON object)|nested")


def test_a_sparse_giant_config_is_refused_by_its_size(tmp_path: Path) -> None:
    root = folder(tmp_path)
    with open(root / "config.json", "r+b") as fh:
        fh.truncate(3 << 30)  # 3 GiB, no blocks: read whole it was a MemoryError
    refused(root, "config.json", r"holds 3221225472 bytes, more than the")


HEADERS = {
    "shape null": ({"dtype": "F16", "shape": None, "data_offsets": [0, 64]},
                   r"has shape None, not a list"),
    "shape text": ({"dtype": "F16", "shape": ["x"], "data_offsets": [0, 64]},
                   r"has shape \['x'\]"),
    "shape float": ({"dtype": "F16", "shape": [4.0, 8], "data_offsets": [0, 64]},
                    r"has shape \[4.0, 8\]"),
    "shape 2^63": ({"dtype": "F16", "shape": [2**63, 2**63], "data_offsets": [0, 64]},
                   r"has shape \[9223372036854775808"),
    "shape too big for the file": ({"dtype": "F16", "shape": [2**40, 2], "data_offsets": [0, 64]},
                                   r"takes 4398046511104 bytes but its data_offsets"),
    "negative dim": ({"dtype": "F16", "shape": [-4, -8], "data_offsets": [0, 64]},
                     r"has shape \[-4, -8\]"),
    "nine dims": ({"dtype": "F16", "shape": [1] * 9, "data_offsets": [0, 2]},
                  r"not a list of at most 8"),
    "unknown dtype": ({"dtype": "F4", "shape": [4, 8], "data_offsets": [0, 64]},
                      r"has dtype 'F4', which tokperf cannot size"),
    "dtype number": ({"dtype": 5, "shape": [4, 8], "data_offsets": [0, 64]},
                     r"has dtype 5"),
    "offsets past the end": ({"dtype": "F16", "shape": [4, 8], "data_offsets": [0, 2**40]},
                             r"data_offsets \[0, 1099511627776\], not \[begin, end\] inside"),
    "offsets reversed": ({"dtype": "F16", "shape": [4, 8], "data_offsets": [64, 0]},
                         r"has data_offsets \[64, 0\]"),
    "no offsets": ({"dtype": "F16", "shape": [4, 8]}, r"has data_offsets None"),
    "entry a number": (5, r"is 5, not an object with dtype"),
}


@pytest.mark.parametrize("entry", HEADERS.values(), ids=HEADERS)
def test_a_tensor_entry_the_file_cannot_hold_is_refused(
    tmp_path: Path, entry: tuple[object, str]
) -> None:
    value, pattern = entry
    header = {**TENSORS, "model.embed_tokens.weight": value}
    message = refused(folder(tmp_path, header=header), "model.safetensors", pattern)
    assert "tensor 'model.embed_tokens.weight'" in message


@pytest.mark.parametrize("header", [
    b'{"w": {"dtype": "F16", "shape": [Infinity], "data_offsets": [0, 2]}}',
    b'{"w": {"dtype": "F16", "shape": [NaN], "data_offsets": [0, 2]}}',
    b'{"w": {"dtype": "F16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}',
], ids=["Infinity", "NaN", "5000 digits"])
def test_a_shape_json_cannot_hold_as_a_count_is_refused(tmp_path: Path, header: bytes) -> None:
    refused(folder(tmp_path, header=header), "model.safetensors",
            r"has shape \[(inf|nan)\]|is not JSON \(Exceeds the limit")


@pytest.mark.parametrize("header", [
    b"[" * 100_000 + b"]" * 100_000, b"\x00" * 64, b"[1, 2]",
    b"{" + b'"a":{},' * 1_100_000 + b'"b":1}',
], ids=["deep", "zeros", "list", "too many values"])
def test_a_header_that_is_no_table_is_refused(tmp_path: Path, header: bytes) -> None:
    refused(folder(tmp_path, header=header), "model.safetensors",
            r"the safetensors header (is not JSON|is list|holds about)|nested")


def test_overlapping_tensors_are_refused(tmp_path: Path) -> None:
    header = {"a": {"dtype": "F16", "shape": [96], "data_offsets": [0, 192]},
              "b": {"dtype": "F16", "shape": [96], "data_offsets": [0, 192]}}
    refused(folder(tmp_path, header=header), "model.safetensors",
            r"2 tensors claim 384 bytes but the file holds 192 bytes of data")


@pytest.mark.parametrize("length", [2**40, 2**64 - 1, MAX_HEADER_BYTES + 1, 1, 500])
def test_a_header_length_the_file_cannot_hold_is_refused(tmp_path: Path, length: int) -> None:
    root = folder(tmp_path)
    (root / "model.safetensors").write_bytes(length.to_bytes(8, "little") + b"{}")
    refused(root, "model.safetensors", r"not a safetensors file: its header length|truncated")


INDEXES = {
    "value a number": ({"weight_map": {"w": 5}}, r"maps 'w' to 5, not the name of"),
    "value null": ({"weight_map": {"w": None}}, r"maps 'w' to None"),
    "value a path out": ({"weight_map": {"w": "../../etc/model.safetensors"}},
                         r"to '../../etc/model.safetensors', not the name of a .safetensors file"),
    "absolute path": ({"weight_map": {"w": "/etc/passwd"}}, r"to '/etc/passwd'"),
    "not safetensors": ({"weight_map": {"w": "pytorch_model.bin"}}, r"'pytorch_model.bin'"),
    "a list": ({"weight_map": ["model.safetensors"]}, r"'weight_map' is \['model.safetensors'\]"),
    "missing": ({"metadata": {}}, r"'weight_map' is None"),
    "empty": ({"weight_map": {}}, r"'weight_map' is \{\}"),
    "index a list": ([1, 2], r"'weight_map' is None"),
}


@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES)
def test_a_weight_map_that_names_no_file_here_is_refused(
    tmp_path: Path, index: tuple[object, str]
) -> None:
    value, pattern = index
    refused(folder(tmp_path, index=json.dumps(value).encode()),
            "model.safetensors.index.json", pattern)


def test_an_index_naming_a_missing_shard_names_it(tmp_path: Path) -> None:
    index = json.dumps({"weight_map": {"w": "model-00002-of-00002.safetensors"}}).encode()
    root = folder(tmp_path, index=index)
    with pytest.raises(ModelFileError, match="model-00002-of-00002.safetensors"):
        load_hf(root)


def test_a_tensor_in_two_shards_is_refused(tmp_path: Path) -> None:
    root = folder(tmp_path, index=json.dumps({"weight_map": {
        "a": "a.safetensors", "b": "b.safetensors"}}).encode())
    safetensors(root / "a.safetensors", TENSORS)
    safetensors(root / "b.safetensors", TENSORS)
    refused(root, "b.safetensors", r"tensor 'model.embed_tokens.weight' is in 'a.safetensors'")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("name", ["model.safetensors", "config.json",
                                  "model.safetensors.index.json"])
def test_a_fifo_in_the_folder_is_refused_without_waiting(tmp_path: Path, name: str) -> None:
    root = folder(tmp_path)
    (root / name).unlink(missing_ok=True)
    os.mkfifo(root / name)
    refused(root, name, r"is a FIFO, not a regular file; pass the model folder")
    assert main(["predict", "--hardware", "100GB/s", "--model", str(root)]) == 2


def test_predict_on_a_hostile_folder_is_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = folder(tmp_path, header={**TENSORS, "model.embed_tokens.weight": {
        "dtype": "F16", "shape": [2**63, 2**63], "data_offsets": [0, 64]}})
    assert main(["predict", "--hardware", "100GB/s", "--model", str(root)]) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert len(lines) == 1 and "has shape [9223372036854775808" in lines[0], lines
    assert "GB" not in out.out
