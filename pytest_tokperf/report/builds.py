"""What the build verbs print: ``install-engine --list`` (the cached builds), a
bisect's summary and its JSON. Tables go through ``report.tables``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pytest_tokperf.builds.install import InstalledEngine
from pytest_tokperf.report.tables import Table, text
from pytest_tokperf.versions.bisect import BisectResult


def engine_json(installed: InstalledEngine) -> dict[str, Any]:
    return {**asdict(installed), "binary": str(installed.binary), "label": installed.label,
            "log": str(installed.log) if installed.log else None}


def installed_lines(builds: list[InstalledEngine]) -> list[str]:
    """The cached builds: release, what the binary reports, ggml, build time, ccache."""
    rows = []
    for b in builds:
        ident = b.identity
        cpu = f" ({b.built_cpu_seconds:.0f} s CPU)" if b.built_cpu_seconds is not None else ""
        hits = (f"{b.ccache_hits}/{b.ccache_hits + b.ccache_misses}"
                if b.ccache_hits is not None and b.ccache_misses is not None else "-")
        rows.append((f"b{b.build_number}", b.label, (ident.ggml_version or "-") if ident else "?",
                     ((ident.ggml_sync_commit or "-")[:10]) if ident else "?",
                     f"{b.built_seconds:.0f} s{cpu}", hits, str(b.binary)))
    if not rows:
        return ["no cached llama-server builds"]
    return text(Table.of(("release", "reports", "ggml", "ggml sync", "built in", "ccache hits",
                          "binary"), rows))


def bisect_json(result: BisectResult) -> dict[str, Any]:
    return {
        "status": result.status, "good": result.good, "bad": result.bad,
        "target": asdict(result.target) if result.target else None,
        "endpoints": [{**asdict(t), "comparison": asdict(c)} for t, c in result.endpoints.items()],
        "steps": [asdict(s) for s in result.steps],
        "figures": [asdict(f) for f in result.figures],
        "last_good": result.last_good, "first_bad": result.first_bad,
        "remaining": list(result.remaining), "upstream_builds": result.upstream_builds,
        "midpoints": result.midpoints,
    }


def format_result(result: BisectResult) -> list[str]:
    """The summary a terminal shows at the end."""
    if result.status in ("no-regression", "inconclusive"):
        lines = [f"no regression from b{result.good} to b{result.bad}: nothing to bisect"
                 if result.status == "no-regression" else
                 f"inconclusive from b{result.good} to b{result.bad}: the endpoints were not "
                 f"told apart at the session limit, so nothing was bisected (rerun with more "
                 f"--max-sessions or on a quieter machine)"]
        return lines + [f"  {t.name}: {c.verdict}: {c.reason}" for t, c in result.endpoints.items()]
    assert result.target is not None
    unit = "tok/s" if result.target.metric == "decode" else "s"
    lines = [f"target: {result.target.name}, "
             f"{result.endpoints[result.target].relative_change:+.1%} from b{result.good} "
             f"to b{result.bad}"]
    if result.status == "found" and result.upstream_builds is not None:
        first, last = result.upstream_builds
        span = f"b{first}" if first == last else f"b{first}..b{last} ({last - first + 1} builds)"
        lines += [f"first bad release: b{result.first_bad} (last good: b{result.last_good})",
                  f"llama.cpp builds to look at: {span}, "
                  f"https://github.com/ggml-org/llama.cpp/compare/b{result.last_good}...b{result.first_bad}"]
    else:
        lines.append("undecided: the last step stayed inconclusive at the session limit; "
                     f"the first bad release is one of "
                     f"{', '.join(f'b{n}' for n in result.remaining[1:])} (rerun with more "
                     "--max-sessions or on a quieter machine)")
    lines.append(f"measured {len(result.figures)} releases ({result.midpoints} between the "
                 f"endpoints):")
    marks = {result.last_good: "<- last good", result.first_bad: "<- first bad"}
    rows = [(f"b{f.number}", f"{f.mean:.4g} {unit}", f"±{f.stdev:.3g}",
             f"n={f.samples} in {f.sessions} sessions", marks.get(f.number, ""))
            for f in result.figures]
    return lines + text(Table.of(("release", unit, "sd", "samples", ""), rows))
