"""The ``tokperf`` command: the library's verbs without pytest.

Every verb prints plain text, or JSON with ``--json``; errors print one line
naming the value and the fix, and exit with status 2. Each verb's parser names its
handler (``set_defaults(func=...)``); the shared options come from ``cli.common``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from pytest_tokperf.cli.common import EXIT_CODES, GROUPS
from pytest_tokperf.errors import TokperfError


def _grouped(verbs: Any) -> str:
    """The verbs under their group headings, each with its one-line help."""
    helps = {a.dest: a.help or "" for a in verbs._choices_actions}
    listed = {name for _, names in GROUPS for name in names}
    missing = sorted(set(verbs.choices) - listed)
    if missing:  # a new verb must be placed in a group
        raise RuntimeError(f"verbs {missing!r} are in no group of cli.common.GROUPS")
    width = max(len(name) for name in verbs.choices) + 2
    lines = []
    for title, names in GROUPS:
        lines.append(f"{title}:")
        lines += [f"  {name:<{width}}{helps[name]}" for name in names]
        lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from pytest_tokperf import __version__
    from pytest_tokperf.cli import bench, builds, files, llama_bench, models, results

    parser = argparse.ArgumentParser(
        prog="tokperf", usage="tokperf [--version] [-h] VERB [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure local LLM engines against the memory-bandwidth ceiling "
        "(the pytest plugin is `pytest --tokperf-engine llama-server`). "
        "`tokperf VERB --help` tells more about each verb.",
    )
    parser.add_argument("--version", action="version", version=f"tokperf {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", help=argparse.SUPPRESS,
                                  prog="tokperf")
    for add in (models.add_make_model, models.add_predict, builds.add_install_engine,
                builds.add_compare_builds, builds.add_bisect, builds.add_watch,
                bench.add_bench, results.add_history, results.add_compare,
                results.add_changes, files.add_plot, files.add_report, files.add_export,
                files.add_import, files.add_merge, files.add_save_reference,
                results.add_accept, llama_bench.add_import_llama_bench,
                llama_bench.add_outliers):
        add(verbs)
    parser.epilog = f"{_grouped(verbs)}\n{EXIT_CODES}"
    return parser


def _quiet_stdout() -> None:
    """The reader went away (``tokperf ... | head -1``): send what is left nowhere, so
    that the flush at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


_DASH_VALUE = re.compile(r"-(?:[\d.]|inf|nan)", re.IGNORECASE)
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")


def glue_dash_values(args: Sequence[str]) -> list[str]:
    """``--bandwidth -5GB/s`` as ``--bandwidth=-5GB/s``: argparse takes a value that
    starts with '-' (and is no plain negative number) for an option and says only
    "expected one argument"; glued to its option, the verb's own check names it."""
    out: list[str] = []
    for arg in args:
        flag = out[-1] if out else ""
        if (flag.startswith("-") and flag != "--" and "=" not in flag
                and _DASH_VALUE.match(arg) and not _NEGATIVE_NUMBER.fullmatch(arg)):
            # -p-1 for a one-letter flag (-p=-1 would read '=-1'); -ngl=-1,5 and
            # --bandwidth=-5GB/s for the rest (llama-bench's -ngl -1,5 included)
            out[-1] = f"{flag}{arg}" if len(flag) == 2 else f"{flag}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_tokperf.cli.builds import attach_pytest_args, split_pytest_args

    parser = build_parser()
    own, rest = split_pytest_args(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(glue_dash_values(own))
        if args.verb is None:
            parser.print_help()
            sys.stdout.flush()
            return 0
        attach_pytest_args(parser, args, rest)
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except TokperfError as exc:
        print(f"tokperf {args.verb}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tokperf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
