"""Hugging Face model folders: the safetensors tensor tables, config.json and identity.

Only headers are read, each as a stranger's file (regular, size-capped, depth-bounded JSON);
weights count at the dtype the engine serves. A refusal is one ``ModelFileError`` line
naming the file, the key and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.jsontext import loads
from pytest_tokperf.results import Footprint, ModelInfo
from pytest_tokperf.safe_files import FileRefused, read_regular, regular_size

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
               "F8_E8M0": 1, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
               "U16": 2, "U8": 1, "BOOL": 1, "C64": 8}
"""Bytes per element of each safetensors dtype."""

TORCH_DTYPES = {"float32": "F32", "float": "F32", "float16": "F16", "half": "F16",
                "bfloat16": "BF16", "float64": "F64"}
"""config.json / ``--dtype`` names -> safetensors dtype."""

FLOATS = frozenset({"F64", "F32", "F16", "BF16"})
_GATHERED = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|embed_positions|wpe)\.weight$")
_HEAD = re.compile(r"(^|\.)(lm_head|output|embed_out)\.weight$")
_EXPERT = re.compile(r"\.experts\.(\d+)\.|\.experts\.(gate_up_proj|down_proj|w1|w2|w3)")

MAX_HEADER_BYTES = 16 << 20
"""A safetensors header (real ones: a few KB to a few MB, ~100 bytes a tensor)."""
MAX_CONFIG_BYTES = 16 << 20
MAX_INDEX_BYTES = 32 << 20
"""model.safetensors.index.json: ~100 bytes a tensor (the largest models: ~10 MB)."""
MAX_JSON_VALUES = 1 << 21
"""Values (counted by ``[``, ``{`` and ``,``) one JSON file may hold: ~10 a tensor entry."""
MAX_TENSORS = 1 << 18
"""Tensors of a whole folder (the largest MoE checkpoints list ~150k)."""
MAX_SHARDS = 1 << 14
MAX_DIMS = 8
MAX_DIM = 1 << 48
CONFIG_COUNTS: dict[str, int] = {
    "num_attention_heads": 1 << 16, "num_key_value_heads": 1 << 16,
    "hidden_size": 1 << 24, "head_dim": 1 << 20,
    "sliding_window": 1 << 40, "max_position_embeddings": 1 << 40,
    "num_local_experts": 1 << 16, "num_experts": 1 << 16, "n_routed_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16, "num_experts_per_token": 1 << 16,
}
"""config.json counts the footprint reads, each a whole number from 0 to its bound."""
FIX = "download the model again (or write the file correctly)"


def _show(value: object, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters: a message stays one short line."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _refuse(path: Path, problem: str) -> NoReturn:
    raise ModelFileError(f"{str(path)!r}: {problem}; {FIX}")


def _read(path: Path, cap: int) -> bytes:
    try:
        return read_regular(path, cap=cap)
    except FileRefused as exc:
        raise ModelFileError(f"{exc}; pass the model folder with its files as "
                             f"downloaded") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc


def _json(path: Path, raw: bytes, what: str) -> Any:
    """``raw`` parsed, at most ``MAX_JSON_VALUES`` values and ``jsontext.MAX_DEPTH`` deep."""
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if values > MAX_JSON_VALUES:
        _refuse(path, f"{what} holds about {values} JSON values, more than the "
                      f"{MAX_JSON_VALUES} a model's file has")
    try:
        return loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = (str(exc).splitlines() or ["unreadable"])[0][:120]
        _refuse(path, f"{what} is not JSON ({reason})")


@dataclass(frozen=True, slots=True)
class HFTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def n_bytes(self) -> int:
        return self.n_elements * DTYPE_BYTES.get(self.dtype, 0)

    @property
    def n_rows(self) -> int:
        return self.shape[0] if self.shape else 1


@dataclass(frozen=True, slots=True)
class HFModel:
    """One Hugging Face model folder, read from its headers and config.json."""

    path: Path
    config: tuple[tuple[str, Any], ...]
    tensors: tuple[HFTensor, ...]
    file_bytes: int
    content_hash: str
    """sha256 of config.json and every safetensors header: changes when the model does."""

    def get(self, key: str, default: Any = None) -> Any:
        """``config.json``'s ``key``, looked up in ``text_config`` too (multimodal configs)."""
        config = dict(self.config)
        if key in config:
            return config[key]
        text = config.get("text_config")
        return text.get(key, default) if isinstance(text, dict) else default

    @property
    def architecture(self) -> str:
        return str(self.get("model_type") or "unknown")

    @property
    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def n_layer(self) -> int:
        return int(self.get("num_hidden_layers") or 0)

    @property
    def head_dim(self) -> int:
        explicit = self.get("head_dim")
        if isinstance(explicit, int) and explicit > 0:
            return explicit
        heads = int(self.get("num_attention_heads") or 1)
        return int(self.get("hidden_size") or 0) // max(heads, 1)

    @property
    def n_head_kv(self) -> int:
        return int(self.get("num_key_value_heads") or self.get("num_attention_heads") or 0)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(sorted({t.dtype for t in self.tensors}))

    @property
    def config_dtype(self) -> str | None:
        name = self.get("dtype") or self.get("torch_dtype")
        return TORCH_DTYPES.get(str(name).lower()) if name else None

    @property
    def context_length(self) -> int | None:
        value = self.get("max_position_embeddings")
        return int(value) if isinstance(value, int) else None

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            file_name=self.path.name,
            path=str(self.path.resolve()),
            file_bytes=self.file_bytes,
            content_hash=self.content_hash,
            architecture=self.architecture,
            parameter_count=self.parameter_count,
            quant_types=self.dtypes,
            file_type=self.config_dtype or ("/".join(self.dtypes) or None),
            context_length=self.context_length,
        )


def is_hf_folder(path: Path) -> bool:
    """A folder with a config.json and safetensors weights (or a file inside one); either
    may be a FIFO or a broken link, which ``load_hf`` then refuses by name."""
    folder = path if path.is_dir() else path.parent
    config = folder / "config.json"
    return (config.exists() or config.is_symlink()) and any(folder.glob("*.safetensors"))


def hf_folder(path: Path) -> Path:
    """The model folder for ``path``: itself, or the folder of a file inside it."""
    return path if path.is_dir() else path.parent


def _header(path: Path) -> tuple[dict[str, Any], int, int]:
    """A safetensors file's header, its file size and the header's length in bytes."""
    try:
        size = regular_size(path)
        with path.open("rb") as fh:
            prefix = fh.read(8)
            length = int.from_bytes(prefix, "little")
            raw = fh.read(length) if len(prefix) == 8 and 2 <= length <= MAX_HEADER_BYTES \
                else b""
    except FileRefused as exc:
        raise ModelFileError(f"{exc}; pass the model folder with its files as "
                             f"downloaded") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    if len(prefix) < 8 or not 2 <= length <= MAX_HEADER_BYTES:
        _refuse(path, f"not a safetensors file: its header length {length} is not between "
                      f"2 bytes and {MAX_HEADER_BYTES >> 20} MiB")
    if len(raw) < length:
        _refuse(path, f"truncated: its header says {length} bytes but the file holds "
                      f"{size - 8} after the length")
    header = _json(path, raw, "the safetensors header")
    if not isinstance(header, dict):
        _refuse(path, f"the safetensors header is {type(header).__name__}, not a JSON object")
    return header, size, length


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _tensor(path: Path, name: str, entry: object, data_bytes: int) -> HFTensor:
    """One header entry, checked as the safetensors library checks it: a known dtype, a
    shape of whole numbers, data offsets inside the file spanning exactly its bytes."""
    where = f"tensor {_show(name)}"
    if not isinstance(entry, dict):
        _refuse(path, f"{where} is {_show(entry)}, not an object with dtype, shape and "
                      f"data_offsets")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ModelFileError(f"{str(path)!r}: {where} has dtype {_show(dtype)}, which "
                             f"tokperf cannot size (it knows {', '.join(DTYPE_BYTES)})")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS \
            or not all(_whole(n, 0, MAX_DIM) for n in shape):
        _refuse(path, f"{where} has shape {_show(shape)}, not a list of at most {MAX_DIMS} "
                      f"whole numbers from 0 to 2^48")
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(_whole(n, 0, data_bytes) for n in offsets) and offsets[0] <= offsets[1]):
        _refuse(path, f"{where} has data_offsets {_show(offsets)}, not [begin, end] inside "
                      f"the file's {data_bytes} bytes of data (truncated?)")
    n_bytes = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != n_bytes:
        _refuse(path, f"{where}: shape {_show(shape)} of {dtype} takes {n_bytes} bytes but "
                      f"its data_offsets {_show(offsets)} hold {offsets[1] - offsets[0]}")
    return HFTensor(name, dtype, tuple(shape), path.name)


def _file_tensors(path: Path, digest: Any) -> tuple[list[HFTensor], int]:
    """The tensors of one safetensors file (hashed into ``digest``) and its size."""
    header, size, length = _header(path)
    digest.update(json.dumps(header, sort_keys=True).encode())
    data_bytes = size - 8 - length
    tensors = [_tensor(path, name, entry, data_bytes)
               for name, entry in header.items() if name != "__metadata__"]
    claimed = sum(t.n_bytes for t in tensors)
    if claimed > data_bytes:
        _refuse(path, f"its {len(tensors)} tensors claim {claimed} bytes but the file holds "
                      f"{data_bytes} bytes of data: their data_offsets overlap")
    return tensors, size


_SHARD = re.compile(r"[^/\\\x00]+\.safetensors")


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if not (index.exists() or index.is_symlink()):
        return sorted(folder.glob("*.safetensors"))
    data = _json(index, _read(index, MAX_INDEX_BYTES), "the index")
    mapping = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        _refuse(index, f"'weight_map' is {_show(mapping)}, not an object of tensor name -> "
                       f".safetensors file")
    names: set[str] = set()
    for tensor, name in mapping.items():
        if not isinstance(name, str) or not _SHARD.fullmatch(name) or name.startswith("."):
            _refuse(index, f"'weight_map' maps {_show(tensor)} to {_show(name)}, not the "
                           f"name of a .safetensors file in this folder")
        names.add(name)
    if len(names) > MAX_SHARDS:
        _refuse(index, f"'weight_map' names {len(names)} files, more than the {MAX_SHARDS} "
                       f"a model is split into")
    return [folder / name for name in sorted(names)]


def _check_config(model: HFModel, config_path: Path) -> None:
    """Every count the footprint reads, typed and bounded (``CONFIG_COUNTS``)."""
    layers = model.get("num_hidden_layers")
    if layers is not None and not _whole(layers, 0, len(model.tensors)):
        raise ModelFileError(
            f"{str(config_path)!r} says num_hidden_layers {_show(layers)}, which its weights "
            f"cannot hold (each layer has at least one tensor; the safetensors files list "
            f"{len(model.tensors)}): the config is corrupt or belongs to another model; "
            f"download it again")
    for key, bound in CONFIG_COUNTS.items():
        value = model.get(key)
        if value is not None and not _whole(value, 0, bound):
            _refuse(config_path, f"{key!r} is {_show(value)}, not a whole number from 0 to "
                                 f"{bound}")
    for key, kind in (("model_type", str), ("tie_word_embeddings", bool),
                      ("layer_types", list)):
        value = model.get(key)
        if value is not None and not isinstance(value, kind):
            _refuse(config_path, f"{key!r} is {_show(value)}, not a {kind.__name__}")


def load_hf(path: str | Path) -> HFModel:
    """Read a model folder's config.json and safetensors headers (ModelFileError if not one)."""
    folder = hf_folder(Path(path).expanduser())
    config_path = folder / "config.json"
    if not (config_path.exists() or config_path.is_symlink()):
        raise ModelFileError(f"{str(folder)!r} has no config.json: not a Hugging Face model "
                             f"folder; pass the folder mlx_lm or vLLM loads, or a .gguf file")
    raw_config = _read(config_path, MAX_CONFIG_BYTES)
    config = _json(config_path, raw_config, "config.json")
    if not isinstance(config, dict):
        _refuse(config_path, f"config.json is {type(config).__name__}, not a JSON object")
    files = _weight_files(folder)
    if not files:
        raise ModelFileError(f"{str(folder)!r} has no *.safetensors weights; tokperf reads "
                             f"bytes per token from safetensors headers only")
    digest = hashlib.sha256(raw_config)
    tensors: list[HFTensor] = []
    seen: dict[str, str] = {}
    total = 0
    for file in files:
        found, size = _file_tensors(file, digest)
        total += size
        for t in found:
            if seen.setdefault(t.name, file.name) != file.name:
                _refuse(file, f"tensor {_show(t.name)} is in {seen[t.name]!r} too")
        tensors += found
        if len(tensors) > MAX_TENSORS:
            _refuse(file, f"the folder's safetensors files list more than {MAX_TENSORS} "
                          f"tensors")
    model = HFModel(path=folder, config=tuple(sorted(config.items())), tensors=tuple(tensors),
                    file_bytes=total, content_hash=digest.hexdigest())
    _check_config(model, config_path)
    return model


def served_dtype(text: str | None) -> str | None:
    """``float32`` / ``--dtype=half`` / ``F16`` -> the safetensors name; None if unknown or auto."""
    if not text:
        return None
    key = text.strip().lower()
    if key.upper() in FLOATS:
        return key.upper()
    return TORCH_DTYPES.get(key)


def _experts(model: HFModel) -> tuple[int, int]:
    count = model.get("num_local_experts") or model.get("num_experts") or model.get(
        "n_routed_experts") or 0
    used = model.get("num_experts_per_tok") or model.get("num_experts_per_token") or 0
    return int(count), int(used)


def _layer_windowed(model: HFModel) -> list[bool]:
    types = model.get("layer_types")
    n = model.n_layer
    if isinstance(types, list) and len(types) == n and model.get("sliding_window"):
        return [t == "sliding_attention" for t in types]
    return [False] * n


def hf_kv_bytes(model: HFModel, depth_tokens: int, kv_dtype: str) -> int:
    """KV cache bytes one decoded token reads with ``depth_tokens`` earlier positions."""
    per_layer = 2 * model.n_head_kv * model.head_dim * DTYPE_BYTES[kv_dtype]
    window = int(model.get("sliding_window") or 0)
    return sum((min(depth_tokens, window) if windowed else depth_tokens) * per_layer
               for windowed in _layer_windowed(model))


def hf_footprint(model: HFModel, depth_tokens: int = 0, *, weight_dtype: str | None = None,
                 kv_dtype: str | None = None) -> Footprint:
    """Bytes one decode step reads for a Hugging Face folder at the served dtypes."""
    if depth_tokens < 0:
        raise ModelFileError(f"depth_tokens={depth_tokens!r} must be >= 0")
    names = {t.name for t in model.tensors}
    tied = bool(model.get("tie_word_embeddings", False)) or not any(
        _HEAD.search(n) for n in names)

    def size(t: HFTensor) -> int:
        if weight_dtype is not None and t.dtype in FLOATS:
            return t.n_elements * DTYPE_BYTES[weight_dtype]
        return t.n_bytes

    count, used = _experts(model)
    warnings: list[str] = []
    dense_bytes = dense_params = expert_bytes = expert_params = 0
    saw_experts = False
    for t in model.tensors:
        if _GATHERED.search(t.name) and not (tied and "embed" in t.name):
            dense_bytes += size(t) // max(t.n_rows, 1)
            dense_params += t.n_elements // max(t.n_rows, 1)
        elif _EXPERT.search(t.name) and "shared_expert" not in t.name:
            saw_experts = True
            expert_bytes += size(t)
            expert_params += t.n_elements
        else:
            dense_bytes += size(t)
            dense_params += t.n_elements
    if saw_experts:
        if count <= 0 or not 0 < used <= count:
            warnings.append(f"{model.path.name}: config.json gives experts {count!r} and "
                            f"experts per token {used!r}; counted every expert (an upper bound)")
        else:
            expert_bytes = expert_bytes * used // count
            expert_params = expert_params * used // count
    kv_type = kv_dtype or weight_dtype or model.config_dtype or "F16"
    if depth_tokens > 0:
        per_position = round(hf_kv_bytes(model, depth_tokens, kv_type) / depth_tokens)
    else:
        per_position = 2 * model.n_head_kv * model.head_dim * DTYPE_BYTES[kv_type] * model.n_layer
    if model.n_layer <= 0 or model.head_dim <= 0:
        warnings.append(f"{model.path.name}: config.json lacks num_hidden_layers or the head "
                        f"size; the KV cache was not counted")
    return Footprint(
        architecture=model.architecture, weights_bytes=dense_bytes + expert_bytes,
        kv_bytes_per_position=per_position, depth_tokens=depth_tokens,
        kv_type=kv_type.lower(), resident_bytes=sum(size(t) for t in model.tensors),
        active_parameters=dense_params + expert_params, total_parameters=model.parameter_count,
        expert_count=count if saw_experts else 0, experts_used=used if saw_experts else 0,
        tied_output=tied, warnings=tuple(warnings),
    )

