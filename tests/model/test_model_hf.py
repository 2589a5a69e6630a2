"""Hugging Face model folders: the writer (safetensors, config, tokenizer) and the bytes
per token read from their headers, checked against the GGUF of the same shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_tokperf.bench.session import local_model
from pytest_tokperf.cli import main
from pytest_tokperf.errors import ConfigError, ModelFileError
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.model.hf_file import (
    hf_footprint,
    hf_kv_bytes,
    is_hf_folder,
    load_hf,
    served_dtype,
)
from pytest_tokperf.model.hf_writer import SPECIALS, write_hf_model, write_safetensors
from pytest_tokperf.model.spec import ENGINES_MODEL, ModelSpec
from pytest_tokperf.model.writer import write_model

SMALL = replace(ENGINES_MODEL, n_layer=2, n_embd=128, n_ff=256, n_head=2, n_head_kv=1,
                n_vocab=1024, name="hf-test")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hf_model(SMALL, tmp_path_factory.mktemp("hf") / "model")


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(SMALL, tmp_path_factory.mktemp("gguf") / "model.gguf")


def test_the_folder_holds_what_mlx_lm_and_vllm_load(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"],
            config["num_key_value_heads"]) == (2, 128, 1024, 1)
    assert "<think>" in json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    raw = (folder / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert header["model.embed_tokens.weight"] == {"dtype": "F16", "shape": [1024, 128],
                                                   "data_offsets": [0, 1024 * 128 * 2]}
    assert is_hf_folder(folder) and local_model(folder / "model.safetensors") == folder


def test_the_safetensors_data_is_what_the_header_says(tmp_path: Path) -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = write_safetensors(tmp_path / "t.safetensors", [
        ("a", (2, 3), np.dtype(np.float32), lambda: values),
        ("b", (4,), np.dtype(np.float16), lambda: np.ones(4, dtype=np.float16))])
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    start, stop = header["a"]["data_offsets"]
    data = np.frombuffer(raw[8 + size + start:8 + size + stop], dtype="<f4").reshape(2, 3)
    assert (data == values).all()
    assert header["b"] == {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]}


def test_the_tokenizer_has_every_id_and_each_decodes_to_whole_characters(folder: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == SMALL.n_vocab
    assert [tokenizer.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS)))
    # No id is a piece of a UTF-8 character: an engine never holds bytes back, so one
    # streamed chunk is one token whatever a random model samples
    texts = [tokenizer.decode([i], skip_special_tokens=False) for i in range(SMALL.n_vocab)]
    assert not [t for t in texts if "\ufffd" in t]
    assert len(tokenizer.encode(" time year people way").ids) == 4


def test_bytes_per_token_match_the_gguf_of_the_same_shape(folder: Path, gguf: Path) -> None:
    hf = hf_footprint(load_hf(folder), depth_tokens=100)
    ref = footprint(load_gguf(gguf), depth_tokens=100)
    # GGUF keeps the norms in F32, the HF folder in F16: every other byte is the same
    norms = (2 * SMALL.n_layer + 1) * SMALL.n_embd
    assert hf.weights_bytes == ref.weights_bytes - norms * 2
    assert hf.kv_bytes_per_position == ref.kv_bytes_per_position == 2 * 2 * 1 * 64 * 2
    assert hf.active_parameters == ref.active_parameters
    assert hf.total_parameters == ref.total_parameters and not hf.tied_output


def test_the_served_dtype_counts_instead_of_the_files(folder: Path) -> None:
    model = load_hf(folder)
    half = hf_footprint(model)
    full = hf_footprint(model, weight_dtype=served_dtype("float32"))
    assert full.weights_bytes == 2 * half.weights_bytes
    assert full.kv_bytes_per_position == 2 * half.kv_bytes_per_position
    assert (full.kv_type, half.kv_type) == ("f32", "f16")
    assert served_dtype("auto") is None and served_dtype("half") == "F16"


def test_a_tied_head_streams_the_whole_embedding(tmp_path: Path) -> None:
    spec = replace(SMALL, tied_output=True)
    model = load_hf(write_hf_model(spec, tmp_path / "tied"))
    untied = hf_footprint(load_hf(write_hf_model(SMALL, tmp_path / "untied")))
    tied = hf_footprint(model)
    assert tied.tied_output
    assert "lm_head.weight" not in {t.name for t in model.tensors}
    # untied: one embedding row plus the whole head; tied: the embedding read whole as head
    assert tied.weights_bytes == untied.weights_bytes - 128 * 2
    assert tied.active_parameters == untied.active_parameters - 128


def _moe_folder(tmp_path: Path, config: dict[str, object]) -> Path:
    tmp_path.mkdir()
    f16 = np.dtype(np.float16)

    def make(shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
        return lambda: np.zeros(shape, dtype=np.float16)

    entries = [("model.embed_tokens.weight", (100, 8), f16, make((100, 8))),
               ("lm_head.weight", (100, 8), f16, make((100, 8))),
               ("model.layers.0.mlp.gate.weight", (4, 8), f16, make((4, 8))),
               ("model.layers.0.mlp.shared_expert.up_proj.weight", (16, 8), f16, make((16, 8)))]
    entries += [(f"model.layers.0.mlp.experts.{e}.up_proj.weight", (16, 8), f16, make((16, 8)))
                for e in range(4)]
    write_safetensors(tmp_path / "model.safetensors", entries)
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_moe", "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1, "hidden_size": 8, "dtype": "bfloat16", **config}))
    return tmp_path


def test_moe_experts_count_by_the_share_used_per_token(tmp_path: Path) -> None:
    fp = hf_footprint(load_hf(_moe_folder(tmp_path / "a", {"num_experts": 4,
                                                           "num_experts_per_tok": 2})))
    row, head, router, shared, expert = 8 * 2, 100 * 8 * 2, 4 * 8 * 2, 16 * 8 * 2, 16 * 8 * 2
    assert fp.weights_bytes == row + head + router + shared + 2 * expert
    assert (fp.expert_count, fp.experts_used) == (4, 2)
    assert fp.kv_bytes_per_position == 2 * 1 * 4 * 2 and fp.kv_type == "bf16"
    unknown = hf_footprint(load_hf(_moe_folder(tmp_path / "b", {})))
    assert unknown.weights_bytes == row + head + router + shared + 4 * expert
    assert "counted every expert (an upper bound)" in unknown.warnings[0]


def test_sliding_window_layers_read_at_most_the_window(tmp_path: Path) -> None:
    folder = _moe_folder(tmp_path / "w", {"num_hidden_layers": 2, "sliding_window": 10,
                                          "layer_types": ["sliding_attention", "full_attention"],
                                          "num_experts": 4, "num_experts_per_tok": 2})
    model = load_hf(folder)
    per_layer = 2 * 1 * 4 * 2
    assert hf_kv_bytes(model, 100, "BF16") == 10 * per_layer + 100 * per_layer
    assert hf_kv_bytes(model, 5, "BF16") == 2 * 5 * per_layer
    fp = hf_footprint(model, depth_tokens=100)
    assert fp.kv_bytes_per_position == round((10 + 100) * per_layer / 100)


def test_what_is_not_a_model_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="has no config.json: not a Hugging Face model"):
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFileError, match="has no \\*.safetensors weights"):
        load_hf(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ModelFileError, match="not a safetensors file: its header length"):
        load_hf(tmp_path)


def test_only_dense_llama_shapes_in_f16_or_f32_have_an_hf_form(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="writes F16 or F32 tensors, not 'Q8_0'"):
        write_hf_model(replace(SMALL, tensor_type="Q8_0"), tmp_path / "q")
    moe = ModelSpec(n_layer=1, n_embd=64, n_ff=64, n_head=2, n_head_kv=2, n_vocab=300,
                    architecture="qwen2moe", expert_count=2, expert_used_count=1)
    with pytest.raises(ConfigError, match="dense llama shapes only.*'qwen2moe'.*--format gguf"):
        write_hf_model(moe, tmp_path / "moe")


def test_make_model_writes_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    assert main(["make-model", "--format", "hf", "--preset", "engines", "--layers", "1",
                 "--vocab", "400", "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert load_hf(out).n_layer == 1 and load_hf(out).get("vocab_size") == 400


def test_predict_reads_a_folder(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", "10GB/s", "--model", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["weights_bytes_per_token"] == hf_footprint(load_hf(folder)).weights_bytes


@pytest.mark.parametrize("layers", [2**40, 1e30, "lots", -1])
def test_a_layer_count_the_weights_cannot_hold_is_refused(
    tmp_path: Path, folder: Path, layers: object
) -> None:
    """num_hidden_layers = 2^40 built a per-layer list ([False] * n): MemoryError; a string
    or a float was a ValueError or OverflowError traceback."""
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "m"))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    import re

    with pytest.raises(ModelFileError, match=re.escape(f"says num_hidden_layers {layers!r}, "
                                                       f"which its weights cannot hold")):
        footprint_of = load_hf(copy)
        hf_footprint(footprint_of, 4096)


def test_a_salted_prompt_shares_no_more_than_a_token_with_the_prompts_before_it(
    folder: Path,
) -> None:
    """What a prefix cache (mlx_lm's, SGLang's) may serve of a cold prompt: with tags all
    from the digest, 74 of these 9560 prompts shared 2-3 tokens with one of the 10 before
    them on this tokenizer (two tags alike in their first two characters), and mlx_lm
    served them: "engine reused 2 cached prompt tokens: prefill is not cold"."""
    from tokenizers import Tokenizer

    from pytest_tokperf.bench.run import SALTS_PER_BENCH, salt_seed
    from pytest_tokperf.engines.wire import text_prompt

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def shared(a: list[int], b: list[int]) -> int:
        return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    worst = []
    for run in range(40):  # a run: 4 tests, 3 tok_bench calls each, 20 prompts a call
        base = salt_seed(f"run-{run}")
        salts = [base + SALTS_PER_BENCH * test + 1000 * call + index
                 for test in range(4) for call in range(3) for index in range(20)]
        ids = [tokenizer.encode(text_prompt(24, s)).ids for s in salts]
        worst += [max(shared(ids[j], ids[k]) for k in range(max(0, j - 10), j))
                  for j in range(1, len(ids))]
    assert max(worst) <= 1, sorted(worst)[-5:]
