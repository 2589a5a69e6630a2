"""What a watch says at the end: the steps flagged and the releases they name, what was
skipped and why, and each build's wall time; as terminal lines or a markdown summary."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_tokperf.builds.progress import duration
from pytest_tokperf.report.tables import Table, markdown, md_cell, text
from pytest_tokperf.stats.metric import interval_text, pct
from pytest_tokperf.versions.watch_journal import (
    AbStep,
    ReleaseWatch,
    StepFlag,
    WatchResult,
)


def _change(ab: AbStep | None, metrics: Sequence[str]) -> str:
    """``decode regression −29.7% [−36.2%, −22.7%]``, ``(busy)`` when measured busy."""
    lead = ab.lead(metrics) if ab is not None else None
    if ab is None or lead is None:
        return "-"
    busy = " (busy)" if lead.busy else ""
    return (f"{lead.metric} {lead.verdict} {pct(lead.change)} "
            f"{interval_text(lead.ci_low, lead.ci_high)}{busy}")


def _named(flag: StepFlag) -> str:
    which = "bad" if flag.kind == "regression" else "improved"
    good = "good" if flag.kind == "regression" else "unimproved"
    text = f"first {which} release: {flag.first_bad} (last {good}: {flag.last_good})"
    if flag.upstream is not None:
        low, high = flag.upstream
        span = f"b{low}" if low == high else f"b{low}..b{high}"
        text += f"; llama.cpp builds {span}: {flag.compare_url}"
    return text


def _flag_lines(flag: StepFlag, metrics: Sequence[str]) -> list[str]:
    word = flag.kind.upper() if flag.confirmed else f"{flag.kind} (not confirmed)"
    lines = [f"  {word}: {flag.before} -> {flag.after}: {_change(flag.first, metrics)}"
             + (f"; again: {_change(flag.second, metrics)}" if flag.second else "")]
    if flag.confirmed:
        lines.append(f"    {_named(flag)}")
    lines.append(f"    {flag.note}")
    return lines


def _row(r: ReleaseWatch, metrics: Sequence[str]) -> tuple[str, ...]:
    if r.skipped:
        why = r.skipped.split(":", 1)[0]  # the whole reason is in the lines above
        return (r.label, _secs(r.build.seconds), "-", _secs(r.wall_s), f"skipped ({why})", "")
    ref = "(reference)" if r.vs_reference is None and r.predecessor is None else _change(
        r.vs_reference, metrics)
    pred = _change(r.vs_predecessor, metrics) if r.predecessor else "-"
    return (r.label, _secs(r.build.seconds), _secs(r.ab_s) if r.abs else "-", _secs(r.wall_s),
            ref, pred)


def _secs(seconds: float) -> str:
    return f"{seconds:.0f} s"


HEADER = ("build", "build s", "A/B s", "wall", "vs reference", "vs predecessor")


def headline(result: WatchResult) -> str:
    """One line: how many builds, what was flagged and named, skipped, the time."""
    named = result.named
    what = ", ".join(f"{f.kind} at {f.first_bad or f.after}" for f in named) or "none"
    unconfirmed = len(result.flags) - len(named)
    return (f"watch of {len(result.releases)} builds against {result.reference}: "
            f"{len(named)} step(s) flagged and named ({what})"
            + (f", {unconfirmed} not confirmed" if unconfirmed else "")
            + f", {len(result.skipped)} skipped, {_busy(result)}; "
            f"{duration(result.wall_s)} ({result.measured} A/B(s) measured now, "
            f"{result.reused} from the journal)")


def _busy(result: WatchResult) -> str:
    """``2 of 8 A/Bs measured busy`` (``, 1 change not a flag`` where one read a change)."""
    busy, total = result.measured_busy
    again = (f" ({result.measured_again} measured again after a quiet window)"
             if result.measured_again else "")
    if not busy:
        return f"no A/B measured busy{again}"
    held = f", {len(result.busy)} change(s) not a flag" if result.busy else ""
    return f"{busy} of {total} A/Bs measured busy{held}{again}"


def format_summary(result: WatchResult) -> list[str]:
    """The summary a person reads in ten seconds, then the table per build."""
    lines = [headline(result)]
    for flag in result.flags:
        lines += _flag_lines(flag, result.metrics)
    if result.skipped:
        lines.append("skipped: " + "; ".join(f"{r.label} ({r.skipped})" for r in result.skipped))
    lines += [f"busy, not a flag: {note}" for note in result.busy]
    lines += text(_releases(result))
    median = result.median_wall_s()
    lines.append(f"wall per build (build + A/Bs, as journalled): median "
                 f"{duration(median) if median is not None else '-'}; A/B documents in "
                 f"{result.folder}, journal {result.journal}")
    return lines


def _releases(result: WatchResult) -> Table:
    return Table.of(HEADER, [_row(r, result.metrics) for r in result.releases],
                    numeric=(1, 2, 3))


def format_markdown(result: WatchResult) -> str:
    """The same as a GitHub job summary."""
    lines = [f"### tokperf watch: {md_cell(headline(result))}", ""]
    for flag in result.flags:
        lines += [f"- {md_cell(line.strip())}" for line in _flag_lines(flag, result.metrics)]
    if result.skipped:
        skipped = "; ".join(f"{r.label} ({r.skipped})" for r in result.skipped)
        lines.append(f"- skipped: {md_cell(skipped)}")
    lines += [f"- busy, not a flag: {md_cell(note)}" for note in result.busy]
    return "\n".join([*lines, "", *markdown(_releases(result))]) + "\n"
