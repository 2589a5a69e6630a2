"""The floor-0 guards every reader of a stranger's file or JSON goes through."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_tokperf import jsontext
from pytest_tokperf.safe_files import FileRefused, inside, read_regular, safe_name, tail_text


@pytest.mark.parametrize("depth", [65, 5_000, 500_000])
def test_json_nested_too_deep_is_a_value_error(depth: int) -> None:
    with pytest.raises(ValueError, match="nested more than 64"):
        jsontext.loads("[" * depth + "]" * depth)


def test_json_at_the_limit_parses() -> None:
    assert jsontext.depth(jsontext.loads("[" * 64 + "]" * 64)) == 64


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "weights"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="a FIFO"):
        read_regular(fifo)
    assert tail_text(fifo) == ""


def test_a_sparse_giant_is_refused_by_its_size(tmp_path: Path) -> None:
    giant = tmp_path / "config.json"
    with giant.open("wb") as handle:
        handle.truncate(3 << 30)
    with pytest.raises(FileRefused, match="3221225472 bytes"):
        read_regular(giant)


def test_a_device_is_refused() -> None:
    if not Path("/dev/zero").exists() or sys.platform == "win32":
        pytest.skip("no /dev/zero")
    with pytest.raises(FileRefused, match="a device"):
        read_regular("/dev/zero")


def test_a_log_tail_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(200_000)))
    assert tail_text(log, 2, max_bytes=4096) == "line 199998\nline 199999"


@pytest.mark.parametrize("name", ["../../../etc/x", "..", ".", "", "a/b\\c", "/abs", "é" * 300,
                                  "x\x00y", ".hidden", "C:\\run"])
def test_safe_names_stay_in_the_folder(tmp_path: Path, name: str) -> None:
    made = safe_name(name)
    assert made and made not in (".", "..") and not made.startswith(".")
    assert len(made) <= 80 and "/" not in made and "\\" not in made
    assert inside(tmp_path, tmp_path / made)


def test_a_plain_name_is_kept_and_changed_names_do_not_collide() -> None:
    assert safe_name("run-2026_12.05") == "run-2026_12.05"
    assert safe_name("a/b") != safe_name("a?b")


def test_inside_follows_links(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path.parent)
    assert not inside(tmp_path / "out", tmp_path / "out" / "link" / "x")
