"""`tokperf report` lists the drifts `tokperf changes` names (``stats.drift.drifts``) beside
the steps, labelled as drifts, in HTML and markdown; a step stays a step."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main
from pytest_tokperf.report.formats import markdown_summary
from pytest_tokperf.report.html import render_html
from pytest_tokperf.report.report_data import SeriesChange

RAMP = [(f"b{i:02d}", 100 * 0.99**i) for i in range(10)]  # -8.6% in steps of 1%
DROP = [(f"b{i:02d}", 100.0) for i in range(5)] + [(f"b{i:02d}", 77.0) for i in range(5, 8)]
FLAT = [(f"b{i:02d}", 100.0) for i in range(12)]
NONE_FOUND = "No regressions or improvements found."


def reports(tmp_path: Path, levels: list[tuple[str, float]], seed: int = 1
            ) -> tuple[str, str, list[dict[str, Any]]]:
    """``tokperf report`` of a history as markdown, HTML and its JSON changes (but the
    verdict on its last two builds, checked here)."""
    db = tmp_path / "r.db"
    fill_history(db, levels, seed=seed)[0].close()
    out = {}
    for kind in ("md", "html", "json"):
        assert main(["report", "--db", str(db), "-o", str(tmp_path / f"r.{kind}")]) == 0
        out[kind] = (tmp_path / f"r.{kind}").read_text(encoding="utf-8")
    changes = json.loads(out["json"])["changes"]
    # the two builds measured last, as `tokperf compare` judges them: none moved there
    assert [(c["verdict"], c["current"]) for c in changes if c["kind"] == "compare"] == [
        ("unchanged", levels[-1][0])]
    return out["md"], out["html"], [c for c in changes if c["kind"] != "compare"]


def items(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_a_ramp_is_a_drift_row_in_markdown_and_html(tmp_path: Path) -> None:
    md, html, changes = reports(tmp_path, RAMP, seed=3)
    assert [(c["kind"], c["baseline"], c["current"]) for c in changes] == [
        ("drift", "b00", "b09")]
    assert -0.10 < changes[0]["relative_change"] <= -0.05
    assert md.splitlines()[0].endswith("· 1 regression") and "#### Regressions" in md
    (row,) = items(md, "- **t::decode** ")
    assert row.startswith("- **t::decode** regression: decode −")
    assert row.endswith(", drift b00..b09") and "→" not in row
    (li,) = items(html, "<li><b>t::decode</b> <span")
    assert '<span class="regression">regression</span>: decode −' in li
    assert ", drift b00..b09<br><small>" in li and "→" not in li
    assert "in steps each too small to flag" in li and NONE_FOUND not in html
    assert re.search(r"regression −\d\.\d% drift b00\.\.b09</figcaption>", html)


def test_a_flat_history_lists_no_drift(tmp_path: Path) -> None:
    md, html, changes = reports(tmp_path, FLAT)
    assert changes == [] and "drift" not in md and "drift" not in html
    assert NONE_FOUND in html and "#### Regressions" not in md


def test_a_step_still_reads_as_a_step(tmp_path: Path) -> None:
    md, html, changes = reports(tmp_path, DROP)
    assert [(c["kind"], c["current"]) for c in changes] == [("step", "b05")]
    (row,) = items(md, "- **t::decode** ")
    assert row.startswith("- **t::decode** regression: decode −2") and row.endswith(", b04 → b05")
    (li,) = items(html, "<li><b>t::decode</b> <span")
    assert ", b04 → b05<br><small>" in li and "drift" not in md + html


def test_a_drift_is_escaped_as_every_change_is() -> None:
    nan = math.nan
    odd = SeriesChange("t|<x>", None, "decode", "improvement", 0.07, nan, nan, 0.001, "a|<1>",
                       "b&2", "why <not>", kind="drift")
    md = markdown_summary([], [odd])
    assert r"- **t\|\<x\>** improvement: decode +7.0%, p=0.001, drift a\|\<1\>..b\&2" in md
    html = render_html([], [odd], ())
    assert ("<b>t|&lt;x&gt;</b> <span class=\"improvement\">improvement</span>: decode +7.0%, "
            "p=0.001, drift a|&lt;1&gt;..b&amp;2<br><small>why &lt;not&gt;</small>") in html


@pytest.mark.parametrize("kind", ["gate", "step"])
def test_only_a_drift_is_labelled_one(kind: Literal["gate", "step"]) -> None:
    change = SeriesChange("t", None, "decode", "regression", -0.1, -0.12, -0.08, 0.001, "b1",
                          "b2", "", kind=kind)
    assert "drift" not in markdown_summary([], [change])
