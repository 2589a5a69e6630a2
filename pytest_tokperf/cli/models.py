"""``tokperf make-model`` and ``tokperf predict``: a generated model (``model.spec``,
``model.writer``, ``model.hf_writer``), and what a model should do on some hardware
(``expected.described``, ``expected.prediction``)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import JSON
from pytest_tokperf.cli.output import OUTPUT_RULE, emit, make_folder, output_file
from pytest_tokperf.errors import ConfigError


def make_model(args: argparse.Namespace) -> int:
    from pytest_tokperf.model.spec import spec_from

    spec = spec_from(args.preset, args.size, args.type, layers=args.layers, width=args.width,
                     vocab=args.vocab)
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
        from pytest_tokperf.model.writer import cached_model, write_model

        out = output_file(args.output) if args.output else None
        path = write_model(spec, out) if out else cached_model(spec)
        size = path.stat().st_size
    emit(args, {"path": str(path), "bytes": size, "format": args.format, "spec": asdict(spec)},
         f"{path} ({size / 1e6:.1f} MB)")
    return 0


def predict(args: argparse.Namespace) -> int:
    from pytest_tokperf.expected.described import ModelAsk, described_footprint
    from pytest_tokperf.expected.prediction import (
        format_prediction,
        prediction_to_dict,
    )
    from pytest_tokperf.expected.prediction import predict as predicted

    ask = ModelAsk(**{f.name: getattr(args, f.name) for f in fields(ModelAsk)})
    footprint, quant = described_footprint(ask)
    pred = predicted(args.hardware, footprint, gpu_cores=args.gpu_cores, quant=quant,
                     expert_sizes=args.expert_params is not None)
    emit(args, prediction_to_dict(pred), format_prediction(pred))
    return 0


def add_make_model(verbs: Any) -> None:
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
    p.set_defaults(func=make_model)


def add_predict(verbs: Any) -> None:
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
    p.set_defaults(func=predict)
