"""How every ``tokperf`` verb prints and writes: plain text lines, or JSON with ``--json``;
an output file (``-o PATH``) by one rule for every verb."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.jsontext import dumps

STDOUT = "-"
"""``-o -``: a verb that writes text (CSV, JSON, markdown, HTML) prints it instead."""

OUTPUT_RULE = "missing folders are made"
"""What every verb that writes an output file does with its folder (said in each help)."""


def emit(args: argparse.Namespace, data: Any, text: str | Sequence[str],
         file: TextIO | None = None) -> None:
    """Print ``data`` as strict, indented JSON when ``--json`` was given, else the text lines
    (to ``file``: stderr where stdout carries a verb's ``-o -`` output)."""
    out = sys.stdout if file is None else file
    if getattr(args, "json", False):
        print(dumps(data), file=out)
    else:
        print(text if isinstance(text, str) else "\n".join(text), file=out)


def output_file(text: str, flag: str = "--output", *, stdout: bool = False) -> Path | None:
    """The file a verb writes: None for ``-`` where the verb can print (``stdout``), else
    the path, its missing folders made. Refused in one line: ``-`` where the output is
    no text, a path that is a folder, a folder that cannot be made."""
    if text == STDOUT:
        if stdout:
            return None
        raise ConfigError(f"{flag} '-' (stdout) cannot take this verb's output; name a file")
    path = Path(text).expanduser()
    if path.is_dir():
        raise ConfigError(f"{flag} {text!r} is a folder; name the file to write in it")
    make_folder(path.parent, f"{flag} {text!r}")
    return path


def output_folder(text: str, flag: str = "--output") -> Path:
    """A folder a verb writes files into, made when missing (``-`` refused: no stdout)."""
    if text == STDOUT:
        raise ConfigError(f"{flag} '-' (stdout) cannot take files; name a folder")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {text!r} is a file; name a folder for the files")
    make_folder(path, f"{flag} {text!r}")
    return path


def make_folder(folder: Path, what: str) -> None:
    """``folder`` and its parents, or a ``ConfigError`` naming ``what`` asked for it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what}: folder {str(folder)!r} cannot be made "
                          f"({exc.strerror or exc}); pass a path in a writable folder") from exc


def print_output(text: str) -> None:
    """A verb's ``-o -`` output on stdout, as it would be in the file."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
