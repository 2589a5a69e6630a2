"""The ceiling's bandwidth comes from the device the engine runs on.

No GPU is lent to these tests: NVML is a fake module (``test_hardware.fake_pynvml``),
``nvidia-smi`` a fake runner, and the engine's devices come from llama.cpp-format logs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest
from tests.hardware.test_hardware import RTX_4090, fake_pynvml
from tests.engines.test_server_settings import CPU_LOG, CUDA_FULL_LOG, CUDA_PARTIAL_LOG, TWO_GPU_LOG

from pytest_tokperf.engines.llama_server.log import parse_llama_server_log
from pytest_tokperf.engines.speed_settings import placement_of
from pytest_tokperf.hardware.bandwidth import bandwidth_for, device_hardware
from pytest_tokperf.hardware.placement import Device, Placement
from pytest_tokperf.results import Bandwidth, EngineInfo, HardwareInfo

CPU = HardwareInfo(
    name="AMD EPYC", kind="cpu",
    measured_bandwidth=Bandwidth(60e9, "measured", "read probe"),
)
H200 = ("NVIDIA H200", "GPU-cccc-3333", 2619, 6144, 141 * 2**30)


def _engine_from_log(log: str, **extra: str) -> EngineInfo:
    pairs = {**parse_llama_server_log(log).to_pairs(), **extra}
    return EngineInfo(name="llama-server", version="b1", build="b1-x", base_url="http://h",
                      backend=pairs.get("backend"), settings=tuple(pairs.items()))


def no_smi(argv: Sequence[str]) -> str | None:
    return None


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine where ``import pynvml`` works but no driver library loads."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_fails=True))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cuda_engine_with_nvml_uses_the_gpu_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    placement = placement_of(_engine_from_log(CUDA_FULL_LOG))
    gpu = device_hardware(placement.device or Device("cpu"), nvml=fake_pynvml([H200]),
                          run=no_smi)
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)
    assert result.bandwidth is not None and result.bandwidth.source == "nvml"
    assert result.bandwidth.bytes_per_s == pytest.approx(2619e6 * 2 * 6144 / 8)
    assert result.explanation.startswith("cuda:0 (NVIDIA H200): 4023 GB/s nvml")
    assert result.hardware is gpu


@pytest.mark.usefixtures("no_nvml")
def test_cuda_engine_without_nvml_uses_the_catalog_by_the_log_name() -> None:
    placement = placement_of(_engine_from_log(CUDA_FULL_LOG))
    gpu = device_hardware(placement.device or Device("cpu"), run=no_smi)
    assert gpu is not None and "NVML unavailable; GPU named by the engine's log" in gpu.detail
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)
    assert result.bandwidth is not None and result.bandwidth.source == "catalog"
    assert result.bandwidth.bytes_per_s == 4800e9  # the H200 row, not the CPU probe


@pytest.mark.usefixtures("no_nvml")
def test_cuda_engine_without_nvml_or_log_asks_nvidia_smi() -> None:
    calls: list[Sequence[str]] = []

    def smi(argv: Sequence[str]) -> str | None:
        calls.append(argv)
        return "0, NVIDIA GeForce RTX 4090, 24564\n1, NVIDIA L4, 23034\n"

    gpu = device_hardware(Device("cuda", 1), run=smi)
    assert calls and calls[0][0] == "nvidia-smi"
    assert gpu is not None and gpu.name == "NVIDIA L4" and gpu.memory_bytes == 23034 * 2**20
    assert gpu.bandwidth is not None and gpu.bandwidth.bytes_per_s == 300e9
    assert device_hardware(Device("cuda", 0), run=no_smi) is None


def test_cpu_engine_on_a_gpu_box_uses_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([RTX_4090]))
    placement = placement_of(_engine_from_log(CPU_LOG, server_args="-ngl 99"))
    assert placement.device == Device("cpu")
    gpu = device_hardware(Device("cuda", 0), run=no_smi)  # the box has a 4090 ...
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)  # ... the engine does not use it
    assert result.bandwidth == CPU.measured_bandwidth
    assert result.explanation.startswith("cpu (llama-server: CPU backend): AMD EPYC, 60.0 GB/s")


def test_partial_offload_adds_the_time_of_each_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    placement = placement_of(_engine_from_log(CUDA_PARTIAL_LOG))
    gpu = HardwareInfo(name="NVIDIA GeForce RTX 4060", kind="gpu",
                       spec_bandwidth=Bandwidth(272e9, "catalog"))
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)
    share = 20 / 33
    expected = 1 / (share / 272e9 + (1 - share) / 60e9)
    assert result.bandwidth is not None and result.bandwidth.source == "split"
    assert result.bandwidth.bytes_per_s == pytest.approx(expected)
    assert [(p.where, round(p.share, 3)) for p in result.parts] == [
        ("cuda:0 (NVIDIA GeForce RTX 4060)", round(share, 3)), ("cpu", round(1 - share, 3))]
    assert result.explanation.startswith(
        "split: 61% of the bytes on cuda:0 (NVIDIA GeForce RTX 4060) at "
        "272 GB/s catalog + 39% in system RAM (AMD EPYC, 60.0 GB/s measured): 1 / (0.61 / "
        "272 GB/s + 0.39 / 60.0 GB/s) = ")
    assert "llama-server log: offloaded 20/33 layers" in result.explanation
    # 61% of the layers on the GPU gives well under half the GPU's speed
    assert result.bandwidth.bytes_per_s < 0.5 * 272e9
    no_cpu = bandwidth_for(placement, gpu=gpu, cpu=None)
    assert no_cpu.bandwidth is None and "no CPU bandwidth is known" in no_cpu.explanation


def test_layer_split_over_two_gpus_is_one_gpus_bandwidth() -> None:
    placement = placement_of(_engine_from_log(TWO_GPU_LOG))
    gpu = HardwareInfo(name="NVIDIA GeForce RTX 3090", kind="gpu",
                       spec_bandwidth=Bandwidth(936e9, "catalog"))
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)
    assert result.bandwidth is not None and result.bandwidth.bytes_per_s == 936e9
    assert "layers split over 2 GPUs: a pipeline, one GPU's bandwidth" in result.explanation


def test_unknown_placement_explicit_and_missing_figures() -> None:
    gpu = HardwareInfo(name="NVIDIA GeForce RTX 4090", kind="gpu",
                       spec_bandwidth=Bandwidth(1008e9, "nvml"))
    unknown = bandwidth_for(Placement(None), gpu=gpu, cpu=CPU)
    assert unknown.bandwidth is not None and unknown.bandwidth.bytes_per_s == 1008e9
    assert "the engine did not say where it runs" in unknown.explanation
    given = bandwidth_for(Placement(Device("cuda", 0)), gpu=gpu, cpu=CPU, explicit=2e12)
    assert given.bandwidth == Bandwidth(2e12, "explicit", "given by the user")
    blank = bandwidth_for(Placement(Device("cuda", 0, "NVIDIA Future X1")), gpu=None, cpu=CPU)
    assert blank.bandwidth is None
    assert "no bandwidth known for NVIDIA Future X1 on cuda:0 (NVIDIA Future X1)" in (
        blank.explanation)
    assumed = bandwidth_for(Placement(Device("cuda", 0)), gpu=gpu, cpu=CPU)
    assert "offload share unknown: all weights assumed on cuda:0" in assumed.explanation


def test_ollama_share_of_vram_splits_the_bandwidth() -> None:
    engine = EngineInfo(name="ollama", version="0.30", build=None, base_url="http://h",
                        settings=(("size_bytes", "10000"), ("size_vram_bytes", "5000")))
    placement = placement_of(engine)
    gpu = HardwareInfo(name="NVIDIA GeForce RTX 4090", kind="gpu",
                       spec_bandwidth=Bandwidth(1008e9, "nvml"))
    result = bandwidth_for(placement, gpu=gpu, cpu=CPU)
    assert result.bandwidth is not None
    assert result.bandwidth.bytes_per_s == pytest.approx(1 / (0.5 / 1008e9 + 0.5 / 60e9))


def test_vulkan_and_metal_devices_come_from_the_catalog() -> None:
    vulkan = device_hardware(Device("vulkan", 0, "AMD Radeon RX 7900 XTX (RADV NAVI31)"),
                             run=no_smi)
    assert vulkan is not None and vulkan.bandwidth is not None
    assert vulkan.bandwidth.bytes_per_s == 960e9

    def mac(argv: Sequence[str]) -> str | None:
        return {"machdep.cpu.brand_string": "Apple M4 Max", "hw.memsize": "1"}.get(argv[-1])

    metal = device_hardware(Device("metal"), run=mac)
    assert metal is None or metal.kind == "apple"  # None off macOS, as here


def test_device_hardware_never_raises() -> None:
    def broken(argv: Sequence[str]) -> str | None:
        raise RuntimeError("nvidia-smi crashed")

    info = device_hardware(Device("cuda", 0), nvml=fake_pynvml([], init_fails=True), run=broken)
    assert info is not None and "detecting cuda:0 failed: RuntimeError" in info.detail
