"""Nothing measured is lost: each result goes to an append-only journal (fsynced, in the
reference-run text form ``tokperf import`` reads) the moment it is measured, before the
results database is asked to take it. The journal is deleted when every result reached
the database; else it stays and ``Recorder`` says how to import it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict
from pytest_tokperf.storage.location import named_file
from pytest_tokperf.storage.rows import (
    JSON_COLUMNS, Row, environment_row, result_row, run_row, sample_rows, series_of,
)

RUN_FORMAT = "tokperf-run/1"
"""The first line of each run (``run_files.RUN_FORMAT``, repeated: no import code here)."""


def _values(row: Row) -> Row:
    """A row with its JSON text columns as JSON values (the text form's convention)."""
    return {k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v
            for k, v in row.items()}


def journal_line(test_id: str, result: BenchResult, *, model: ModelInfo | None,
                 hardware: HardwareInfo | None, ceiling: Ceiling | None,
                 efficiency: float | None, verdict: Verdict, created_at: str) -> Row:
    """One result as a line of the text form, built from the rows the database gets."""
    series = series_of(test_id, result, model)
    return {
        "environment": _values(environment_row(result.engine, model, hardware)),
        "result": _values({"series_key": series.key, "test_id": test_id,
                           "created_at": created_at,
                           **result_row(result, ceiling, efficiency, verdict)}),
        "samples": [_values(s) for s in sample_rows(result.samples)],
        "series": series.text,
    }


@dataclass
class Journal:
    """The journal of one run in this process; created on the first ``append``."""

    path: Path
    run: RunInfo
    results: int = 0
    paths: list[Path] = field(default_factory=list)
    """Every file written (a second one in the temporary folder once the first failed)."""
    _started: bool = field(default=False, repr=False)

    @classmethod
    def beside(cls, db: Path, run: RunInfo) -> Journal:
        return cls(named_file(db.parent, db.name, run.run_id, os.getpid(),
                              suffix=".journal.jsonl"), run)

    def append(self, line: Row) -> None:
        """Write ``line`` (and the run line first), flushed to disk on return; raises
        ``OSError`` only when neither this folder nor the temporary one can take it."""
        try:
            self._write(line)
        except OSError:
            fallback = Path(tempfile.gettempdir()) / self.path.name
            if self.path == fallback:
                raise
            self.path, self._started = fallback, False
            self._write(line)
        self.results += 1

    def _write(self, line: Row) -> None:
        text = json.dumps(line, sort_keys=True) + "\n"
        if not self._started:
            text = json.dumps({"format": RUN_FORMAT, "run": run_row(self.run)},
                              sort_keys=True) + "\n" + text
        self._append(text)
        self._started = True
        if self.path not in self.paths:
            self.paths.append(self.path)

    def _append(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # no link followed out of the folder, no wait on a FIFO planted under the name
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0))
        fd = os.open(self.path, flags, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{str(self.path)!r} is not a regular file")
        os.set_blocking(fd, True)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    def discard(self) -> None:
        """Delete the journal: every result it holds is in the database."""
        for path in self.paths:
            try:
                path.unlink()
            except OSError:
                pass
        self.paths, self._started = [], False
