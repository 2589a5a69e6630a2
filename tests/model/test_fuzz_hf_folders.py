"""Property-based fuzzing (hypothesis) of Hugging Face folders: config.json, the
safetensors index and safetensors headers, mostly well-formed with hostile values.

The property: the folder is read and its footprint computed, or it is refused with one
``ModelFileError`` line naming a file of the folder; never another exception, and the
reader writes nothing. Small example counts (the file runs in well under 30 s on 2
cores); ``deadline=None`` because a shared core makes timing noisy.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.hf_file import (
    CONFIG_COUNTS,
    DTYPE_BYTES,
    hf_footprint,
    load_hf,
)

FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=6), st.sampled_from([0, 1, 2, 8, 2**31, 2**63, -1]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
CONFIG_KEYS = [*CONFIG_COUNTS, "num_hidden_layers", "model_type", "tie_word_embeddings",
               "layer_types", "dtype", "torch_dtype", "text_config", "vocab_size"]
NAMES = ["model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.experts.0.w1.weight",
         "model.layers.0.self_attn.q_proj.weight", "__metadata__", ""]


@st.composite
def configs(draw: st.DrawFn, hostile: bool) -> bytes:
    config: dict[str, Any] = {"model_type": "llama", "num_hidden_layers": 1,
                              "hidden_size": 8, "num_attention_heads": 2}
    if not hostile:
        return json.dumps({**config, "num_key_value_heads": draw(st.integers(0, 4))}).encode()
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(CONFIG_KEYS))
        config[key] = draw(st.one_of(st.integers(0, 64), SCALARS, VALUES, st.dictionaries(
            st.sampled_from(CONFIG_KEYS), SCALARS, max_size=3)))
    depth = {8: 70, 9: 3000}.get(draw(st.integers(0, 9)), 0)
    return ("[" * depth + json.dumps(config) + "]" * depth).encode()


@st.composite
def safetensors_files(draw: st.DrawFn, hostile: bool) -> bytes:
    """A header of tensors (hostile: one field of some hostile, lying offsets, junk) and a
    data section that holds the sound ones (hostile: or some other size)."""
    header: dict[str, Any] = {}
    offset = 0
    for index in range(draw(st.integers(1, 4))):
        shape: Any = draw(st.lists(st.integers(0, 16), max_size=3))
        dtype: Any = draw(st.sampled_from(list(DTYPE_BYTES)))
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        offsets: Any = [offset, offset + size]
        offset += size
        entry: Any = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        if hostile and draw(st.booleans()):
            field = draw(st.sampled_from(["shape", "dtype", "data_offsets", "entry"]))
            value = draw(st.one_of(SCALARS, VALUES, st.lists(SCALARS, max_size=3),
                                   st.lists(st.integers(-2**64, 2**64), max_size=9)))
            entry = value if field == "entry" else {**entry, field: value}
        name = draw(st.sampled_from(NAMES)) if hostile else f"model.layers.{index}.w"
        header[name] = entry
    raw = json.dumps(header).encode()
    length, data = len(raw), offset
    if hostile:
        raw = draw(st.one_of(st.just(raw), st.just(raw), st.binary(max_size=32),
                             st.just(b"[" * 5000 + b"]" * 5000)))
        length = draw(st.one_of(st.just(len(raw)), st.integers(0, 2**64 - 1)))
        data = draw(st.one_of(st.just(offset), st.integers(0, 4096)))
    return length.to_bytes(8, "little") + raw + bytes(data)


@st.composite
def indexes(draw: st.DrawFn, hostile: bool) -> bytes | None:
    if not hostile:
        return draw(st.sampled_from([None, json.dumps(
            {"weight_map": {"model.layers.0.w": "model.safetensors"}}).encode()]))
    if draw(st.booleans()):
        return draw(st.binary(max_size=32))
    weight_map = draw(st.one_of(
        st.dictionaries(st.sampled_from(NAMES), st.one_of(
            st.sampled_from(["model.safetensors", "../model.safetensors", "/x.safetensors",
                             "missing.safetensors", ".safetensors", "a\x00.safetensors"]),
            SCALARS), max_size=3),
        VALUES))
    return json.dumps({"weight_map": weight_map}).encode()


@st.composite
def folders(draw: st.DrawFn) -> tuple[bytes, bytes, bytes | None]:
    """A sound folder, or one with hostile parts (each part hostile or not)."""
    hostile = draw(st.sampled_from(["none", "config", "weights", "index", "all"]))
    return (draw(configs(hostile in ("config", "all"))),
            draw(safetensors_files(hostile in ("weights", "all"))),
            draw(indexes(hostile in ("index", "all"))))


@FAST
@given(folder=folders())
@example(folder=(b'{"num_hidden_layers": 1, "hidden_size": "lots"}',
                 (2).to_bytes(8, "little") + b"{}", None))
@example(folder=(b"{}", (60).to_bytes(8, "little")
                 + b'{"w": {"dtype": "F16", "shape": [Infinity], "data_offsets": [0, 2]}}',
                 None))
def test_any_hf_folder_is_read_or_refused_in_one_line(
    folder: tuple[bytes, bytes, bytes | None]
) -> None:
    config, weights, index = folder
    with tempfile.TemporaryDirectory() as name:
        root = Path(name) / "model"
        root.mkdir()
        (root / "config.json").write_bytes(config)
        (root / "model.safetensors").write_bytes(weights)
        if index is not None:
            (root / "model.safetensors.index.json").write_bytes(index)
        before = sorted(Path(name).rglob("*"))
        try:
            model = load_hf(root)
            fp = hf_footprint(model, 4096)
        except ModelFileError as exc:
            event("refused")
            message = str(exc)
            assert message and "\n" not in message and "Traceback" not in message
            assert str(root) in message, message
            assert len(message) < 600, message
        else:
            event("read")
            assert 0 <= fp.weights_bytes <= len(weights)
            assert fp.kv_bytes_per_position >= 0 and model.n_layer <= len(model.tensors)
        assert sorted(Path(name).rglob("*")) == before
