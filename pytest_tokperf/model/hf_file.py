"""Hugging Face model folders: the safetensors tensor tables, config.json and identity.

Only headers are read; weights count at the dtype the engine serves.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.results import Footprint, ModelInfo

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
               "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
"""Bytes per element of each safetensors dtype."""

TORCH_DTYPES = {"float32": "F32", "float": "F32", "float16": "F16", "half": "F16",
                "bfloat16": "BF16", "float64": "F64"}
"""config.json / ``--dtype`` names -> safetensors dtype."""

FLOATS = frozenset({"F64", "F32", "F16", "BF16"})
_GATHERED = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|embed_positions|wpe)\.weight$")
_HEAD = re.compile(r"(^|\.)(lm_head|output|embed_out)\.weight$")
_EXPERT = re.compile(r"\.experts\.(\d+)\.|\.experts\.(gate_up_proj|down_proj|w1|w2|w3)")
_MAX_HEADER = 100 << 20


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
    """A folder with a config.json and safetensors weights (or a file inside one)."""
    folder = path if path.is_dir() else path.parent
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def hf_folder(path: Path) -> Path:
    """The model folder for ``path``: itself, or the folder of a file inside it."""
    return path if path.is_dir() else path.parent


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON table at the start of a safetensors file (no tensor data is read)."""
    try:
        with path.open("rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 2 <= size <= _MAX_HEADER:
                raise ModelFileError(
                    f"{str(path)!r} is not a safetensors file: its header length {size} "
                    f"is not between 2 bytes and 100 MB")
            raw = fh.read(size)
    except OSError as exc:
        raise ModelFileError(f"cannot read {str(path)!r}: {exc}") from exc
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ModelFileError(f"{str(path)!r}: the safetensors header is not JSON ({exc})") \
            from exc
    if not isinstance(header, dict):
        raise ModelFileError(f"{str(path)!r}: the safetensors header is not a JSON object")
    return header


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            mapping = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError, AttributeError) as exc:
            raise ModelFileError(f"cannot read {str(index)!r}: {exc}") from exc
        return [folder / name for name in sorted(set(mapping.values()))]
    return sorted(folder.glob("*.safetensors"))


def load_hf(path: str | Path) -> HFModel:
    """Read a model folder's config.json and safetensors headers (ModelFileError if not one)."""
    folder = hf_folder(Path(path).expanduser())
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelFileError(f"{str(folder)!r} has no config.json: not a Hugging Face model "
                             f"folder; pass the folder mlx_lm or vLLM loads, or a .gguf file")
    try:
        config_text = config_path.read_text()
        config = json.loads(config_text)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {str(config_path)!r}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelFileError(f"{str(config_path)!r} is not a JSON object")
    files = _weight_files(folder)
    if not files:
        raise ModelFileError(f"{str(folder)!r} has no *.safetensors weights; tokperf reads "
                             f"bytes per token from safetensors headers only")
    digest = hashlib.sha256(config_text.encode())
    tensors: list[HFTensor] = []
    total = 0
    for file in files:
        header = read_safetensors_header(file)
        digest.update(json.dumps(header, sort_keys=True).encode())
        total += file.stat().st_size
        for name, entry in header.items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            dtype = str(entry.get("dtype"))
            if dtype not in DTYPE_BYTES:
                raise ModelFileError(f"{str(file)!r}: tensor {name!r} has dtype {dtype!r}, "
                                     f"which tokperf cannot size")
            tensors.append(HFTensor(name, dtype, tuple(int(n) for n in entry.get("shape", ())),
                                    file.name))
    layers = config.get("num_hidden_layers")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int)
                               or not 0 <= layers <= len(tensors)):
        raise ModelFileError(
            f"{str(config_path)!r} says num_hidden_layers {layers!r}, which its weights cannot "
            f"hold (each layer has at least one tensor; the safetensors files list "
            f"{len(tensors)}): the config is corrupt or belongs to another model; download it "
            f"again")
    return HFModel(path=folder, config=tuple(sorted(config.items())), tensors=tuple(tensors),
                   file_bytes=total, content_hash=digest.hexdigest())


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
    per_layer = 2 * model.n_head_kv * model.head_dim * DTYPE_BYTES[kv_type]
    if depth_tokens > 0:
        per_position = round(hf_kv_bytes(model, depth_tokens, kv_type) / depth_tokens)
    else:
        per_position = per_layer * model.n_layer
    if model.n_layer <= 0 or model.head_dim <= 0:
        warnings.append(f"{model.path.name}: config.json lacks num_hidden_layers or the head "
                        f"size; the KV cache was not counted")
    return Footprint(
        architecture=model.architecture,
        weights_bytes=dense_bytes + expert_bytes,
        kv_bytes_per_position=per_position,
        depth_tokens=depth_tokens,
        kv_type=kv_type.lower(),
        resident_bytes=sum(size(t) for t in model.tensors),
        active_parameters=dense_params + expert_params,
        total_parameters=model.parameter_count,
        expert_count=count if saw_experts else 0,
        experts_used=used if saw_experts else 0,
        tied_output=tied,
        warnings=tuple(warnings),
    )

