"""Plain-text formatting of results: the terminal summary table and one-liners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.results import BenchResult, Ceiling, Summary, Verdict


@dataclass(frozen=True, slots=True)
class Row:
    """One measured workload as the summary shows it."""

    test_id: str
    result: BenchResult
    ceiling: Ceiling | None
    verdict: Verdict


def _rate(summary: Summary | None) -> str:
    if summary is None:
        return "-"
    if summary.n > 1:
        return f"{summary.median:.2f} ±{summary.stdev:.2f}"
    return f"{summary.median:.2f}"


def _short(test_id: str, width: int = 44) -> str:
    return test_id if len(test_id) <= width else "…" + test_id[-(width - 1):]


def summary_table(rows: Sequence[Row]) -> list[str]:
    """Aligned lines: TTFT, prefill, decode (client and engine), ceiling, efficiency."""
    header = (
        "test", "prompt/gen", "TTFT ms", "prefill tok/s", "decode tok/s", "engine decode",
        "agree", "n", "ceiling", "eff", "engine build", "verdict",
    )
    body: list[tuple[str, ...]] = []
    for row in rows:
        r = row.result
        ceiling = row.ceiling.decode_tokens_per_s if row.ceiling else None
        efficiency = decode_efficiency(r, row.ceiling)
        eff = f"{efficiency:.0%}" if efficiency is not None else "-"
        body.append((
            _short(row.test_id),
            (f"d{r.workload.depth_tokens}+" if r.workload.depth_tokens else "")
            + f"{r.workload.prompt_tokens}/{r.workload.generate_tokens}"
            + (f" warm{r.workload.cached_prefix_tokens}" if r.workload.cached_prefix_tokens else "")
            + (" chat" if r.workload.chat else "")
            + (" +draft" if r.engine.speculative else "")
            + (f" x{r.workload.concurrency}" if r.workload.concurrency > 1 else ""),
            f"{r.ttft_s.median * 1e3:.0f}",
            _rate(r.prefill_tokens_per_s),
            _rate(r.decode_tokens_per_s),
            _rate(r.engine_decode_tokens_per_s),
            f"{r.decode_agreement:.2%}" if r.decode_agreement is not None else "-",
            str(len(r.samples)),
            f"{ceiling:.1f}" if ceiling else "-",
            eff,
            r.engine.build or r.engine.version or "?",
            row.verdict,
        ))
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(header)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out.extend("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in body)
    for row in rows:
        for note in row.result.notes:
            out.append(f"note: {_short(row.test_id)}: {note}")
    return out
