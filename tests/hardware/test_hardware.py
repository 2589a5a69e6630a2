"""Hardware catalog, bandwidth parsing, detection providers and the read probe."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from pytest_tokperf.errors import ConfigError, TokperfWarning
from pytest_tokperf.hardware import detect as detect_module
from pytest_tokperf.hardware.apple import detect_apple, parse_gpu_cores
from pytest_tokperf.hardware.catalog import (
    CATALOG_ENV,
    CATALOG_FILE,
    close_names,
    load_catalog,
    lookup,
)
from pytest_tokperf.hardware.detect import detect_hardware
from pytest_tokperf.hardware.linux_cpu import (
    detect_linux_cpu,
    parse_cpu_model,
    parse_dmidecode,
    parse_mem_total,
)
from pytest_tokperf.hardware.nvidia import detect_nvidia, nvml_bandwidth_bytes_per_s
from pytest_tokperf.hardware.probe import ReadProbe, probe_read_bandwidth
from pytest_tokperf.hardware.units import format_bandwidth, parse_bandwidth
from pytest_tokperf.results import HardwareInfo

HEADER = "name,kind,match,memory_gb,bandwidth_gb_s,fp16_tflops,gpu_cores,source\n"


# --- catalog ---------------------------------------------------------------------------


def test_catalog_rows_have_source_and_positive_bandwidth() -> None:
    rows = load_catalog()
    assert len(rows) > 100
    for row in rows:
        # a source is a public page (vendor spec, whitepaper) or the spelled-out arithmetic
        assert row.source.startswith(("https://", "arithmetic: ")), row.name
        assert row.bandwidth_bytes_per_s > 0, row.name
        assert row.kind in ("gpu", "apple", "cpu")
        assert row.aliases, row.name


def test_catalog_ships_in_the_package_and_db_links_to_it() -> None:
    from importlib import resources

    packaged = resources.files("pytest_tokperf.hardware").joinpath(CATALOG_FILE)
    assert packaged.is_file()
    repo_copy = Path(__file__).resolve().parents[2] / "db" / "hardware.csv"
    if repo_copy.exists():  # a source checkout: one file, two names
        assert repo_copy.resolve() == Path(str(packaged)).resolve()


@pytest.mark.parametrize(
    ("detected", "expected", "gb_s"),
    [
        ("NVIDIA RTX 5000 Ada Generation", "NVIDIA RTX 5000 Ada", 576),
        ("NVIDIA RTX 4000 Ada Generation", "NVIDIA RTX 4000 Ada", 360),
        ("NVIDIA RTX 4000 SFF Ada Generation", "NVIDIA RTX 4000 SFF Ada", 280),
        ("NVIDIA RTX PRO 4500 Blackwell", "NVIDIA RTX PRO 4500 Blackwell", 896),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
         "NVIDIA RTX PRO 6000 Blackwell Max-Q", 1792),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell",
         1792),
        ("Jetson AGX Orin", "NVIDIA Jetson AGX Orin", 204.8),
        ("AMD Radeon VII", "AMD Radeon VII", 1024),
        ("AMD Radeon AI PRO R9700", "AMD Radeon AI PRO R9700", 640),
        ("AMD Radeon RX 9070 XT (RADV GFX1201)", "AMD Radeon RX 9070 XT", 640),
        ("AMD Radeon RX 9070", "AMD Radeon RX 9070", 640),
        ("Intel(R) Arc(TM) A770 Graphics", "Intel Arc A770", 560),
        ("Intel(R) Arc(TM) B580 Graphics", "Intel Arc B580", 456),
    ],
)
def test_catalog_has_devices_with_published_llama_cpp_results(
    detected: str, expected: str, gb_s: float
) -> None:
    entry = lookup(detected)
    assert entry is not None and entry.name == expected
    assert entry.bandwidth_bytes_per_s == pytest.approx(gb_s * 1e9)


def test_catalog_aliases_are_shared_only_by_binned_variants() -> None:
    owners: dict[str, list[Any]] = {}
    for row in load_catalog():
        for alias in row.aliases:
            owners.setdefault(alias, []).append(row)
    for alias, rows in owners.items():
        if len(rows) > 1:
            cores = [set(r.gpu_cores) for r in rows]
            assert all(cores), alias
            assert not set.intersection(*cores), f"{alias!r} shared by rows with the same cores"


def test_catalog_covers_required_parts() -> None:
    names = {row.name for row in load_catalog()}
    for required in (
        "NVIDIA H200",
        "NVIDIA H100 SXM",
        "NVIDIA H100 PCIe",
        "NVIDIA A100 40GB",
        "NVIDIA A100 80GB SXM",
        "NVIDIA L40S",
        "NVIDIA L4",
        "NVIDIA A10",
        "NVIDIA GeForce RTX 5090",
        "NVIDIA GeForce RTX 3060",
        "AMD Instinct MI300X",
        "AMD Radeon RX 7900 XTX",
        "Apple M1",
        "Apple M3 Ultra",
        "Apple M5",
        "DDR4-3200 x2",
        "DDR5-4800 x12",
        "DDR5-6400 x8",
    ):
        assert required in names


@pytest.mark.parametrize(
    ("name", "cores", "expected", "gb_s"),
    [
        ("NVIDIA GeForce RTX 4090", None, "NVIDIA GeForce RTX 4090", 1008),
        ("NVIDIA GeForce RTX 4080 SUPER", None, "NVIDIA GeForce RTX 4080 SUPER", 736),
        ("NVIDIA GeForce RTX 4080", None, "NVIDIA GeForce RTX 4080", 716.8),
        ("Apple M4 Max", 40, "Apple M4 Max (40-core GPU)", 546.1),
        ("Apple M4 Max", 32, "Apple M4 Max (32-core GPU)", 409.6),
        ("Apple M4 Max", None, "Apple M4 Max (40-core GPU)", 546.1),
        ("Apple M3 Max", 30, "Apple M3 Max (30-core GPU)", 307.2),
        ("Apple M1", 8, "Apple M1", 68.25),
        ("Apple M2 Ultra", None, "Apple M2 Ultra", 819.2),
        ("NVIDIA A100-SXM4-40GB", None, "NVIDIA A100 40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", None, "NVIDIA A100 80GB SXM", 2039),
        ("NVIDIA A100 80GB PCIe", None, "NVIDIA A100 80GB PCIe", 1935),
        ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 SXM", 3352),
        ("NVIDIA H100 PCIe", None, "NVIDIA H100 PCIe", 2039),
        ("NVIDIA A10", None, "NVIDIA A10", 600),
        ("NVIDIA L4", None, "NVIDIA L4", 300),
        ("NVIDIA L40S", None, "NVIDIA L40S", 864),
        ("Tesla T4", None, "NVIDIA T4", 320),
        ("AMD Radeon RX 7900 XT", None, "AMD Radeon RX 7900 XT", 800),
        ("AMD Instinct MI300X", None, "AMD Instinct MI300X", 5300),
        ("4090", None, "NVIDIA GeForce RTX 4090", 1008),
        ("DDR5-5600 x2", None, "DDR5-5600 x2", 89.6),
        ("ddr4 3200 dual channel", None, "DDR4-3200 x2", 51.2),
    ],
)
def test_lookup(name: str, cores: int | None, expected: str, gb_s: float) -> None:
    entry = lookup(name, cores)
    assert entry is not None
    assert entry.name == expected
    assert entry.bandwidth_bytes_per_s == pytest.approx(gb_s * 1e9)


@pytest.mark.parametrize(
    "name", ["H100", "3060", "NVIDIA GeForce RTX 4090 Laptop GPU", "Intel Core i9", ""]
)
def test_lookup_refuses_ambiguous_or_unknown(name: str) -> None:
    assert lookup(name) is None


def test_lookup_kind_filter_keeps_apple_aliases_to_apple() -> None:
    assert lookup("Apple M2 Pro", kind="gpu") is None
    entry = lookup("Apple M2 Pro", kind="apple")
    assert entry is not None and entry.bandwidth().source == "apple-catalog"


def test_close_names_lists_variants_first() -> None:
    assert close_names("H100")[:3] == ["NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"]


def test_catalog_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hw.csv"
    path.write_text(HEADER + "Test GPU,gpu,test gpu,8,123.5,,,https://example.org\n")
    monkeypatch.setenv(CATALOG_ENV, str(path))
    entry = lookup("My Test GPU")
    assert entry is not None
    assert entry.bandwidth_bytes_per_s == 123.5e9
    assert entry.memory_bytes == 8_000_000_000


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("X,gpu,x,8,-5,,,src\n", "hw.csv:2: bandwidth_gb_s '-5' must be a positive number"),
        ("X,gpu,x,8,fast,,,src\n", "hw.csv:2: bandwidth_gb_s 'fast' must be a positive number"),
        ("X,gpu,x,8,100,,,\n", "hw.csv:2: column 'source' is empty"),
        ("X,tpu,x,8,100,,,src\n", "hw.csv:2: kind 'tpu' must be one of gpu, apple, cpu"),
        ("X,gpu,x,8,100,,src\n", "hw.csv:2: expected 8 fields"),
        ("X,apple,x,,100,,thirty,src\n", "hw.csv:2: gpu_cores 'thirty' must be counts"),
        (
            "X,gpu,x,8,100,,,src\nX,gpu,y,8,100,,,src\n",
            "hw.csv:3: name 'X' already defined on line 2",
        ),
    ],
)
def test_catalog_validation_names_file_and_line(tmp_path: Path, row: str, expected: str) -> None:
    path = tmp_path / "hw.csv"
    path.write_text(HEADER + row)
    with pytest.raises(ConfigError, match="^.*" + expected.replace("(", r"\(")) as info:
        load_catalog(path)
    assert str(path) in str(info.value)


def test_catalog_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "hw.csv"
    path.write_text("name,bandwidth\nX,1\n")
    with pytest.raises(ConfigError, match=r"hw.csv:1: header .* must be exactly name,kind"):
        load_catalog(path)


def test_catalog_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read.*PYTEST_TOKPERF_CATALOG"):
        load_catalog(tmp_path / "nope.csv")


# --- bandwidth strings -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1008GB/s", 1.008e12),
        ("1008 GB/s", 1.008e12),
        ("1.0TB/s", 1e12),
        ("800GiB/s", 800 * 2**30),
        ("68.25", 68.25e9),
        (" 546 gb/s ", 546e9),
        ("51200MB/s", 51.2e9),
        (68.25, 68.25e9),
    ],
)
def test_parse_bandwidth(text: str | float, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("fast", "cannot read memory bandwidth 'fast'"),
        ("", "cannot read memory bandwidth ''"),
        ("0", "memory bandwidth '0' must be a positive figure"),
        ("-5GB/s", "cannot read memory bandwidth '-5GB/s'"),
        ("100 furlongs", "unknown unit 'furlongs' in memory bandwidth '100 furlongs'"),
        (0.0, "memory bandwidth 0.0 must be a positive figure"),
    ],
)
def test_parse_bandwidth_rejects(text: str | float, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bandwidth(text)
    assert fragment in str(info.value)
    assert "'1008GB/s'" in str(info.value) and "'68.25'" in str(info.value)


def test_format_bandwidth() -> None:
    assert format_bandwidth(1.008e12) == "1008 GB/s"
    assert format_bandwidth(68.25e9) == "68.2 GB/s"
    assert format_bandwidth(4.5e9) == "4.50 GB/s"


# --- NVIDIA ----------------------------------------------------------------------------


def test_nvml_formula() -> None:
    assert nvml_bandwidth_bytes_per_s(10501, 384) == pytest.approx(1008.1e9, rel=1e-4)
    assert nvml_bandwidth_bytes_per_s(1215, 5120) == pytest.approx(1555.2e9, rel=1e-4)
    assert nvml_bandwidth_bytes_per_s(877, 4096) == pytest.approx(898.0e9, rel=1e-3)


class FakeNVMLError(Exception):
    pass


def fake_pynvml(
    gpus: Sequence[tuple[str, str, int, int | None, int]], init_fails: bool = False
) -> ModuleType:
    """(name, uuid, max mem clock MHz, bus bits or None for NotSupported, memory bytes)."""
    module = ModuleType("pynvml")
    calls: list[str] = []

    def not_supported() -> None:
        raise FakeNVMLError("Not Supported")

    def init() -> None:
        calls.append("init")
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")

    def bus_width(h: int) -> int:
        width = gpus[h][3]
        if width is None:
            not_supported()
        assert width is not None
        return width

    module.__dict__.update(
        NVMLError=FakeNVMLError,
        NVML_CLOCK_MEM=2,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: gpus[h][0].encode(),
        nvmlDeviceGetUUID=lambda h: gpus[h][1],
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=gpus[h][4], used=0, free=0),
        nvmlDeviceGetMaxClockInfo=lambda h, kind: gpus[h][2] if kind == 2 else 2520,
        nvmlDeviceGetMemoryBusWidth=bus_width,
        nvmlSystemGetDriverVersion=lambda: "560.35.03",
        calls=calls,
    )
    return module


RTX_4090 = ("NVIDIA GeForce RTX 4090", "GPU-aaaa-1111", 10501, 384, 24 * 2**30)
A100_40 = ("NVIDIA A100-SXM4-40GB", "GPU-bbbb-2222", 1215, 5120, 40 * 2**30)


def test_detect_nvidia_formula_and_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = fake_pynvml([RTX_4090])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    info = detect_nvidia()
    assert info is not None
    assert info.name == "NVIDIA GeForce RTX 4090"
    assert info.kind == "gpu"
    assert info.driver == "560.35.03"
    assert info.memory_bytes == 24 * 2**30
    assert info.spec_bandwidth is not None
    assert info.spec_bandwidth.source == "nvml"
    assert info.spec_bandwidth.bytes_per_s == pytest.approx(1008e9, rel=1e-3)
    assert "10501 MHz" in info.spec_bandwidth.detail and "384-bit" in info.spec_bandwidth.detail
    assert info.peak_flops == pytest.approx(330.3e12)
    assert "catalog NVIDIA GeForce RTX 4090: 1008 GB/s" in info.detail
    assert nvml.calls == ["init", "shutdown"]


def test_detect_nvidia_picks_cuda_visible_uuid() -> None:
    info = detect_nvidia(fake_pynvml([RTX_4090, A100_40]), visible="GPU-bbbb")
    assert info is not None
    assert info.name == "NVIDIA A100-SXM4-40GB"
    assert info.spec_bandwidth is not None
    assert info.spec_bandwidth.bytes_per_s == pytest.approx(1555e9, rel=1e-3)
    assert "NVML device 1 of 2" in info.detail
    assert "also present: NVIDIA GeForce RTX 4090" in info.detail


def test_detect_nvidia_index_and_hidden() -> None:
    nvml = fake_pynvml([RTX_4090, A100_40])
    info = detect_nvidia(nvml, visible="1,0")
    assert info is not None and info.name == "NVIDIA A100-SXM4-40GB"
    assert detect_nvidia(nvml, visible="") is None
    assert detect_nvidia(nvml, visible="-1") is None


def test_detect_nvidia_falls_back_to_catalog_without_bus_width() -> None:
    info = detect_nvidia(fake_pynvml([("NVIDIA L4", "GPU-c", 6251, None, 24 * 2**30)]), "0")
    assert info is not None
    assert info.spec_bandwidth is not None
    assert info.spec_bandwidth.source == "catalog"
    assert info.spec_bandwidth.bytes_per_s == 300e9


def test_detect_nvidia_without_driver_or_module(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_pynvml([RTX_4090], init_fails=True)
    assert detect_nvidia(nvml) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert detect_nvidia() is None


def test_detect_nvidia_unknown_gpu_without_bus_width_has_no_bandwidth() -> None:
    info = detect_nvidia(fake_pynvml([("NVIDIA Future X1", "GPU-d", 1, None, 1)]), "0")
    assert info is not None
    assert info.spec_bandwidth is None and info.peak_flops is None


# --- Apple -----------------------------------------------------------------------------


def apple_runner(brand: str, memsize: str, profiler: object) -> Any:
    outputs = {
        "machdep.cpu.brand_string": brand + "\n",
        "hw.memsize": memsize + "\n",
        "SPDisplaysDataType": json.dumps(profiler),
    }

    def run(argv: Sequence[str]) -> str | None:
        for key, value in outputs.items():
            if key in argv:
                return value
        return None

    return run


def test_detect_apple_m4_max_40_cores() -> None:
    profiler = {"SPDisplaysDataType": [{"sppci_model": "Apple M4 Max", "sppci_cores": "40"}]}
    info = detect_apple(apple_runner("Apple M4 Max", "137438953472", profiler), "darwin")
    assert info is not None
    assert info.kind == "apple"
    assert info.memory_bytes == 128 * 2**30
    assert info.spec_bandwidth is not None
    assert info.spec_bandwidth.source == "apple-catalog"
    assert info.spec_bandwidth.bytes_per_s == pytest.approx(546.1e9)
    assert info.detail.startswith("40-core GPU")


def test_detect_apple_binned_and_unknown() -> None:
    binned = {"SPDisplaysDataType": [{"sppci_cores": "32"}]}
    info = detect_apple(apple_runner("Apple M4 Max", "68719476736", binned), "darwin")
    assert info is not None and info.spec_bandwidth is not None
    assert info.spec_bandwidth.bytes_per_s == pytest.approx(409.6e9)
    future = detect_apple(apple_runner("Apple M9 Hyper", "1", {}), "darwin")
    assert future is not None and future.spec_bandwidth is None


def test_detect_apple_only_on_apple_silicon() -> None:
    run = apple_runner("Apple M2", "1", {})
    assert detect_apple(run, "linux") is None
    assert detect_apple(apple_runner("Intel(R) Core(TM) i9-9880H", "1", {}), "darwin") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.dumps({"SPDisplaysDataType": [{"sppci_cores": "10"}]}), 10),
        (json.dumps({"SPDisplaysDataType": [{"x": 1}, {"sppci_cores": 38}]}), 38),
        (json.dumps({"SPDisplaysDataType": []}), None),
        ("not json", None),
        (None, None),
    ],
)
def test_parse_gpu_cores(text: str | None, expected: int | None) -> None:
    assert parse_gpu_cores(text) == expected


# --- Linux CPU -------------------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD Ryzen 9 5950X 16-Core Processor
processor\t: 1
model name\t: AMD Ryzen 9 5950X 16-Core Processor
"""
MEMINFO = "MemTotal:       65790164 kB\nMemFree:        1000 kB\n"


def dimm(size: str, locator: str, bank: str, speed: str, kind: str = "DDR4") -> str:
    return (
        "Handle 0x0040, DMI type 17, 92 bytes\nMemory Device\n"
        f"\tData Width: 64 bits\n\tSize: {size}\n\tLocator: {locator}\n"
        f"\tBank Locator: {bank}\n\tType: {kind}\n\tSpeed: 3600 MT/s\n"
        f"\tConfigured Memory Speed: {speed}\n"
    )


def test_parse_cpu_and_meminfo() -> None:
    assert parse_cpu_model(CPUINFO) == "AMD Ryzen 9 5950X 16-Core Processor"
    assert parse_cpu_model("Hardware\t: BCM2835\n") == "BCM2835"
    assert parse_mem_total(MEMINFO) == 65790164 * 1024
    assert parse_mem_total("") is None


def test_dmidecode_counts_channels_not_dimms() -> None:
    text = "\n".join(
        [
            "# dmidecode 3.4\nGetting SMBIOS data from sysfs.\n",
            dimm("16 GB", "DIMM 0", "P0 CHANNEL A", "3200 MT/s"),
            dimm("16 GB", "DIMM 1", "P0 CHANNEL A", "3200 MT/s"),
            dimm("16 GB", "DIMM 0", "P0 CHANNEL B", "3200 MT/s"),
            dimm("16 GB", "DIMM 1", "P0 CHANNEL B", "3200 MT/s"),
        ]
    )
    config = parse_dmidecode(text)
    assert config is not None
    assert (config.dimms, config.channels, config.channels_from_labels) == (4, 2, True)
    bandwidth = config.bandwidth()
    assert bandwidth.source == "dmidecode"
    assert bandwidth.bytes_per_s == pytest.approx(51.2e9)
    assert bandwidth.detail == "2 channels x 8 B x 3200 MT/s (DDR4, 4 DIMMs)"


def test_dmidecode_server_layouts_and_empty_slots() -> None:
    supermicro = "\n".join(
        dimm("32 GB", f"P{s}-DIMM{c}1", f"P{s}_Node0_Channel{c}_Dimm0", "4800 MT/s", "DDR5")
        for s in (1, 2)
        for c in "ABCDEFGH"
    )
    empty = dimm("No Module Installed", "P1-DIMMA2", "P0_Node0_ChannelA_Dimm1", "Unknown")
    config = parse_dmidecode(supermicro + "\n" + empty)
    assert config is not None
    assert (config.dimms, config.channels) == (16, 16)
    assert config.bytes_per_s == pytest.approx(614.4e9)
    intel = "\n".join(dimm("8 GB", f"Channel{c}-DIMM0", "BANK 0", "2666 MHz") for c in "AB")
    config = parse_dmidecode(intel)
    assert config is not None and config.channels == 2
    assert config.bytes_per_s == pytest.approx(2 * 8 * 2666e6)


def test_dmidecode_unlabelled_slots_count_each_dimm() -> None:
    dell = "\n".join(dimm("16 GB", f"A{i}", "Not Specified", "2933 MT/s") for i in (1, 2, 3))
    config = parse_dmidecode(dell)
    assert config is not None
    assert (config.channels, config.channels_from_labels) == (3, False)
    assert "channels assumed = DIMMs" in config.bandwidth().detail


def test_dmidecode_unknown_speed_gives_nothing() -> None:
    qemu = dimm("8 GB", "DIMM 0", "Not Specified", "Unknown").replace("3600 MT/s", "Unknown")
    assert parse_dmidecode(qemu) is None
    assert parse_dmidecode("") is None


def test_detect_linux_cpu_with_and_without_dmidecode() -> None:
    files = {"/proc/cpuinfo": CPUINFO, "/proc/meminfo": MEMINFO}
    dmi = dimm("32 GB", "DIMM 0", "P0 CHANNEL A", "3200 MT/s")
    info = detect_linux_cpu(lambda argv: dmi, files.get, "linux")
    assert info is not None
    assert info.name == "AMD Ryzen 9 5950X 16-Core Processor"
    assert info.kind == "cpu"
    assert info.memory_bytes == 65790164 * 1024
    assert info.spec_bandwidth is not None
    assert info.spec_bandwidth.bytes_per_s == pytest.approx(25.6e9)
    assert "2 logical CPUs" in info.detail
    bare = detect_linux_cpu(lambda argv: None, files.get, "linux")
    assert bare is not None and bare.spec_bandwidth is None
    assert "no DIMM data" in bare.detail
    assert detect_linux_cpu(lambda argv: None, files.get, "darwin") is None


def test_detect_linux_cpu_on_this_machine() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    info = detect_linux_cpu()
    assert info is not None
    assert info.memory_bytes is not None and info.memory_bytes > 0


# --- probe -----------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_probe_small_buffer(threads: int) -> None:
    result = probe_read_bandwidth(size_bytes=4 * 2**20, threads=threads, passes=3, duration_s=0.2)
    assert result.bandwidth.source == "measured"
    assert result.bandwidth.bytes_per_s > 0
    assert result.bandwidth.bytes_per_s == max(result.passes_bytes_per_s)
    assert 1 <= len(result.passes_bytes_per_s) <= 3
    assert result.threads == threads
    assert result.bandwidth.detail == (
        f"read probe: best of {len(result.passes_bytes_per_s)} passes, {threads} threads, 4 MiB"
    )
    assert 0 <= result.spread < 1
    assert result.elapsed_s > 0


def test_read_probe_sets_its_buffer_up_once_outside_every_budget() -> None:
    with ReadProbe(size_bytes=8 * 2**20, threads=2) as probe:
        first = probe.measure(0.05, passes=3)
        buffer = probe._slices
        second = probe.measure(0.05, passes=3)
        assert probe._slices is buffer  # the same pages, touched once
        assert first.setup_s == second.setup_s == probe.setup_s > 0
        assert first.buffer_bytes == 8 * 2**20 and second.bandwidth.bytes_per_s > 0
    assert probe._slices is None  # closed: the buffer is freed
    with pytest.raises(ConfigError, match="probe duration -1 s must be positive"):
        ReadProbe(size_bytes=8 * 2**20).measure(-1)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"size_bytes": 1000}, "probe buffer size 1000 bytes"),
        ({"threads": 0}, "probe threads 0 must be >= 1"),
        ({"passes": 0}, "probe passes 0 must be >= 1"),
        ({"duration_s": 0.0}, "probe duration 0.0 s must be positive"),
    ],
)
def test_probe_rejects_bad_arguments(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        probe_read_bandwidth(**{"size_bytes": 4 * 2**20, **kwargs})


# --- detect_hardware -------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect_module, "detect_nvidia", lambda: None)
    monkeypatch.setattr(detect_module, "detect_apple", lambda: None)


@pytest.mark.usefixtures("no_gpu")
def test_detect_hardware_cpu_with_probe() -> None:
    info = detect_hardware(probe_size_bytes=4 * 2**20, probe_duration_s=0.2, threads=1)
    assert info.kind == "cpu"
    assert info.measured_bandwidth is not None
    assert info.measured_bandwidth.source == "measured"
    assert info.bandwidth is info.measured_bandwidth or info.bandwidth == info.measured_bandwidth
    assert "probe passes" in info.detail


@pytest.mark.usefixtures("no_gpu")
def test_detect_hardware_explicit_skips_probe() -> None:
    info = detect_hardware(explicit_bandwidth=1.008e12)
    assert info.measured_bandwidth is None
    assert info.bandwidth is not None
    assert info.bandwidth.source == "explicit"
    assert info.bandwidth.bytes_per_s == 1.008e12


@pytest.mark.usefixtures("no_gpu")
def test_detect_hardware_cpu_without_any_figure_warns() -> None:
    with pytest.warns(TokperfWarning, match="--tokperf-bandwidth 1008GB/s"):
        info = detect_hardware(probe=False, prefer="cpu")
    assert info.bandwidth is None or info.bandwidth.source == "dmidecode"


def test_detect_hardware_unknown_gpu_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = HardwareInfo(name="NVIDIA Future X1", kind="gpu")
    monkeypatch.setattr(detect_module, "detect_nvidia", lambda: unknown)
    with pytest.warns(TokperfWarning) as record:
        info = detect_hardware()
    assert info.name == "NVIDIA Future X1" and info.measured_bandwidth is None
    message = str(record[0].message)
    assert "no memory bandwidth known for GPU 'NVIDIA Future X1'" in message
    assert "--tokperf-bandwidth 1008GB/s" in message


def test_detect_hardware_never_raises_when_a_provider_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_apple() -> HardwareInfo | None:
        raise ConfigError("hardware catalog 'x' cannot be read")

    def broken_nvml() -> HardwareInfo | None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    cpu = HardwareInfo(name="Some CPU", kind="cpu")
    monkeypatch.setattr(detect_module, "detect_nvidia", broken_nvml)
    monkeypatch.setattr(detect_module, "detect_apple", broken_apple)
    monkeypatch.setattr(detect_module, "detect_linux_cpu", lambda: cpu)
    info = detect_hardware(explicit_bandwidth=1e11)
    assert info.name == "Some CPU"
    assert "nvidia detection failed: OSError('libnvidia-ml.so.1" in info.detail
    assert "apple detection failed: ConfigError(\"hardware catalog 'x'" in info.detail


def test_detect_hardware_survives_a_failing_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    def starved(**kwargs: Any) -> Any:
        raise MemoryError("no room for the probe buffer")

    monkeypatch.setattr(detect_module, "detect_nvidia", lambda: None)
    monkeypatch.setattr(detect_module, "detect_apple", lambda: None)
    monkeypatch.setattr(detect_module, "probe_read_bandwidth", starved)
    with pytest.warns(TokperfWarning):
        info = detect_hardware(prefer="cpu")
    assert "read probe failed: MemoryError" in info.detail


def test_detect_apple_on_a_mac_never_raises_through_detect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wheel bug: the catalog was unreadable, lookup raised, and every Mac run broke."""
    monkeypatch.setenv(CATALOG_ENV, "/nonexistent/hardware.csv")
    answers = {"machdep.cpu.brand_string": "Apple M4 Max\n", "hw.memsize": "68719476736\n"}

    def mac(argv: Sequence[str]) -> str | None:
        return answers.get(argv[-1]) if argv[0] == "sysctl" else None

    monkeypatch.setattr(detect_module, "detect_nvidia", lambda: None)
    monkeypatch.setattr(detect_module, "detect_apple", lambda: detect_apple(mac, "darwin"))
    with pytest.warns(TokperfWarning):
        info = detect_hardware(probe=False)
    assert "apple detection failed: ConfigError" in info.detail


def test_detect_hardware_prefer_order(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = HardwareInfo(name="NVIDIA GeForce RTX 4090", kind="gpu")
    cpu = HardwareInfo(name="Some CPU", kind="cpu")
    monkeypatch.setattr(detect_module, "detect_nvidia", lambda: gpu)
    monkeypatch.setattr(detect_module, "detect_linux_cpu", lambda: cpu)
    assert detect_hardware(explicit_bandwidth=1e12).name == "NVIDIA GeForce RTX 4090"
    assert detect_hardware(explicit_bandwidth=1e11, prefer="cpu").name == "Some CPU"
    with pytest.raises(ConfigError, match="hardware preference 'tpu' is not one of nvidia"):
        detect_hardware(prefer="tpu")
    with pytest.raises(ConfigError, match="explicit bandwidth -1.0 bytes/s must be positive"):
        detect_hardware(explicit_bandwidth=-1.0)


def test_a_cpu_is_found_by_its_model_name() -> None:
    """llama-bench's cpu_info spells the model, not the DIMMs."""
    entry = lookup("AMD Ryzen 9 7950X 16-Core Processor", kind="cpu")
    assert entry is not None and entry.name == "AMD Ryzen 9 7950X"
    assert entry.bandwidth_bytes_per_s == pytest.approx(2 * 8 * 5200e6)
    assert "DDR5-5200" in entry.source


def test_a_cpu_name_is_not_offered_radeon_gpus() -> None:
    kinds = {e.name: e.kind for e in load_catalog()}
    assert close_names("Ryzen 9 7950")[0] == "AMD Ryzen 9 7950X"
    for name in ("Ryzen 9 7950", "Ryzen 5 7600X", "Xeon Gold 6430"):
        offered = close_names(name)
        assert all(kinds[n] == "cpu" for n in offered), (name, offered)


def test_apple_bandwidth_agrees_with_its_cited_source() -> None:
    """Apple rounds down (M2 Max: '400 GB/s'); the catalog keeps the physical peak and its
    source says how it is reached, so the two figures never stand side by side unexplained."""
    for entry in load_catalog():
        if entry.kind != "apple":
            continue
        figure = f"{entry.bandwidth_bytes_per_s / 1e9:g}"
        assert figure in entry.source, (entry.name, figure, entry.source)
