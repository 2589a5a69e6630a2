"""Property-based fuzzing (hypothesis) of what a user or a file hands tokperf: the GGUF
reader, every option parser, the marker, URLs and the import path.

The property is always the same: the input is read, or refused with tokperf's own error
(``ModelFileError``, ``ConfigError``, ``StorageError``) carrying a one-line message;
never another exception. Example counts are small (the whole file runs in well under a
minute on 2 cores); ``deadline=None`` because a shared CI core makes timing noisy.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pytest
from tests.support.gguf_bytes import VT, gstr, header, kv, kv_str, tensor_info
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_tokperf.errors import ConfigError, ModelFileError, StorageError
from pytest_tokperf.hardware.units import parse_bandwidth
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.settings import OPTIONS, parse_marker
from pytest_tokperf.storage.exchange import import_datasets

FAST = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

NUMBER_TYPES = [VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.FLOAT32,
                VT.UINT64, VT.INT64, VT.FLOAT64, VT.BOOL]
KEYS = ["llama.block_count", "llama.embedding_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.context_length", "llama.expert_count",
        "llama.attention.sliding_window", "llama.vocab_size", "general.alignment",
        "tokenizer.ggml.tokens"]


def one_line(message: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message


@st.composite
def gguf_files(draw: st.DrawFn) -> bytes:
    """Mostly well-formed headers with hostile values, lying counts and random tails."""
    kvs = [kv_str("general.architecture", "llama")]
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.sampled_from(KEYS))
        kind = draw(st.sampled_from(["number", "array", "string", "junk"]))
        if kind == "number":
            vt = draw(st.sampled_from([VT.UINT32, VT.UINT64, VT.INT32, VT.FLOAT32]))
            fmt = {VT.UINT32: "<I", VT.UINT64: "<Q", VT.INT32: "<i", VT.FLOAT32: "<f"}[vt]
            value = draw(st.one_of(st.integers(0, 2**32 - 1) if fmt == "<I" else
                                   st.integers(0, 2**64 - 1) if fmt == "<Q" else
                                   st.integers(-2**31, 2**31 - 1) if fmt == "<i" else
                                   st.floats(allow_nan=True, width=32)))
            kvs.append(kv(key, vt, struct.pack(fmt, value)))
        elif kind == "array":
            item = draw(st.sampled_from(NUMBER_TYPES + [VT.STRING]))
            count = draw(st.one_of(st.integers(0, 64), st.integers(0, 2**64 - 1)))
            payload = draw(st.binary(max_size=256))
            kvs.append(kv(key, VT.ARRAY, struct.pack("<IQ", item, count) + payload))
        elif kind == "string":
            kvs.append(kv(key, VT.STRING, gstr(draw(st.binary(max_size=64)),
                                               draw(st.one_of(st.none(),
                                                              st.integers(0, 2**64 - 1))))))
        else:
            kvs.append(draw(st.binary(max_size=64)))
    tensors = [tensor_info(draw(st.sampled_from(["token_embd.weight", "blk.0.attn_q.weight",
                                                 "blk.999999999.w", "blk.x.y"])),
                           draw(st.lists(st.integers(0, 2**40), min_size=0, max_size=4)),
                           draw(st.integers(0, 40)), draw(st.integers(0, 2**40)))
               for _ in range(draw(st.integers(0, 3)))]
    n_tensors = draw(st.one_of(st.just(len(tensors)), st.integers(0, 2**64 - 1)))
    n_kv = draw(st.one_of(st.just(len(kvs)), st.integers(0, 2**64 - 1)))
    return (header(n_tensors, n_kv, draw(st.sampled_from([3, 2, 1, 4])))
            + b"".join(kvs) + b"".join(tensors) + draw(st.binary(max_size=512)))


@FAST
@given(data=gguf_files())
def test_any_gguf_is_read_or_refused_by_name(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.gguf"
        path.write_bytes(data)
        try:
            load_gguf(path)
        except ModelFileError as exc:
            one_line(str(exc))
            assert "fuzz.gguf" in str(exc)


PARSED = [spec for spec in OPTIONS if spec.parse.__name__ != "_text"]


@settings(max_examples=400, deadline=None)
@given(spec=st.sampled_from(PARSED),
       value=st.one_of(st.text(max_size=40),
                       st.sampled_from(["inf", "-inf", "nan", "1e309", "0", "-0", "1e-320",
                                        "http://[::1", "http://x:99999", "8Tb/s", "1e30GB/s",
                                        "\r\n", "engine=", "history", "cuda:99999999999"])))
def test_every_option_value_is_read_or_refused_in_one_line(spec: object, value: str) -> None:
    try:
        spec.parse(value, "the fuzzer", spec.flag)  # type: ignore[attr-defined]
    except ConfigError as exc:
        one_line(str(exc))


@FAST
@given(value=st.one_of(st.text(max_size=30), st.floats(), st.integers()))
@example(1e30)
@example("1e-30GB/s")
def test_any_bandwidth_is_read_within_bounds_or_refused(value: str | float) -> None:
    try:
        figure = parse_bandwidth(value)
    except ConfigError as exc:
        one_line(str(exc))
    else:
        assert 1e8 <= figure <= 1e14


@FAST
@given(arguments=st.dictionaries(st.sampled_from(["repetitions", "warmup", "chat",
                                                  "generate_tokens", "nope"]),
                                 st.one_of(st.integers(), st.text(max_size=10), st.booleans(),
                                           st.floats(), st.none())),
       positional=st.lists(st.integers(), max_size=2))
def test_any_marker_is_read_or_refused_in_one_line(arguments: dict[str, object],
                                                   positional: list[int]) -> None:
    try:
        parse_marker(arguments, "@pytest.mark.tokperf", tuple(positional))
    except ConfigError as exc:
        one_line(str(exc))
    else:
        assert not positional


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=8), inner,
                                                            max_size=3)),
                    max_leaves=12)


@pytest.fixture(scope="module")
def folder() -> object:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=JSON, suffix=st.sampled_from([".json", ".jsonl"]), depth=st.integers(0, 3000),
       run_line=st.booleans())
def test_any_import_file_is_read_or_refused_in_one_line(folder: Path, value: object,
                                                        suffix: str, depth: int,
                                                        run_line: bool) -> None:
    text = "[" * depth + json.dumps(value) + "]" * depth
    if suffix == ".jsonl" and run_line:
        text = json.dumps({"format": "tokperf-run/1", "run": value}) + "\n" + text
    path = folder / f"in{suffix}"
    path.write_text(text)
    try:
        import_datasets(folder / "fuzz.db", [path])
    except StorageError as exc:
        one_line(str(exc))


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_deeply_nested_import_file_is_one_line(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"nested{suffix}"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(StorageError) as caught:
        import_datasets(tmp_path / "r.db", [path])
    one_line(str(caught.value))
    assert "nested too deeply to read" in str(caught.value) or "before any" in str(caught.value)
