"""Typed speed settings from llama-server's arguments, /props and start-up log; placement.

The logs below are llama.cpp's own format strings (src/llama.cpp, src/llama-model.cpp,
src/llama-context.cpp, src/llama-kv-cache.cpp, ggml-cuda/-vulkan/-metal init) filled in
for a machine this VM is not: no GPU is lent to these tests, so CUDA, Vulkan and Metal
starts are fakes; the CPU log is this machine's b11434 at -lv 4.
"""

from __future__ import annotations

import pytest

from pytest_tokperf.engines.llama_server import llama_server_settings
from pytest_tokperf.engines.llama_server.log import (
    parse_list_devices,
    parse_llama_server_log,
)
from pytest_tokperf.engines.speed_settings import (
    BackendDevice,
    ServerSettings,
    parse_llama_server_args,
    parse_props,
    placement_of,
)
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.hardware.placement import Device, Placement, backend_of_device_name
from pytest_tokperf.results import EngineInfo

CUDA_FULL_LOG = """\
ggml_cuda_init: found 1 CUDA devices:
  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:19:00.0) - 142540 MiB free
load_tensors: offloading 32 repeating layers to GPU
load_tensors: offloading output layer to GPU
load_tensors: offloaded 33/33 layers to GPU
load_tensors:        CUDA0 model buffer size = 15317.02 MiB
load_tensors:   CPU_Mapped model buffer size =  1002.00 MiB
llama_context: n_batch       = 2048
llama_context: n_ubatch      = 512
llama_context: flash_attn    = auto
llama_context: Flash Attention was auto, set to enabled
llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB
llama_kv_cache: size =  512.00 MiB (  4096 cells,  32 layers,  1/1 seqs), K (f16):  256.00 MiB, V (f16):  256.00 MiB
"""

CUDA_PARTIAL_LOG = """\
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4060) - 7800 MiB free
llm_load_tensors: offloaded 20/33 layers to GPU
llm_load_tensors:        CUDA0 model buffer size =  9000.00 MiB
llm_load_tensors:   CPU_Mapped model buffer size =  7300.00 MiB
llama_context: n_batch       = 512
llama_context: n_ubatch      = 128
llama_context: flash_attn    = 0
llama_kv_cache: size =  272.00 MiB (  4096 cells,  32 layers,  1/1 seqs), K (q8_0):  136.00 MiB, V (q4_0):  72.00 MiB
"""

TWO_GPU_LOG = """\
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3090) - 23000 MiB free
llama_model_load_from_file_impl: using device CUDA1 (NVIDIA GeForce RTX 3090) - 23000 MiB free
load_tensors: offloaded 81/81 layers to GPU
"""

VULKAN_LOG = """\
ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | fp16: 1 | warp size: 64
llama_model_load_from_file_impl: using device Vulkan0 (AMD Radeon RX 7900 XTX (RADV NAVI31)) - 24000 MiB free
load_tensors: offloaded 29/29 layers to GPU
"""

METAL_LOG = """\
ggml_metal_device_init: GPU name:   Apple M4 Max
llama_model_load_from_file_impl: using device Metal (Apple M4 Max) (unknown id) - 98303 MiB free
load_tensors: offloaded 37/37 layers to GPU
llama_context: Flash Attention was auto, set to enabled
"""

CPU_LOG = """\
warning: no usable GPU found, --gpu-layers option will be ignored
0.00.002.498 I cmn  common_param: system_info: n_threads = 1 (n_threads_batch = 1) / 2 | CPU : SSE3 = 1 |
0.00.030.998 I load_tensors:   CPU_Mapped model buffer size =    64.03 MiB
0.00.031.298 I llama_context: n_batch               = 512
0.00.031.298 I llama_context: n_ubatch              = 512
0.00.031.299 I llama_context: flash_attn            = auto
0.00.033.447 I llama_kv_cache: size =    4.00 MiB (   512 cells,   8 layers,  4/1 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB
0.00.033.803 I resolve_fused_ops: Flash Attention enabled
"""


def test_args_short_long_inline_and_switch() -> None:
    s = parse_llama_server_args(
        ["-m", "x.gguf", "-fa", "on", "-ngl", "99", "--cache-type-k=q8_0", "-ctv", "q4_0",
         "-b", "1024", "--ubatch-size", "256", "-t", "8", "-tb", "16", "-c", "8192", "-np", "2",
         "-sm", "row", "-mg", "1", "-ts", "3,1", "-dev", "CUDA0,CUDA1"])
    assert (s.flash_attn, s.gpu_layers, s.cache_type_k, s.cache_type_v) == ("on", "99", "q8_0", "q4_0")
    assert (s.batch_size, s.ubatch_size, s.threads, s.threads_batch) == (1024, 256, 8, 16)
    assert (s.context_size, s.parallel) == (4096, 2)  # -c is the total: per slot as /props says
    assert (s.split_mode, s.main_gpu, s.tensor_split, s.device_arg) == ("row", 1, "3,1", "CUDA0,CUDA1")
    assert parse_llama_server_args(["-fa", "--no-mmap"]).flash_attn == "on"  # older switch
    assert parse_llama_server_args(["-fa"]).flash_attn == "on"
    assert parse_llama_server_args(["-ngl", "all"]).gpu_layers == "all"
    assert parse_llama_server_args([]).sources == ()


def test_environment_variables_lose_to_the_command_line() -> None:
    env = {"LLAMA_ARG_N_GPU_LAYERS": "10", "LLAMA_ARG_FLASH_ATTN": "off", "LLAMA_ARG_BATCH": "64"}
    s = parse_llama_server_args(["-ngl", "20"], env)
    assert (s.gpu_layers, s.flash_attn, s.batch_size) == ("20", "off", 64)


def test_props_give_context_per_slot_and_slots() -> None:
    s = parse_props({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})
    assert (s.context_size, s.parallel) == (4096, 1)
    assert parse_props({}).context_size is None


def test_cuda_log_full_offload() -> None:
    s = parse_llama_server_log(CUDA_FULL_LOG)
    assert s.backend == "cuda"
    assert s.devices == (BackendDevice("CUDA0", "NVIDIA H200", 142540 * 2**20,
                                       round(15317.02 * 2**20)),)
    assert (s.offloaded_layers, s.layer_count) == (33, 33)
    assert (s.batch_size, s.ubatch_size, s.flash_attn, s.flash_attn_active) == (2048, 512, "auto", True)
    assert (s.cache_type_k, s.cache_type_v) == ("f16", "f16")


def test_cuda_log_partial_offload_older_prefix_and_kv_types() -> None:
    s = parse_llama_server_log(CUDA_PARTIAL_LOG)
    assert (s.backend, s.offloaded_layers, s.layer_count) == ("cuda", 20, 33)
    assert (s.cache_type_k, s.cache_type_v, s.flash_attn) == ("q8_0", "q4_0", "off")
    assert s.devices[0].description == "NVIDIA GeForce RTX 4060"


def test_vulkan_metal_and_cpu_logs() -> None:
    vulkan = parse_llama_server_log(VULKAN_LOG)
    assert vulkan.backend == "vulkan"
    assert vulkan.devices[0].description == "AMD Radeon RX 7900 XTX (RADV NAVI31)"
    metal = parse_llama_server_log(METAL_LOG)
    assert (metal.backend, metal.devices[0].description, metal.flash_attn_active) == (
        "metal", "Apple M4 Max", True)
    cpu = parse_llama_server_log(CPU_LOG)
    assert (cpu.backend, cpu.devices, cpu.threads, cpu.threads_batch) == ("cpu", (), 1, 1)
    assert (cpu.batch_size, cpu.flash_attn, cpu.flash_attn_active) == (512, "auto", True)
    quiet = parse_llama_server_log("srv  llama_server: model loaded\n")
    assert quiet.backend is None and quiet.offloaded_layers is None


def test_list_devices() -> None:
    cuda = parse_list_devices(
        "Available devices:\n  CUDA0: NVIDIA H200 (143771 MiB, 143000 MiB free)\n"
        "  CUDA1: NVIDIA H200 (143771 MiB, 143000 MiB free)\n")
    assert cuda.backend == "cuda" and [d.name for d in cuda.devices] == ["CUDA0", "CUDA1"]
    assert cuda.devices[0].memory_bytes == 143771 * 2**20
    assert parse_list_devices("Available devices:\n  (none)\n").backend == "cpu"
    assert parse_list_devices("error: unknown argument").backend is None


def test_pairs_round_trip_and_older_names() -> None:
    settings = parse_llama_server_args(["-fa", "off", "-ngl", "20", "-ctk", "q8_0"]).merged(
        parse_llama_server_log(CUDA_PARTIAL_LOG))
    again = ServerSettings.from_pairs(settings.to_pairs())
    assert again.devices == settings.devices
    assert (again.flash_attn, again.gpu_layers, again.offloaded_layers) == ("off", "20", 20)
    assert again.cache_type_k == "q8_0"  # the log's type wins over the request
    old = ServerSettings.from_pairs((("n_batch", "512"), ("fa", "1"), ("kv_type", "q8_0")))
    assert (old.batch_size, old.flash_attn, old.cache_type_k, old.cache_type_v) == (
        512, "on", "q8_0", "q8_0")
    ollama = ServerSettings.from_pairs({"size_bytes": "8000", "size_vram_bytes": "6000"})
    assert ollama.vram_fraction == pytest.approx(0.75)


def test_llama_server_settings_reads_the_log_the_session_names(tmp_path: object) -> None:
    from pathlib import Path

    log = Path(str(tmp_path)) / "llama-server.log"
    log.write_text(CUDA_FULL_LOG)
    s = llama_server_settings({"server_args": "-ngl 99", "log_path": str(log)},
                              {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})
    assert (s.gpu_layers, s.offloaded_layers, s.backend, s.context_size) == ("99", 33, "cuda", 4096)
    assert s.sources == ("command line", "/props", "server log")


def _engine(name: str = "llama-server", **settings: str) -> EngineInfo:
    return EngineInfo(name=name, version="b1", build="b1-x", base_url="http://h",
                      settings=tuple(settings.items()))


def test_placement_of_a_llama_server() -> None:
    full = placement_of(_engine(**parse_llama_server_log(CUDA_FULL_LOG).to_pairs()))
    assert full.device == Device("cuda", 0, "NVIDIA H200") and full.gpu_fraction == 1.0
    assert "offloaded 33/33" in full.source
    partial = placement_of(_engine(**parse_llama_server_log(CUDA_PARTIAL_LOG).to_pairs()))
    assert partial.gpu_fraction == pytest.approx(20 / 33)
    cpu_build = placement_of(_engine(**parse_llama_server_log(CPU_LOG).to_pairs(),
                                     server_args="-ngl 99"))
    assert cpu_build.device == Device("cpu")
    no_offload = placement_of(_engine(backend="cuda", server_args="-ngl 0"))
    assert no_offload.device == Device("cpu") and "no layer offloaded" in no_offload.source
    two = placement_of(_engine(**parse_llama_server_log(TWO_GPU_LOG).to_pairs()))
    assert (two.gpu_count, two.gpu_fraction) == (2, 1.0)
    unknown = placement_of(_engine())
    assert unknown.device is None
    asked = placement_of(_engine(backend="cuda", server_args="-ngl all"))
    assert asked.device == Device("cuda", 0) and asked.gpu_fraction == 1.0


def test_placement_of_other_engines_and_the_override() -> None:
    ollama = placement_of(_engine("ollama", size_bytes="8000", size_vram_bytes="2000"))
    assert ollama.device == Device("gpu", 0) and ollama.gpu_fraction == pytest.approx(0.25)
    assert "25% of the model in GPU memory" in ollama.source
    assert placement_of(_engine("ollama", size_bytes="8000", size_vram_bytes="0")).device == Device("cpu")
    assert placement_of(_engine("vllm")).device == Device("cuda", 0)
    assert placement_of(_engine("sglang")).device == Device("cuda", 0)
    assert placement_of(_engine("mlx")).device == Device("metal")
    forced = placement_of(_engine("vllm"), override=Device.parse("cpu"))
    assert forced == Placement(Device("cpu"), source="--tokperf-device")


@pytest.mark.parametrize(
    ("text", "device"),
    [("cpu", Device("cpu")), ("cuda", Device("cuda", 0)), ("CUDA:1", Device("cuda", 1)),
     ("metal", Device("metal")), ("vulkan:0", Device("vulkan", 0)), ("rocm:2", Device("rocm", 2))],
)
def test_device_parse(text: str, device: Device) -> None:
    assert Device.parse(text) == device


@pytest.mark.parametrize(("text", "fragment"), [
    ("tpu:0", "'tpu:0' is not a device; use cpu, metal, cuda:N"),
    ("metal:1", "metal takes no index"),
    ("cuda:x", "is not a device"),
])
def test_device_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        Device.parse(text)


def test_backend_of_device_names() -> None:
    assert [backend_of_device_name(n) for n in ("CUDA0", "ROCm1", "Vulkan0", "Metal", "MTL0",
                                                  "CPU_Mapped", "CUDA_Host", "SYCL0", "BLAS")] == [
        "cuda", "rocm", "vulkan", "metal", "metal", "cpu", "cpu", "sycl", "cpu"]


def test_tokperf_device_option_resolves_to_a_device(tmp_path: object) -> None:
    from pathlib import Path

    from pytest_tokperf.settings import resolve

    def settings(env: dict[str, str]) -> object:
        return resolve(cli=lambda name: None, ini=lambda key: None, env=env,
                       rootdir=Path(str(tmp_path)))

    assert settings({"PYTEST_TOKPERF_DEVICE": "cuda:1"}).device == Device("cuda", 1)  # type: ignore[attr-defined]
    assert settings({}).device is None  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"--tokperf-device 'tpu' is not a device; use cpu, "
                       r"metal, cuda:N.*\(from environment variable PYTEST_TOKPERF_DEVICE\)"):
        settings({"PYTEST_TOKPERF_DEVICE": "tpu"})
