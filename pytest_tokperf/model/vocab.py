"""Refuse a draft model that llama-server could not pair with its target, before any start
(llama.cpp's ``common_speculative_are_compatible`` on the GGUF metadata).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf

from pytest_tokperf.errors import ConfigError, ModelFileError
from pytest_tokperf.model.gguf_header import GGUFField, read_header

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

# (add_bos, bos_id, eos_id) assumed for a missing key (approximates llama-vocab.cpp)
_DEFAULTS: dict[str, tuple[bool, int | None, int | None]] = {
    "llama": (True, 1, 2),
    "gpt2": (False, 11, 11),
}
_FIX = ("use a draft from the same model family / tokenizer, e.g. `tokperf make-model` "
        "writes drafts with the target's vocabulary")


@dataclass(frozen=True, slots=True)
class _Vocab:
    model: str
    add_bos: bool
    bos: int | None
    add_eos: bool
    eos: int | None
    tokens: list[bytes]


def _scalar(fields: dict[str, GGUFField], key: str) -> object:
    field = fields.get(key)
    return None if field is None or field.is_array else field.value


def _special_id(
    fields: dict[str, GGUFField], key: str, default: int | None, n_tokens: int
) -> int | None:
    value = _scalar(fields, key)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    # llama.cpp keeps the default for an id outside the vocabulary (with a warning).
    return value if 0 <= value < n_tokens else default


def _read_vocab(path: Path, role: str) -> _Vocab:
    try:
        header = read_header(path, keep_string_arrays={gguf.Keys.Tokenizer.LIST})
    except ModelFileError as exc:
        raise ConfigError(
            f"cannot check the {role} model for speculative decoding: {exc}"
        ) from exc
    fields = dict(header.fields)
    model = _scalar(fields, gguf.Keys.Tokenizer.MODEL)
    field = fields.get(gguf.Keys.Tokenizer.LIST)
    if (not isinstance(model, str) or field is None or field.item_type != gguf.GGUFValueType.STRING
            or not isinstance(field.value, tuple)):
        raise ConfigError(
            f"{role} model {str(path)!r} has no tokenizer ({gguf.Keys.Tokenizer.MODEL!r} and "
            f"{gguf.Keys.Tokenizer.LIST!r}), so llama-server cannot load it; {_FIX}"
        )
    model = "no_vocab" if model == "none" else model  # llama.cpp maps both to NONE
    tokens = [t for t in field.value if isinstance(t, bytes)]
    add_bos, bos, eos = _DEFAULTS.get(model, (False, None, None))
    add_bos_value = _scalar(fields, gguf.Keys.Tokenizer.ADD_BOS)
    add_eos_value = _scalar(fields, gguf.Keys.Tokenizer.ADD_EOS)
    return _Vocab(
        model=model,
        add_bos=add_bos_value if isinstance(add_bos_value, bool) else add_bos,
        bos=_special_id(fields, gguf.Keys.Tokenizer.BOS_ID, bos, len(tokens)),
        add_eos=add_eos_value if isinstance(add_eos_value, bool) else False,
        eos=_special_id(fields, gguf.Keys.Tokenizer.EOS_ID, eos, len(tokens)),
        tokens=tokens,
    )


def _text(token: bytes) -> str:
    return token.decode("utf-8", errors="replace")


def _mismatch(tgt: _Vocab, dft: _Vocab) -> str | None:
    """The first of llama.cpp's rules the pair breaks, in words, or None."""
    if tgt.model != dft.model:
        return (f"the tokenizer model ({gguf.Keys.Tokenizer.MODEL}) is {tgt.model!r} in the "
                f"target but {dft.model!r} in the draft")
    for name, t_add, d_add, t_id, d_id in (("BOS", tgt.add_bos, dft.add_bos, tgt.bos, dft.bos),
                                           ("EOS", tgt.add_eos, dft.add_eos, tgt.eos, dft.eos)):
        if t_add != d_add:
            return (f"add-{name} is {t_add} in the target but {d_add} in the draft "
                    f"(tokenizer.ggml.add_{name.lower()}_token)")
        if t_add and t_id != d_id:
            return (f"the {name} token id is {t_id} in the target but {d_id} in the draft "
                    f"(tokenizer.ggml.{name.lower()}_token_id)")
    n_tgt, n_dft = len(tgt.tokens), len(dft.tokens)
    if abs(n_tgt - n_dft) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return (f"vocabulary sizes {n_tgt} (target) and {n_dft} (draft) differ by "
                f"{abs(n_tgt - n_dft)}, llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}")
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(n_tgt, n_dft)):
        if tgt.tokens[i] != dft.tokens[i]:
            return (f"token {i} is {_text(tgt.tokens[i])!r} in the target but "
                    f"{_text(dft.tokens[i])!r} in the draft")
    return None


def check_draft_vocab(target: Path, draft: Path) -> None:
    """Raise ``ConfigError`` unless llama-server would accept ``draft`` for ``target``."""
    target, draft = Path(target), Path(draft)
    problem = _mismatch(_read_vocab(target, "target"), _read_vocab(draft, "draft"))
    if problem is not None:
        raise ConfigError(
            f"draft model {str(draft)!r} cannot speculate for target model {str(target)!r}: "
            f"{problem}, so llama-server would refuse the pair "
            f"(common_speculative_are_compatible); {_FIX}"
        )
