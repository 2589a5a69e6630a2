"""Hostile model paths and counts: a FIFO is refused, not opened; a block count the file
cannot hold (a layer has at least one tensor: more than it lists, or than its header
could list) is refused before any per-layer tuple is built.

A 20 KB GGUF with ``llama.block_count`` = 2^32-1, 2^60 or 1e30, or a tensor named
``blk.999999999.w``, used to build ``(value,) * n_layer``: MemoryError or
OverflowError tracebacks. Memory is checked with tracemalloc (no timing assertions;
``bounded`` only turns a hang into a failure).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from tests.support.gguf_bytes import QT, VT, kv, kv_str, kv_u32, write_tensors
from tests.transport.test_engines_faults import bounded
from tests.model.test_model_crafted import refused

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.gguf_file import MAX_LAYERS, load_gguf

ARCH = kv_str("general.architecture", "llama")
BLOCKS = "llama.block_count"
TENSORS = [("token_embd.weight", (64, 256), QT.F16), ("blk.0.attn_q.weight", (64, 64), QT.F16),
           ("blk.1.attn_q.weight", (64, 64), QT.F16)]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_without_opening_it(fifo: Path) -> None:
    with pytest.raises(ModelFileError, match="is not a regular file"):
        bounded(lambda: load_gguf(fifo), 1.0)


@pytest.mark.parametrize("target", ["m.gguf", "missing.gguf"], ids=["loop", "dangling"])
def test_a_symlink_that_leads_nowhere_says_so(tmp_path: Path, target: str) -> None:
    """It said the file "does not exist", while `ls` shows it."""
    link = tmp_path / "m.gguf"
    link.symlink_to(target)
    with pytest.raises(ModelFileError, match="is a symbolic link that leads nowhere"):
        load_gguf(link)


def test_tokperf_predict_on_a_fifo_ends_with_one_line(fifo: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest_tokperf.cli.main", "predict",
                           "--hardware", "1000GB/s", "--model", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode not in (0, 5)
    assert "Traceback" not in done.stderr
    assert "is not a regular file" in done.stdout + done.stderr


@pytest.mark.parametrize("count", [
    kv_u32(BLOCKS, 2**32 - 1),
    kv(BLOCKS, VT.UINT64, struct.pack("<Q", 2**60)),
    kv(BLOCKS, VT.FLOAT32, struct.pack("<f", 1e30)),
    kv_u32(BLOCKS, MAX_LAYERS + 1),
], ids=["u32-max", "2^60", "1e30-float", "max+1"])
def test_a_block_count_the_file_cannot_hold_is_refused(tmp_path: Path, count: bytes) -> None:
    path = write_tensors(tmp_path / "m.gguf", [ARCH, count], TENSORS)
    message = refused(path, "layers by its key 'llama.block_count', more than the file can "
                            r"hold \(\d+: each layer has at least one tensor; it lists 3, and "
                            r"its \d+-byte header could list at most \d+ tensor entries")
    assert "corrupt or crafted" in message


@pytest.mark.parametrize("index", ["999999999", "9" * 1000])
def test_a_tensor_index_the_file_cannot_hold_is_refused(tmp_path: Path, index: str) -> None:
    tensors = [*TENSORS, (f"blk.{index}.w", (64, 64), QT.F16)]
    path = write_tensors(tmp_path / "m.gguf", [ARCH], tensors)
    refused(path, r"layers by its tensor names \(blk.N.\*\), more than the file can hold")


@pytest.mark.parametrize("count", [1000, MAX_LAYERS])
def test_a_block_count_above_the_tensors_the_file_could_list_is_refused(
    tmp_path: Path, count: int
) -> None:
    """Within the 32768 the reader allows, yet more layers than this small file's three
    tensors, or its header of a few hundred bytes, could be: refused too."""
    path = write_tensors(tmp_path / "m.gguf", [ARCH, kv_u32(BLOCKS, count)], TENSORS)
    refused(path, f"claims {count} layers by its key 'llama.block_count', more than the "
                  r"file can hold \(\d+: each layer has at least one tensor; it lists 3")


def test_a_header_only_file_keeps_its_block_count(tmp_path: Path) -> None:
    """No tensors at all (a header read for its layout): the stated count, up to 32768."""
    path = write_tensors(tmp_path / "m.gguf", [ARCH, kv_u32(BLOCKS, 80)], [])
    assert load_gguf(path).n_layer == 80
    path = write_tensors(tmp_path / "m.gguf", [ARCH, kv_u32(BLOCKS, MAX_LAYERS + 1)], [])
    refused(path, "it lists no tensors; at most 32768 layers are read")


def test_an_honest_block_count_is_read(tmp_path: Path) -> None:
    path = write_tensors(tmp_path / "m.gguf", [ARCH, kv_u32(BLOCKS, 2),
                                               kv_u32("llama.attention.head_count", 4)],
                         TENSORS)
    model = load_gguf(path)
    assert model.n_layer == 2 and model.head_count_kv == (4, 4)
    assert gguf.Keys.LLM.BLOCK_COUNT.format(arch="llama") == BLOCKS
