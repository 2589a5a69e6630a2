"""The ``tokperf`` command: the library's verbs without pytest.

Every verb prints plain text, or JSON with ``--json``; errors print one line
naming the value and the fix, and exit with status 2. Each verb's parser names its
handler (``set_defaults(func=...)``); the shared options come from ``cli.common``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import EXIT_CODES, GROUPS, JSON
from pytest_tokperf.cli.output import emit
from pytest_tokperf.errors import ConfigError, TokperfError


def _make_model(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from pytest_tokperf.model.spec import MAIN_MODEL, TEST_MODEL, parse_size, spec_for_size
    from pytest_tokperf.model.writer import cached_model, write_model

    if args.size:
        spec = spec_for_size(parse_size(args.size), tensor_type=args.type)
    else:
        spec = replace(TEST_MODEL if args.preset == "test" else MAIN_MODEL, tensor_type=args.type)
    overrides = {k: v for k, v in (("n_layer", args.layers), ("n_embd", args.width),
                                   ("n_vocab", args.vocab)) if v is not None}
    if overrides:
        spec = replace(spec, **overrides)
    path = write_model(spec, Path(args.output)) if args.output else cached_model(spec)
    size = path.stat().st_size
    emit(args, {"path": str(path), "bytes": size, "spec": asdict(spec)},
          f"{path} ({size / 1e6:.1f} MB)")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from pytest_tokperf.model.footprint import estimate_footprint, footprint
    from pytest_tokperf.model.gguf_file import load_gguf
    from pytest_tokperf.model.spec import parse_size
    from pytest_tokperf.predict import (
        footprint_from_file_size,
        format_prediction,
        predict,
        prediction_to_dict,
    )

    given = _quant(args.quant or "Q4_K_M")
    quant: str | float | None = given  # what picks the efficiency band
    if args.model:
        model = load_gguf(Path(args.model))
        fp = footprint(model, depth_tokens=args.depth, kv_type=args.kv_type)
        if args.quant is None:  # the file's own type sets the band
            quant = model.file_type_name
    elif args.size:
        fp = footprint_from_file_size(
            parse_size(args.size), given, parameters=args.params,
            active_parameters=args.active_params, n_layer=args.layers,
            n_head_kv=args.kv_heads, head_dim=args.head_dim, depth_tokens=args.depth,
            kv_type=args.kv_type,
        )
        if args.params:  # the size sets the bits per weight
            quant = parse_size(args.size) * 8 / args.params
    elif args.params:
        fp = estimate_footprint(
            args.params, given, n_layer=args.layers, n_head_kv=args.kv_heads,
            head_dim=args.head_dim, depth_tokens=args.depth, kv_type=args.kv_type,
            active_parameters=args.active_params,
        )
    else:
        raise ConfigError("predict needs a model: --model FILE.gguf, --params 8e9 --quant Q4_K_M, "
                          "or --size 4.9GB (the file size) with --quant or --params")
    pred = predict(args.hardware, fp, gpu_cores=args.gpu_cores, quant=quant)
    emit(args, prediction_to_dict(pred), format_prediction(pred))
    return 0


def _quant(text: str) -> str | float:
    """``"Q4_K_M"`` stays a name; ``"4.5"`` is bits per weight."""
    try:
        return float(text)
    except ValueError:
        return text


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

    parser = argparse.ArgumentParser(
        prog="tokperf", usage="tokperf [--version] [-h] VERB [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure local LLM engines against the memory-bandwidth ceiling "
        "(the pytest plugin is `pytest --tokperf-engine llama-server`). "
        "`tokperf VERB --help` tells more about each verb.",
    )
    parser.add_argument("--version", action="version", version=f"tokperf {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", help=argparse.SUPPRESS)

    p = verbs.add_parser("make-model", parents=[JSON],
                         help="write a random-weight GGUF model",
                         description="Write a llama-architecture GGUF with random weights and a "
                         "synthetic vocabulary that llama-server loads: no downloads. Without "
                         "--output it goes to the model cache, keyed by shape.")
    p.add_argument("--preset", choices=["main", "test"], default="main",
                   help="main: ~1.1 GB, memory-bound; test: tens of MB (default: main)")
    p.add_argument("--size", help="target file size instead of a preset, e.g. 1GB, 500MB")
    p.add_argument("--type", default="F16", choices=["F16", "F32", "Q8_0"], help="tensor type")
    p.add_argument("--layers", type=int, help="number of layers")
    p.add_argument("--width", type=int, help="embedding width")
    p.add_argument("--vocab", type=int, help="vocabulary size")
    p.add_argument("--output", "-o", help="write here instead of the cache")
    p.set_defaults(func=_make_model)

    p = verbs.add_parser("predict", parents=[JSON],
                         help="decode ceiling of a model on some hardware",
                         description="Ceiling = bandwidth / bytes read per token, with the "
                         "expected range at typical efficiencies and the memory needed. The "
                         "model is a GGUF file, or parameters + quant for 'before you buy'.")
    p.add_argument("--hardware", required=True,
                   help="catalog name (e.g. 'RTX 4090', 'Apple M4 Max') or a bandwidth "
                   "('1008GB/s')")
    p.add_argument("--gpu-cores", type=int, help="Apple GPU core count (binned chips differ)")
    p.add_argument("--model", help="GGUF file: bytes per token from its tensors")
    p.add_argument("--params", type=float, help="total parameters, e.g. 8e9 (no file)")
    p.add_argument("--active-params", type=float, help="MoE: parameters active per token")
    p.add_argument("--quant", default=None,
                   help="quant type (Q4_K_M, Q8_0, F16, ...) or bits per weight (4.5); sets "
                   "the efficiency band too (default: Q4_K_M, or the GGUF's own type)")
    p.add_argument("--size", help="model file size instead of --params, e.g. 4.9GB: every byte "
                   "is read per token; with --params it also gives the bits per weight")
    p.add_argument("--layers", type=int, default=0, help="layers (for the KV cache)")
    p.add_argument("--kv-heads", type=int, default=0, help="KV heads (for the KV cache)")
    p.add_argument("--head-dim", type=int, default=0, help="head size (for the KV cache)")
    p.add_argument("--depth", type=int, default=0, help="context depth in tokens (KV read)")
    p.add_argument("--kv-type", default="f16", help="KV cache type: f16, q8_0, q4_0, ...")
    p.set_defaults(func=_predict)

    from pytest_tokperf.cli.bench import add_parser as add_bench
    from pytest_tokperf.cli.data import add_parsers
    from pytest_tokperf.cli.engines import add_parsers as add_engine_verbs

    add_engine_verbs(verbs)
    add_bench(verbs)
    add_parsers(verbs)
    parser.epilog = f"{_grouped(verbs)}\n{EXIT_CODES}"
    return parser


def _quiet_stdout() -> None:
    """The reader went away (``tokperf ... | head -1``): send what is left nowhere, so
    that the flush at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_tokperf.cli.engines import attach_pytest_args, split_pytest_args

    parser = build_parser()
    own, rest = split_pytest_args(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(own)
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
