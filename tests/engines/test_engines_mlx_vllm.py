"""What the mlx_lm and vLLM adapters read beside the stream (mlx_lm's DEBUG log, vLLM's
/metrics, mlx_lm's fingerprint), how they are started, and each run's own salts: the
parts the real-engine tests exercise, here without the engines."""

from __future__ import annotations

from pathlib import Path

from pytest_tokperf.bench.run import SALTS_PER_BENCH, BenchRun, salt_seed
from pytest_tokperf.engines.mlx import MLX, log_decode
from pytest_tokperf.engines.speed_settings import placement_of
from pytest_tokperf.engines.vllm import _grown, histograms
from pytest_tokperf.launch.plans import VLLM_MODULE, launch_plan, mlx_plan, vllm_plan
from pytest_tokperf.results import EngineInfo
from pytest_tokperf.settings import resolve
from tests.support.fake_engines import FakeMLX

MLX_LOG = """\
2026-12-01 15:42:13,963 - INFO - Prompt Cache: 0 sequences, 0.00 GB
2026-12-01 15:42:14,001 - DEBUG - Starting stream:
2026-12-01 15:42:14,100 - DEBUG - old
2026-12-01 15:42:20,000 - DEBUG - Incoming Request Body: {
\t"prompt": "x"
}
2026-12-01 15:42:20,010 - DEBUG - Starting stream:
2026-12-01 15:42:21,474 - INFO - Prompt processing progress: 7/7
2026-12-01 15:42:21,500 - DEBUG - cxv
2026-12-01 15:42:21,550 - DEBUG - 
\n
2026-12-01 15:42:21,600 - DEBUG -  kh
127.0.0.1 - - [01/Dec/2026 15:42:21] "POST /v1/completions HTTP/1.1" 200 -
"""


def test_mlx_log_gives_the_last_generations_token_times() -> None:
    tokens, seconds = log_decode(MLX_LOG) or (0, 0.0)
    assert tokens == 3  # a token whose text is a newline is still one line
    assert abs(seconds - 0.100) < 1e-6  # the log stamps milliseconds
    assert log_decode("2026-12-01 15:42:14,001 - DEBUG - Starting stream:\n") is None


METRICS_BEFORE = """\
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 30.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 31.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.04
"""


def test_vllm_metrics_growth_is_one_requests_decode_and_ttft() -> None:
    after = METRICS_BEFORE.replace("} 31.0", "} 62.0").replace("} 0.5", "} 0.81") \
        .replace("_count{engine=\"0\",model_name=\"m\"} 1.0", "_count{engine=\"0\",model_name=\"m\"} 2.0") \
        .replace("} 0.04", "} 0.09")
    before, later = histograms(METRICS_BEFORE), histograms(after)
    assert before["vllm:inter_token_latency_seconds_count"] == 31.0
    n, seconds = _grown(before, later, "vllm:inter_token_latency_seconds") or (0, 0.0)
    assert n == 31 and abs(seconds - 0.31) < 1e-9
    n, seconds = _grown(before, later, "vllm:time_to_first_token_seconds") or (0, 0.0)
    assert n == 1 and abs(seconds - 0.05) < 1e-9
    assert _grown({}, later, "vllm:inter_token_latency_seconds") is None


def test_mlx_device_comes_from_its_fingerprint_not_from_the_engine_name() -> None:
    fake = FakeMLX()
    fake.fingerprint = "0.32.2-0.32.4-Linux-6.18.44-x86_64-with-glibc2.36-x86_64"
    with fake:
        info = MLX(fake.url).info()
    settings = dict(info.settings)
    assert settings["device"] == "cpu" and "'x86_64'" in settings["device_source"]
    assert placement_of(info).device is not None and placement_of(info).device.kind == "cpu"
    with FakeMLX() as metal:  # applegpu_g15s
        assert dict(MLX(metal.url).info().settings)["device"] == "metal"


def test_two_models_behind_one_mlx_url_are_told_apart() -> None:
    with FakeMLX(eos_after=3) as short, FakeMLX(eos_after=5) as long:
        one, other = MLX(short.url).model_identity(), MLX(long.url).model_identity()
    assert one is not None and other is not None and one.file_name != other.file_name


def test_an_engines_reported_device_wins_over_its_usual_one() -> None:
    usual = EngineInfo(name="vllm", version="0.32.0", build=None, base_url="http://x")
    assert placement_of(usual).device is not None and placement_of(usual).device.kind == "cuda"
    on_cpu = EngineInfo(name="vllm", version="0.32.0", build=None, base_url="http://x",
                        settings=(("device", "cpu"), ("device_source", "VLLM_TARGET_DEVICE")))
    placement = placement_of(on_cpu)
    assert placement.device is not None and placement.device.kind == "cpu"
    assert placement.source == "VLLM_TARGET_DEVICE"


HELP = "--port --no-enable-prefix-caching --max-model-len --enforce-eager --dtype --log-level"


def test_vllm_cpu_is_started_as_a_module_with_the_cpu_recipe() -> None:
    plan = vllm_plan(Path("/v/bin/python"), "/m", 9, HELP, cpu=True, context_size=2048)
    assert plan.command[:5] == ("/v/bin/python", "-m", VLLM_MODULE, "--model", "/m")
    assert plan.command[-5:] == ("--max-model-len", "2048", "--enforce-eager", "--dtype",
                                 "float32")
    assert dict(plan.env)["VLLM_TARGET_DEVICE"] == "cpu"
    assert dict(plan.applied) == {"ctx_size": "2048", "dtype": "float32",
                                  "vllm_target_device": "cpu"}
    mine = vllm_plan(Path("vllm"), "m", 9, HELP, ("--dtype=bfloat16",), cpu=True)
    assert mine.command[:2] == ("vllm", "serve") and dict(mine.applied)["dtype"] == "bfloat16"
    gpu = vllm_plan(Path("vllm"), "m", 9, HELP)
    assert gpu.env == () and "--enforce-eager" not in gpu.command and gpu.applied == ()


def test_only_settings_an_engine_received_are_applied() -> None:
    mlx = mlx_plan(Path("mlx_lm.server"), "m", 9, "--port --prompt-cache-size --log-level")
    assert mlx.command[-4:] == ("--prompt-cache-size", "0", "--log-level", "DEBUG")
    assert mlx.applied == ()
    ollama = launch_plan("ollama", model=None, port=2, binary=Path("ollama"), parallel=1,
                         context_size=4096, help_text="OLLAMA_NUM_PARALLEL OLLAMA_CONTEXT_LENGTH")
    assert dict(ollama.applied) == {"parallel": "1", "ctx_size": "4096"}


def test_each_run_and_each_tok_bench_has_its_own_salts(tmp_path: Path) -> None:
    assert salt_seed("run-a") != salt_seed("run-b") and salt_seed("a") == salt_seed("a")
    values = {"db": "off", "model": "test"}
    settings = resolve(lambda n: values.get(n), lambda key: None, {}, tmp_path)
    runs = [BenchRun.open(settings, log_dir=tmp_path) for _ in range(2)]
    try:
        assert runs[0].salt_seed != runs[1].salt_seed
        benches = [runs[0].tok_bench(f"t{i}") for i in range(2)]
        bases = [b.options.salt_base for b in benches]
        assert bases[1] - bases[0] == SALTS_PER_BENCH and bases[0] == runs[0].salt_seed
    finally:
        for run in runs:
            run.close()
