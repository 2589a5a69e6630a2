"""check_draft_vocab: llama.cpp's draft/target vocabulary rule, checked before any start."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.model.spec import ModelSpec, draft_spec_for
from pytest_tokperf.model.vocab import check_draft_vocab
from pytest_tokperf.model.writer import write_model

TINY = ModelSpec(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=2, n_vocab=600,
                 name="vocab-test")


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return write_model(TINY, tmp_path / "target.gguf")


def written_tokens(path: Path) -> list[str]:
    field = gguf.GGUFReader(path).get_field(gguf.Keys.Tokenizer.LIST)
    assert field is not None
    tokens = field.contents()
    assert isinstance(tokens, list)
    return [str(t) for t in tokens]


def write_vocab_only(path: Path, tokens: list[str], model: str = "llama",
                     bos: int = 1, eos: int = 2) -> Path:
    """A minimal llama GGUF: write_model's tokenizer keys (no scores or types), one tensor."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_compatible_pair_passes(target: Path, tmp_path: Path) -> None:
    draft = write_model(draft_spec_for(TINY), tmp_path / "draft.gguf")
    check_draft_vocab(target, draft)


def test_size_difference_within_128_passes(target: Path, tmp_path: Path) -> None:
    # vocab_pieces is prefix-stable, so 600 vs 728 tokens agree on every shared id.
    draft = write_model(ModelSpec(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=2,
                                  n_vocab=728), tmp_path / "draft.gguf")
    check_draft_vocab(target, draft)


def test_size_difference_over_128_fails(target: Path, tmp_path: Path) -> None:
    draft = write_model(ModelSpec(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=2,
                                  n_vocab=729), tmp_path / "draft.gguf")
    with pytest.raises(ConfigError) as info:
        check_draft_vocab(target, draft)
    message = str(info.value)
    assert "vocabulary sizes 600 (target) and 729 (draft) differ by 129" in message
    assert "at most 128" in message
    assert str(target) in message and str(draft) in message
    assert "tokperf make-model" in message


def test_token_text_mismatch_names_the_token(target: Path, tmp_path: Path) -> None:
    tokens = written_tokens(target)
    tokens[300] = tokens[300] + "x"
    draft = write_vocab_only(tmp_path / "draft.gguf", tokens)
    with pytest.raises(ConfigError) as info:
        check_draft_vocab(target, draft)
    message = str(info.value)
    assert f"token 300 is {written_tokens(target)[300]!r} in the target" in message
    assert f"but {tokens[300]!r} in the draft" in message
    assert str(target) in message and str(draft) in message


def test_tokens_below_id_5_are_not_compared(target: Path, tmp_path: Path) -> None:
    tokens = written_tokens(target)
    tokens[4] = "<changed>"
    check_draft_vocab(target, write_vocab_only(tmp_path / "draft.gguf", tokens))


def test_tokenizer_model_mismatch_fails(target: Path, tmp_path: Path) -> None:
    draft = write_vocab_only(tmp_path / "draft.gguf", written_tokens(target), model="gpt2")
    with pytest.raises(ConfigError) as info:
        check_draft_vocab(target, draft)
    message = str(info.value)
    assert "tokenizer model (tokenizer.ggml.model) is 'llama' in the target but 'gpt2'" in message
    assert str(draft) in message


@pytest.mark.parametrize(("changes", "expected"), [
    ({"bos": 3}, "the BOS token id is 1 in the target but 3 in the draft"),
    ({"eos": 3}, None),  # EOS is not added, so its id is not compared
], ids=["bos-id-differs", "eos-id-ignored-without-add-eos"])
def test_special_tokens(target: Path, tmp_path: Path, changes: dict[str, int],
                        expected: str | None) -> None:
    draft = write_vocab_only(tmp_path / "draft.gguf", written_tokens(target), **changes)
    if expected is None:
        check_draft_vocab(target, draft)
        return
    with pytest.raises(ConfigError, match=expected):
        check_draft_vocab(target, draft)


@pytest.mark.parametrize("content", [b"", b"not a gguf file at all, just some text\n" * 4],
                         ids=["empty", "text"])
def test_non_gguf_file_fails_with_its_path(target: Path, tmp_path: Path, content: bytes) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        check_draft_vocab(target, bogus)
    assert str(bogus) in str(info.value)
    assert "draft" in str(info.value)
