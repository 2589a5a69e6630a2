"""Where a decode step's time goes: per-token time against layer count, beside the bytes.

The bytes6 A/B (16 vs 17 layers, ``bench_ab.py``) reads about -4.0% where the bytes per
token predict -5.4%. A layer adds its weights' bytes, so if decode were bandwidth-bound
throughout, per-token time would be ``(B0 + b L) / BW``: the part that does not grow with
the layers (the output matrix, one embedding row) as large, in layers, as its bytes
(``B0 / b``). This serves generated models that differ only in their layer count (the
default width, ``bench_ab.layered``), all up at once with ``--load-mode none``, one request
each per round in a shuffled order (a machine phase falls on all of them alike), and fits
the engine's own per-token time as ``c + s L``:

* ``s``: the time a layer costs, and the bandwidth that implies (``b / s``);
* ``c / s`` against ``B0 / b``: the fixed part of a step, in layers, in time and in bytes.
  A time share well above the bytes share is per-token work that reads no weights
  (sampling over the vocabulary, the graph's launch and sync, the server's loop): it
  dilutes any layer-count step, and the fit's own prediction of the 16 -> 17 ratio
  says by how much;
* the fit's residuals: a straight line that misses a point says the layers are not alike
  (a cache or page effect at some size).

Intervals are a bootstrap over rounds. About 6 minutes with the defaults (364 s measured);
the models are written first (1-2 GB each, cached), which takes a minute or two on a fresh machine.

Run::

    PYTHONPATH=$PWD python lab/drivers/bench_layers.py
    PYTHONPATH=$PWD python lab/drivers/bench_layers.py --layers 4,10,16,17,24 --rounds 60
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_ab import layered, servers

from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.builds.install import installed_llama_server
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.results import Workload


def fit(layers: list[int], times: list[float]) -> tuple[float, float]:
    """Least-squares ``times = c + s * layers``; (c, s)."""
    s, c = np.polyfit(np.asarray(layers, float), np.asarray(times, float), 1)
    return float(c), float(s)


def parse_layers(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--layers {text!r}: write layer counts separated by commas, "
                         "e.g. 4,10,16,17,24") from None
    if len(out) < 3 or out[0] < 1:
        raise SystemExit(f"--layers {text!r}: a line needs 3 or more positive layer counts "
                         "to show its residuals, e.g. 4,10,16,17,24")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="4,10,16,17,24", help="layer counts, comma-separated")
    p.add_argument("--rounds", type=int, default=60, help="requests per model")
    p.add_argument("--tokens", type=int, default=16, help="tokens generated per request")
    p.add_argument("--prompt", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples of the rounds")
    a = p.parse_args(argv)
    layers = parse_layers(a.layers)
    if a.rounds < 5:
        raise SystemExit(f"--rounds {a.rounds}: use 5 or more (a bootstrap over rounds)")
    built = installed_llama_server()
    if built is None:
        print("llama-server is not built: run `tokperf install-engine llama-server`")
        return 2
    started = time.monotonic()
    models = {n: layered(n) for n in layers}
    bytes_ = {n: footprint(load_gguf(m)).weights_bytes for n, m in models.items()}
    b0_bytes, b_bytes = fit(layers, [float(bytes_[n]) for n in layers])
    print(f"models written/found in {time.monotonic() - started:.0f} s; bytes per token: "
          + ", ".join(f"L{n} {bytes_[n] / 1e6:.0f} MB" for n in layers)
          + f"; a layer {b_bytes / 1e6:.1f} MB, the fixed part {b0_bytes / 1e6:.0f} MB "
          f"({b0_bytes / b_bytes:.2f} layers)")
    logs = Path(tempfile.mkdtemp(prefix="tokperf-bench-layers-"))
    workload = Workload(prompt_tokens=a.prompt, generate_tokens=a.tokens, repetitions=1,
                        warmup=0)
    rng = random.Random(7)
    # per round, per layer count: (engine s/token, client s/token)
    rows: list[dict[int, tuple[float, float]]] = []
    started = time.monotonic()
    own = ("--load-mode", "none")
    with servers([(built.binary, models[n]) for n in layers], a.threads, logs, own) as engines:
        by_layers = dict(zip(layers, engines, strict=True))
        for n in layers:  # warm each once
            run_workload(by_layers[n], workload, MeasureOptions(salt_base=1, sample_load=False))
        for r in range(a.rounds):
            order = layers[:]
            rng.shuffle(order)
            row = {}
            for n in order:
                res = run_workload(by_layers[n], workload,
                                   MeasureOptions(salt_base=10 + r, sample_load=False))
                s = res.samples[0]
                if s.engine_decode_tokens_per_s and s.decode_tokens_per_s:
                    row[n] = (1 / s.engine_decode_tokens_per_s, 1 / s.decode_tokens_per_s)
            if len(row) == len(layers):
                rows.append(row)
    wall = time.monotonic() - started
    print(f"{len(rows)} complete rounds x {len(layers)} models in {wall:.0f} s "
          f"({a.tokens} tokens, prompt {a.prompt}, {a.threads} threads each)")
    if len(rows) < 5:
        print("too few complete rounds to fit")
        return 1
    rng_np = np.random.default_rng(11)
    for clock, k in (("engine", 0), ("client", 1)):
        med = [statistics.median(row[n][k] for row in rows) for n in layers]
        c, s = fit(layers, med)
        resid = [m - (c + s * n) for n, m in zip(layers, med, strict=True)]
        boots = []
        arr = np.array([[row[n][k] for n in layers] for row in rows])
        boot_resid = []
        boot_step = []
        for _ in range(a.boot):
            pick = arr[rng_np.integers(0, len(rows), len(rows))]
            meds = np.median(pick, axis=0)
            bc, bs = fit(layers, list(meds))
            boots.append((bc / bs, (bc + 17 * bs) / (bc + 16 * bs)))
            # each model's distance from the line, as a share of the line's time there
            boot_resid.append([(m - (bc + bs * n)) / (bc + bs * n)
                               for n, m in zip(layers, meds, strict=True)])
            if 16 in layers and 17 in layers:
                boot_step.append(meds[layers.index(16)] / meds[layers.index(17)] - 1)
        eq_lo, eq_hi = np.percentile([b[0] for b in boots], [2.5, 97.5])
        r_lo, r_hi = np.percentile([b[1] for b in boots], [2.5, 97.5])
        res_lo, res_hi = np.percentile(np.asarray(boot_resid), [2.5, 97.5], axis=0)
        ratio = (c + 17 * s) / (c + 16 * s)
        bytes_ratio = (b0_bytes + 17 * b_bytes) / (b0_bytes + 16 * b_bytes)
        print(f"== {clock}'s clock: per-token time (median of rounds) "
              + ", ".join(f"L{n} {m * 1e3:.2f} ms" for n, m in zip(layers, med, strict=True)))
        print(f"   fit: {c * 1e3:.2f} ms fixed + {s * 1e3:.3f} ms a layer (a layer's bytes at "
              f"{b_bytes / s / 1e9:.1f} GB/s); residuals "
              + ", ".join(f"L{n} {x * 1e3:+.2f} ms" for n, x in zip(layers, resid, strict=True)))
        print("   off the line (share of its time, 95% bootstrap): "
              + ", ".join(f"L{n} {x / (c + s * n):+.2%} [{lo:+.2%}, {hi:+.2%}]"
                          for n, x, lo, hi in zip(layers, resid, res_lo, res_hi, strict=True)))
        print(f"   the fixed part in layers: time {c / s:.2f} [{eq_lo:.2f}, {eq_hi:.2f}] vs "
              f"bytes {b0_bytes / b_bytes:.2f}; fixed time the fixed bytes do not explain: "
              f"{(c - b0_bytes * s / b_bytes) * 1e3:.2f} ms a token "
              f"({(c - b0_bytes * s / b_bytes) / (c + 16 * s):.0%} of L16's step)")
        print(f"   16 -> 17 layers: decode {1 / ratio - 1:+.2%} [{1 / r_hi - 1:+.2%}, "
              f"{1 / r_lo - 1:+.2%}] from the fit, {1 / bytes_ratio - 1:+.2%} from the bytes"
              + (f", {med[layers.index(16)] / med[layers.index(17)] - 1:+.2%} "
                 f"[{np.percentile(boot_step, 2.5):+.2%}, {np.percentile(boot_step, 97.5):+.2%}]"
                 " measured" if boot_step else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
