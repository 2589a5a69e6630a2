"""The ``tokperf`` command: the library's verbs without pytest.

Every verb prints plain text, or JSON with ``--json``; errors print one line
naming the value and the fix, and exit with status 2. Each verb's parser names its
handler (``set_defaults(func=...)``); the shared options come from ``cli.common``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import EXIT_CODES, GROUPS, JSON
from pytest_tokperf.cli.output import OUTPUT_RULE, emit, make_folder, output_file
from pytest_tokperf.errors import ConfigError, TokperfError


def _make_model(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from pytest_tokperf.model.spec import (
        ENGINES_MODEL,
        MAIN_MODEL,
        TEST_MODEL,
        parse_size,
        spec_for_size,
    )
    from pytest_tokperf.model.writer import cached_model, write_model

    presets = {"main": MAIN_MODEL, "test": TEST_MODEL, "engines": ENGINES_MODEL}
    if args.size:
        spec = spec_for_size(parse_size(args.size), tensor_type=args.type)
    else:
        spec = replace(presets[args.preset], tensor_type=args.type)
    _check_shape(args, spec.n_head if spec.head_dim is None else 1)
    overrides = {k: v for k, v in (("n_layer", args.layers), ("n_embd", args.width),
                                   ("n_vocab", args.vocab)) if v is not None}
    if overrides:
        spec = replace(spec, **overrides)
    if args.format == "hf":
        from pytest_tokperf.model.hf_writer import cached_hf_model, write_hf_model

        if args.output:
            folder = Path(args.output).expanduser()
            if folder.exists() and not folder.is_dir():
                raise ConfigError(f"--output {args.output!r} is a file; --format hf writes a "
                                  "folder: name a new or empty one")
            make_folder(folder.parent, f"--output {args.output!r}")
            path = write_hf_model(spec, folder)
        else:
            path = cached_hf_model(spec)
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    else:
        out = output_file(args.output) if args.output else None
        path = write_model(spec, out) if out else cached_model(spec)
        size = path.stat().st_size
    emit(args, {"path": str(path), "bytes": size, "format": args.format, "spec": asdict(spec)},
         f"{path} ({size / 1e6:.1f} MB)")
    return 0


def _check_shape(args: argparse.Namespace, heads: int) -> None:
    """--layers, --width and --vocab, refused under their own names (``heads``: what the
    width must divide into; Q8_0 blocks of 32 as well)."""
    from pytest_tokperf.model.spec import MIN_VOCAB, multiple_near

    for flag, value, least in (("--layers", args.layers, 1), ("--width", args.width, 1),
                               ("--vocab", args.vocab, MIN_VOCAB)):
        if value is not None and value < least:
            raise ConfigError(f"{flag} {value} is too small: give at least {least}")
    if args.width is None:
        return
    step = math.lcm(heads, 32) if args.type == "Q8_0" else heads
    if args.width % step:
        what = (f"the {heads} attention heads" if heads > 1 else "") + (
            (" and " if heads > 1 else "") + "Q8_0's blocks of 32" if args.type == "Q8_0"
            else "")
        raise ConfigError(f"--width {args.width} is not a multiple of {what}: give a "
                          f"multiple of {step} (e.g. {multiple_near(args.width, step)})")


def _predict(args: argparse.Namespace) -> int:
    from pytest_tokperf.expected.prediction import (
        footprint_from_file_size,
        format_prediction,
        predict,
        prediction_to_dict,
    )
    from pytest_tokperf.model.footprint import estimate_footprint, footprint
    from pytest_tokperf.model.gguf_file import load_gguf
    from pytest_tokperf.model.hf_file import hf_footprint, is_hf_folder, load_hf
    from pytest_tokperf.model.spec import parse_size

    given = _quant(args.quant or "Q4_K_M")
    quant: str | float | None = given  # what picks the efficiency band
    active = _active_params(args)
    if args.expert_params and not args.params:
        raise ConfigError("--expert-params prices the experts of a --params estimate; a GGUF "
                          "(--model) has them already, a --size cannot tell them apart")
    if args.model and is_hf_folder(Path(args.model)):
        hf = load_hf(Path(args.model))
        fp = hf_footprint(hf, depth_tokens=args.depth)
        if args.quant is None:  # the folder's own dtype sets the band
            quant = hf.config_dtype or "F16"
    elif args.model:
        model = load_gguf(Path(args.model))
        fp = footprint(model, depth_tokens=args.depth, kv_type=args.kv_type)
        if args.quant is None:  # the file's own type sets the band
            quant = model.file_type_name
    elif args.size:
        fp = footprint_from_file_size(
            parse_size(args.size), given, parameters=args.params,
            active_parameters=active, n_layer=args.layers,
            n_head_kv=args.kv_heads, head_dim=args.head_dim, depth_tokens=args.depth,
            kv_type=args.kv_type,
        )
        if args.params:  # the size sets the bits per weight
            quant = parse_size(args.size) * 8 / args.params
    elif args.params:
        fp = estimate_footprint(
            args.params, given, n_layer=args.layers, n_head_kv=args.kv_heads,
            head_dim=args.head_dim, depth_tokens=args.depth, kv_type=args.kv_type,
            active_parameters=active, expert_parameters=args.expert_params,
            expert_quant=None if args.expert_quant is None else _quant(args.expert_quant),
        )
        if args.expert_quant and args.expert_params:
            experts_read = fp.active_parameters - (args.params - args.expert_params)
            if experts_read > args.params - args.expert_params:  # experts outweigh the rest
                quant = _quant(args.expert_quant)
    else:
        raise ConfigError("predict needs a model: --model FILE.gguf, --params 8e9 --quant Q4_K_M, "
                          "or --size 4.9GB (the file size) with --quant or --params")
    pred = predict(args.hardware, fp, gpu_cores=args.gpu_cores, quant=quant,
                   expert_sizes=args.expert_params is not None)
    emit(args, prediction_to_dict(pred), format_prediction(pred))
    return 0


def _active_params(args: argparse.Namespace) -> float | None:
    """``--active-params``, else non-expert + ``--experts USED/TOTAL`` of ``--expert-params``."""
    if args.experts is None:
        return args.active_params  # type: ignore[no-any-return]
    used, _, total = args.experts.partition("/")
    if not (used.isdigit() and total.isdigit() and 0 < int(used) <= int(total)):
        raise ConfigError(f"--experts {args.experts!r} must be USED/TOTAL experts per token, "
                          "e.g. 8/128")
    if args.active_params is not None or not (args.expert_params and args.params):
        raise ConfigError("--experts needs --params and --expert-params (and no "
                          "--active-params): it sets the active count from them")
    dense = args.params - args.expert_params
    return dense + args.expert_params * int(used) / int(total)  # type: ignore[no-any-return]


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
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", help=argparse.SUPPRESS,
                                  prog="tokperf")

    p = verbs.add_parser("make-model", parents=[JSON],
                         help="write a random-weight model (GGUF or HF folder)",
                         description="Write a llama-architecture model with random weights, "
                         "no downloads: a GGUF with a synthetic vocabulary that llama-server "
                         "loads, or (--format hf) the same shape as a Hugging Face folder "
                         "(model.safetensors, config.json, a tokenizer trained here with "
                         "`tokenizers`, a chat template) that mlx_lm and vLLM load. Without "
                         "--output it goes to the model cache, keyed by shape.")
    p.add_argument("--format", choices=["gguf", "hf"], default="gguf",
                   help="gguf: one .gguf file (llama-server); hf: a Hugging Face folder "
                   "(mlx_lm, vLLM; F16 or F32 only) (default: gguf)")
    p.add_argument("--preset", choices=["main", "test", "engines"], default="main",
                   help="main: ~1.1 GB, memory-bound; test: tens of MB; engines: ~10 MB, 4 "
                   "layers x 256 wide, what the real-engine tests serve (default: main)")
    p.add_argument("--size", help="target file size instead of a preset, e.g. 1GB, 500MB")
    p.add_argument("--type", default="F16", choices=["F16", "F32", "Q8_0"], help="tensor type")
    p.add_argument("--layers", type=int, help="number of layers")
    p.add_argument("--width", type=int, help="embedding width: a multiple of the model's "
                   "attention heads (and of 32 for Q8_0)")
    p.add_argument("--vocab", type=int, help="vocabulary size")
    p.add_argument("--output", "-o", help="write here instead of the cache: the .gguf file, "
                   f"or the folder with --format hf ({OUTPUT_RULE})")
    p.set_defaults(func=_make_model)

    p = verbs.add_parser("predict", parents=[JSON],
                         help="decode ceiling of a model on some hardware",
                         description="Ceiling = bandwidth / bytes read per token, with the "
                         "expected range and the memory needed. The range is the fitted "
                         "model's band where the device class has 20 published rows "
                         "(db/public), else a fixed band per quant family and class; 'band "
                         "from:' says which. The model is a GGUF file, or parameters + quant "
                         "for 'before you buy'.")
    p.add_argument("--hardware", required=True,
                   help="catalog name (e.g. 'RTX 4090', 'Apple M4 Max') or a bandwidth "
                   "('1008GB/s')")
    p.add_argument("--gpu-cores", type=int, help="Apple GPU core count (binned chips differ)")
    p.add_argument("--model", help="GGUF file, or Hugging Face folder (safetensors): bytes "
                   "per token from its tensors")
    p.add_argument("--params", type=float, help="total parameters, e.g. 8e9 (no file)")
    p.add_argument("--active-params", type=float, help="MoE: parameters active per token")
    p.add_argument("--expert-params", type=float, help="MoE: all routed expert weights, priced "
                   "at --expert-quant (with --params)")
    p.add_argument("--expert-quant", help="MoE: the experts' quant or bits (e.g. MXFP4)")
    p.add_argument("--experts", help="MoE: experts used per token / expert count, e.g. 4/32: "
                   "sets the active parameters from --params and --expert-params")
    p.add_argument("--quant", default=None,
                   help="quant type (Q4_K_M, Q8_0, F16, ...) or bits per weight (4.5); sets "
                   "the efficiency band too (default: Q4_K_M, or the GGUF's own type)")
    p.add_argument("--size", help="model file size instead of --params, e.g. 4.9GB: every byte "
                   "is read per token; with --params it also gives the bits per weight")
    p.add_argument("--layers", type=int, default=0, help="layers (for the KV cache)")
    p.add_argument("--kv-heads", type=int, default=0, help="KV heads (for the KV cache)")
    p.add_argument("--head-dim", type=int, default=0, help="head size (for the KV cache)")
    p.add_argument("--depth", type=int, default=0, help="context depth in tokens (KV read; "
                   "the band is the one at this depth)")
    p.add_argument("--kv-type", default="f16", help="KV cache type: f16, q8_0, q4_0, ...")
    p.set_defaults(func=_predict)

    from pytest_tokperf.cli.bench import add_parser as add_bench
    from pytest_tokperf.cli.builds import add_parsers as add_engine_verbs
    from pytest_tokperf.cli.results_parsers import add_parsers

    add_engine_verbs(verbs)
    add_bench(verbs)
    add_parsers(verbs)
    from pytest_tokperf.cli import llama_bench

    llama_bench.add_parsers(verbs)  # import-llama-bench, outliers
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
