"""Every model file a run touches, parsed once.

The ceiling needs the tensor table, the recorder the file's identity; both come from
one ``load_gguf`` per file per run (a large model's header and hash cost seconds), or
one ``load_hf`` for a Hugging Face folder (mlx_lm, vLLM: its safetensors headers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.results import ModelInfo

if TYPE_CHECKING:
    from pytest_tokperf.model.gguf_file import GGUFModel
    from pytest_tokperf.model.hf_file import HFModel


@dataclass
class ModelFiles:
    """A per-run cache: path -> parsed model, or the error that refused it."""

    _parsed: dict[str, GGUFModel | HFModel | ModelFileError] = field(default_factory=dict)

    def load(self, path: Path) -> GGUFModel | HFModel:
        """The parsed model at ``path`` (a GGUF file, or a Hugging Face folder or a file in
        one); ``ModelFileError`` (remembered) when it is not one."""
        from pytest_tokperf.model.gguf_file import load_gguf
        from pytest_tokperf.model.hf_file import is_hf_folder, load_hf

        key = str(path)
        if key not in self._parsed:
            try:
                self._parsed[key] = load_hf(path) if is_hf_folder(path) else load_gguf(path)
            except ModelFileError as exc:
                self._parsed[key] = exc
        found = self._parsed[key]
        if isinstance(found, ModelFileError):
            raise found
        return found

    def info(self, path: Path) -> ModelInfo:
        """The identity stored beside a measurement: from the parse, or the bare file."""
        if not path.exists():
            return ModelInfo(file_name=path.name, path=str(path))
        try:
            return self.load(path).info
        except ModelFileError:
            size = path.stat().st_size if path.is_file() else None
            return ModelInfo(file_name=path.name, path=str(path), file_bytes=size)
