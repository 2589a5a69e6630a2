"""Fake engine programs for PATH: ``vllm``, ``sglang``, ``mlx_lm.server``, ``ollama``, ``lms``.

``install(bin_dir, record)`` writes one executable per program. Each appends what it was
called with (argv, and the ``OLLAMA_*`` environment) to ``record`` as a JSON line, then:

- asked for help (``vllm serve --help=all``, ``sglang serve --help``,
  ``mlx_lm.server --help``, ``ollama serve --help``) prints an excerpt of the real help
  in the real layout (Python argparse; cobra's ``Environment Variables:`` block that
  ``appendEnvDocs`` in ollama's cmd/cmd.go writes) and exits 0;
- asked to serve, serves the matching fake from ``fake_engines`` on the port it was
  given (``--port``, or ``OLLAMA_HOST`` for Ollama), honouring the flags that change
  the wire format (vLLM's per-request metrics and cached-token details, SGLang's radix
  cache), until SIGTERM;
- ``lms server start --port N`` starts a detached LM Studio daemon and returns, as the
  real one hands the server to its daemon; ``lms server stop`` stops it.

``help_variant`` picks an older build's help (``vllm-0.9``: no per-request metrics) or
none at all (``silent``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = {"vllm": "vllm", "sglang": "sglang", "mlx": "mlx_lm.server", "ollama": "ollama",
            "lmstudio": "lms"}

VLLM_HELP = """usage: vllm serve [model_tag] [options]

Start the vLLM OpenAI Compatible API server.

positional arguments:
  model_tag             The model tag to serve (optional if specified in config)
                        (default: None)

options:
  -h, --help            show this help message and exit

Frontend:
  Arguments for the OpenAI-compatible frontend server.

  --enable-per-request-metrics, --no-enable-per-request-metrics
                        If set to True, include per-request timing metrics in API
                        responses. (default: False)
  --enable-prompt-tokens-details, --no-enable-prompt-tokens-details
                        If set to True, enable prompt_tokens_details in usage.
                        (default: False)
  --host HOST           Host name. (default: None)
  --port PORT           Port number. (default: 8000)

CacheConfig:
  Configuration for the KV cache.

  --enable-prefix-caching, --no-enable-prefix-caching
                        Whether to enable prefix caching. (default: None)
"""

HELPS = {
    "silent": "",  # a wrapper script that prints no help
    "vllm": VLLM_HELP,
    "vllm-0.9": VLLM_HELP.replace(
        "  --enable-per-request-metrics, --no-enable-per-request-metrics\n"
        "                        If set to True, include per-request timing metrics in API\n"
        "                        responses. (default: False)\n", ""),
    "sglang": """usage: sglang serve [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]
                    [--disable-radix-cache]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights. This can be a local folder or
                        a Hugging Face repo ID.
  --host HOST           The host of the HTTP server.
  --port PORT           The port of the HTTP server.
  --disable-radix-cache
                        Disable RadixAttention for prefix caching.
""",
    "mlx": """usage: mlx_lm.server [-h] [--model MODEL] [--host HOST] [--port PORT]
                     [--prompt-cache-size PROMPT_CACHE_SIZE]

LLM http server.

options:
  -h, --help            show this help message and exit
  --model MODEL         The path to the MLX model weights, tokenizer, and config
  --host HOST           Host for the HTTP server (default: 127.0.0.1)
  --port PORT           Port for the HTTP server (default: 8080)
  --prompt-cache-size PROMPT_CACHE_SIZE
                        Maximum number of distinct KV caches to hold in the prompt
                        cache
""",
    "ollama": "Start Ollama\n\nUsage:\n  ollama serve [flags]\n\nAliases:\n  serve, start\n\n"
              "Flags:\n  -h, --help   help for serve\n\nEnvironment Variables:\n" + "".join(
                  f"      {name:<27s}   {text}\n" for name, text in (
                      ("OLLAMA_DEBUG", "Show additional debug information (e.g. OLLAMA_DEBUG=1)"),
                      ("OLLAMA_HOST", "IP Address for the ollama server (default 127.0.0.1:11434)"),
                      ("OLLAMA_CONTEXT_LENGTH", "Context length to use unless otherwise "
                                                "specified (default: 4k/32k/256k based on VRAM)"),
                      ("OLLAMA_KEEP_ALIVE", 'The duration that models stay loaded in memory '
                                            '(default "5m")'),
                      ("OLLAMA_MAX_LOADED_MODELS", "Maximum number of loaded models per GPU"),
                      ("OLLAMA_NUM_PARALLEL", "Maximum number of parallel requests"),
                  )),
}


def install(bin_dir: Path, record: Path, help_variant: dict[str, str] | None = None) -> None:
    """One executable per engine program in ``bin_dir``, each logging to ``record``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for engine, program in PROGRAMS.items():
        helps = (help_variant or {}).get(engine, engine)
        script = bin_dir / program
        script.write_text(
            f"#!{sys.executable}\n"
            f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
            f"from tests.support.fake_engine_bins import main\n"
            f"sys.exit(main({engine!r}, {helps!r}, {str(record)!r}))\n")
        script.chmod(0o755)


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def main(engine: str, helps: str, record: str) -> int:
    argv = sys.argv[1:]
    env = {k: v for k, v in os.environ.items() if k.startswith("OLLAMA_")}
    with open(record, "a") as log:
        log.write(json.dumps({"program": Path(sys.argv[0]).name, "argv": argv, "env": env}) + "\n")
    if any(a == "-h" or a.startswith("--help") for a in argv):
        if engine == "lmstudio":
            return 0
        print(HELPS[helps])
        return 0
    if engine == "lmstudio":
        return _lms(argv, Path(record).with_suffix(".lms.pid"))
    _serve(engine, argv, env)
    return 0


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _serve(engine: str, argv: list[str], env: dict[str, str]) -> None:
    from tests.support.fake_engines import FakeLMStudio, FakeMLX, FakeOllama, FakeSGLang, FakeVLLM
    from tests.support.fake_http import FakeServer, Handler, _Server

    fake: FakeServer
    if engine == "vllm":
        fake = FakeVLLM(model=argv[1],
                        per_request_metrics="--enable-per-request-metrics" in argv,
                        prompt_details="--enable-prompt-tokens-details" in argv)
    elif engine == "sglang":
        fake = FakeSGLang(model_path=_option(argv, "--model-path"),
                          radix_cache="--disable-radix-cache" not in argv)
    elif engine == "mlx":
        fake = FakeMLX(model=_option(argv, "--model"))
    elif engine == "ollama":
        fake = FakeOllama(models=("llama3.2:3b",))
    else:
        fake = FakeLMStudio()
    port = int(env["OLLAMA_HOST"].rsplit(":", 1)[1]) if engine == "ollama" \
        else int(_option(argv, "--port"))
    server = _Server(("127.0.0.1", port), Handler)
    server.fake = fake
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever(poll_interval=0.05)


def _lms(argv: list[str], pid_file: Path) -> int:
    if argv[:2] == ["server", "start"]:
        daemon = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
             f"import tests.support.fake_engine_bins as f; f._serve('lmstudio', {argv!r}, {{}})"],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        pid_file.write_text(str(daemon.pid))
        print(f"Success! Server is now running on port {_option(argv, '--port')}")
        return 0
    if argv[:2] == ["server", "stop"]:
        stop(pid_file)
        print("Stopped the server on port 1234.")
        return 0
    print(f"lms: unknown command {argv!r}", file=sys.stderr)
    return 2


def stop(pid_file: Path) -> None:
    """End a fake LM Studio daemon (also the test's cleanup when ``lms server stop`` did not)."""
    if not pid_file.exists():
        return
    try:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    except (ProcessLookupError, ValueError):
        pass
    pid_file.unlink()
