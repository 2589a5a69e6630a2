"""Fixed decode-efficiency bands by quant family and device class, each with its source.

Efficiency is decode / (bandwidth / bytes read per token); ``low``/``high`` bound what a
healthy engine shows, ``typical`` is the midpoint of the cited rows, and ``derived``
says how a band without a table row of its own was obtained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pytest_tokperf.errors import ConfigError

QuantFamily = Literal["f16", "q8", "q5-q6", "q4", "low-bit"]
DeviceClass = Literal["consumer-gpu", "amd-gpu", "datacenter-gpu", "apple", "cpu", "unknown"]

QUANT_FAMILIES: tuple[QuantFamily, ...] = ("f16", "q8", "q5-q6", "q4", "low-bit")
DEVICE_CLASS_NAMES: dict[DeviceClass, str] = {
    "consumer-gpu": "a consumer or workstation GPU (GeForce, RTX, Arc)",
    "amd-gpu": "an AMD Radeon GPU (ROCm or Vulkan)",
    "datacenter-gpu": "a data-centre GPU at batch 1",
    "apple": "Apple Silicon (Metal)",
    "cpu": "the CPU (against the measured read bandwidth)",
    "unknown": "an unnamed device",
}

# Published rows the bands are built from (peak bandwidth from the hardware catalog).
_M1_4167 = ("https://github.com/ggml-org/llama.cpp/discussions/4167 (Apple M1 7-core, 68.25 GB/s: "
            "LLaMA 7B Q8_0 7.92 t/s x 7.02 GB = 81%; Q4_0 14.19 t/s x 3.75 GB = 78%)")
_M2PRO_4167 = ("https://github.com/ggml-org/llama.cpp/discussions/4167 (Apple M2 Pro 19-core, "
               "204.8 GB/s: LLaMA 7B Q8_0 23.01 t/s x 7.02 GB = 79%)")
_RTX3090_BF16 = ("https://github.com/ggml-org/llama.cpp/pull/14262 (CUDA, RTX 3090 936 GB/s: llama "
                 "8B BF16 at microbatch 1, 58.06 t/s x 15.01 GB = 93%)")
_RTX3090_VULKAN = ("https://github.com/ggml-org/llama.cpp/pull/21024 (Vulkan, RTX 3090 936 GB/s: "
                   "llama 8B Q8_0 95.05 t/s x 7.98 GB = 81%; Q4_0 146.73 t/s x 4.35 GB = 68%)")
_XTX_HIP = ("https://github.com/ggml-org/llama.cpp/pull/26284 (ROCm, RX 7900 XTX 960 GB/s: llama "
            "8B Q4_K_M tg64 105.75 t/s x 4.62 GB = 51%)")
_RX9070XT = ("https://github.com/ggml-org/llama.cpp/issues/26663 (RX 9070 XT 640 GB/s: Qwen3 8B "
             "Q4_K_M 104.3 t/s Vulkan x 4.68 GB = 76%, 91.1 t/s HIP = 67%)")
_RX5700XT = ("https://github.com/ggml-org/llama.cpp/pull/13324 (Vulkan, RX 5700 XT 448 GB/s: llama "
             "7B Q4_0 65.19 t/s x 3.75 GB = 55%)")
_V100 = ("https://github.com/ggml-org/llama.cpp/pull/12183 (CUDA, V100-PCIE 900 GB/s: Qwen2.5 3B "
         "Q4_0 143.32 t/s x 1.83 GB = 29%: launch and sync overheads dominate at batch 1)")
_RTX4090_BF16 = ("https://github.com/ggml-org/llama.cpp/pull/15131 (CUDA, RTX 4090 1008 GB/s: "
                 "llama 8B BF16 at microbatch 1, 65.21 t/s x 15.01 GB = 97%)")
_RTX3090_Q4_CUDA = ("https://github.com/ggml-org/llama.cpp/pull/15802 (CUDA, RTX 3090 936 GB/s: "
                    "llama 8B Q4_0 at microbatch 1, 155.02 t/s x 4.35 GB = 72%)")
_RTX3080_Q4KM = ("https://github.com/dmatora/LLM-inference-speed-benchmarks/issues/12 "
                 "(llama-bench, RTX 3080 760 GB/s: Llama 3.1 8B Q4_K_M tg 111.95 t/s x 4.62 GB = "
                 "68%)")
_P40 = ("https://github.com/ggml-org/llama.cpp/pull/4766 (CUDA, Tesla P40 347 GB/s: llama 7B Q4_0 "
        "tg128 56.79 t/s x 3.75 GB = 61%; Q2_K 33.52 t/s x 2.76 GB = 27%)")
_CPU_RUN = ("db/runs/7b327e0a-3aa5-43e2-bd11-e74b4d8ef9be.jsonl (this project's main job, CPU "
            "llama-server, 1.14 GB F16: 53-90% of the read probe taken around each workload)")
_CPU_RUN_REACHED = ("db/runs/f58899d9-1150-4771-8f38-c54ba90ea9a5.jsonl (the same main job judged "
                    "against the highest read bandwidth the host reached: 49-64%)")


def format_share(fraction: float) -> str:
    """An efficiency as a percentage that tells bands apart: ``68%`` from 10% up, else two
    significant figures: ``1.3%``, ``0.52%``."""
    percent = fraction * 100
    if not math.isfinite(percent) or percent == 0 or abs(percent) >= 9.95:
        return f"{fraction:.0%}"
    decimals = 1 - math.floor(math.log10(abs(percent)))
    return f"{percent:.{decimals}f}%"


@dataclass(frozen=True, slots=True)
class Band:
    """Expected efficiency of one quant family on one device class."""

    family: QuantFamily | None
    """None: the quant was not known, the band spans the families it could be."""
    device_class: DeviceClass
    low: float
    typical: float
    high: float
    sources: tuple[str, ...]
    derived: str = ""
    """How the band was obtained where no table row covers it directly (empty: measured)."""

    @property
    def fractions(self) -> tuple[float, float, float]:
        return (self.low, self.typical, self.high)

    def describe(self) -> str:
        """``68% (55-80%) for q4 on a consumer or workstation GPU``."""
        family = self.family or "an unknown quant"
        return (
            f"{format_share(self.typical)} ({format_share(self.low)}-"
            f"{format_share(self.high)}) for {family} on {DEVICE_CLASS_NAMES[self.device_class]}"
        )


def _band(family: QuantFamily, device: DeviceClass, low: float, typical: float, high: float,
          *sources: str, derived: str = "") -> Band:
    return Band(family, device, low, typical, high, sources, derived)


_CONSUMER_Q5 = "no q5/q6 row found: between the q8 and q4 bands"
_LOW_BIT = "no low-bit row found: below the q4 band (more dequantization per byte)"

BANDS: tuple[Band, ...] = (
    _band("f16", "consumer-gpu", 0.80, 0.90, 0.98, _RTX3090_BF16, _RTX4090_BF16),
    _band("q8", "consumer-gpu", 0.72, 0.81, 0.90, _RTX3090_VULKAN),
    _band("q5-q6", "consumer-gpu", 0.62, 0.74, 0.85, _RTX3090_VULKAN, derived=_CONSUMER_Q5),
    _band("q4", "consumer-gpu", 0.55, 0.68, 0.80, _RTX3090_VULKAN, _RTX3090_Q4_CUDA,
          _RTX3080_Q4KM),
    _band("low-bit", "consumer-gpu", 0.40, 0.55, 0.72, _RTX3090_VULKAN, derived=_LOW_BIT),
    _band("f16", "apple", 0.65, 0.78, 0.88, _M1_4167, _M2PRO_4167,
          derived="no F16 row read: the Q8_0 rows of the same table"),
    _band("q8", "apple", 0.68, 0.80, 0.88, _M1_4167, _M2PRO_4167),
    _band("q5-q6", "apple", 0.62, 0.76, 0.86, _M1_4167, derived=_CONSUMER_Q5),
    _band("q4", "apple", 0.58, 0.74, 0.84, _M1_4167),
    _band("low-bit", "apple", 0.45, 0.60, 0.76, _M1_4167, derived=_LOW_BIT),
    _band("f16", "amd-gpu", 0.65, 0.78, 0.90, _RTX3090_BF16, _RX9070XT,
          derived="no F16 Radeon row found: the consumer band, widened down as the Radeon "
          "Q4 rows sit below the GeForce ones"),
    _band("q8", "amd-gpu", 0.60, 0.74, 0.88, _RTX3090_VULKAN, _RX9070XT,
          derived="no Q8_0 Radeon row found: the consumer band, widened down as the Radeon "
          "Q4 rows sit below the GeForce ones"),
    _band("q5-q6", "amd-gpu", 0.50, 0.64, 0.80, _XTX_HIP, _RX9070XT, derived=_CONSUMER_Q5),
    _band("q4", "amd-gpu", 0.45, 0.62, 0.80, _XTX_HIP, _RX9070XT, _RX5700XT),
    _band("low-bit", "amd-gpu", 0.35, 0.50, 0.70, _RX5700XT, derived=_LOW_BIT),
    *(
        _band(family, "datacenter-gpu", 0.20, 0.40, 0.70, _V100, _P40,
              derived="one band for every quant: launch overhead, not the format, dominates; "
              "big models (30B+) reach the upper part")
        for family in QUANT_FAMILIES
    ),
    *(
        _band(family, "cpu", 0.45, 0.60, 0.95, _CPU_RUN, _CPU_RUN_REACHED,
              derived="against the measured read bandwidth (a probe around the workload, or "
              "the highest the host reached, which reads lower); a DIMM peak from the catalog "
              "sits above what a CPU reads, hence the low end")
        for family in QUANT_FAMILIES
    ),
)


def quant_family(quant: str | float | None) -> QuantFamily | None:
    """``"Q4_K_M"`` -> ``q4``; ``4.5`` (bits per weight) -> ``q4``; unknown -> None."""
    if quant is None or isinstance(quant, bool):
        return None
    if isinstance(quant, (int, float)):
        return _family_of_bits(float(quant))
    name = quant.strip().upper()
    try:
        return _family_of_bits(float(name))
    except ValueError:
        pass
    if name in ("F32", "F16", "BF16", "MOSTLY_F16", "MOSTLY_BF16", "ALL_F32"):
        return "f16"
    if name.startswith(("Q8", "MOSTLY_Q8")):
        return "q8"
    if name.startswith(("Q5", "Q6", "MOSTLY_Q5", "MOSTLY_Q6")):
        return "q5-q6"
    if name.startswith(("Q4", "IQ4", "MXFP4", "NVFP4", "MOSTLY_Q4", "MOSTLY_IQ4")):
        return "q4"
    if name.startswith(("Q2", "Q3", "IQ1", "IQ2", "IQ3", "TQ", "Q1", "MOSTLY_Q2", "MOSTLY_Q3")):
        return "low-bit"
    return None


def _family_of_bits(bits: float) -> QuantFamily:
    if not math.isfinite(bits) or bits <= 0:
        raise ConfigError(f"bits per weight {bits!r} must be a positive number")
    if bits >= 12:
        return "f16"
    if bits >= 7:
        return "q8"
    if bits >= 5:
        return "q5-q6"
    if bits >= 3.9:
        return "q4"
    return "low-bit"


_DATACENTER = (
    "h100", "h200", "b200", "b100", "gb200", "a100", "a40", "a30", "a10", "l40", "l4",
    "t4", "v100", "instinct", "mi300", "mi325", "mi250", "mi210", "h800", "a800",
)


def device_class(kind: str | None, name: str | None) -> DeviceClass:
    """The class of a catalog row or detected device (``HardwareInfo.kind`` and name)."""
    if kind == "apple":
        return "apple"
    if kind == "cpu":
        return "cpu"
    if kind != "gpu" or not name:
        return "unknown"
    words = set(" ".join(name.lower().replace("-", " ").split()).split())
    if words & set(_DATACENTER) or any(w.startswith(("mi3", "mi2")) for w in words):
        return "datacenter-gpu"
    if "amd" in words or "radeon" in words:
        return "amd-gpu"
    return "consumer-gpu"


def band_for(family: QuantFamily | None, device: DeviceClass) -> Band:
    """The band for a quant family on a device class; an unknown family spans f16 to q4,
    an unknown device the consumer, AMD and Apple bands (a data-centre GPU or CPU is named)."""
    if family is not None and device != "unknown":
        return next(b for b in BANDS if b.family == family and b.device_class == device)
    families = (family,) if family is not None else ("f16", "q8", "q5-q6", "q4")
    devices = (device,) if device != "unknown" else ("consumer-gpu", "amd-gpu", "apple")
    pool = [b for b in BANDS if b.family in families and b.device_class in devices]
    low = min(b.low for b in pool)
    high = max(b.high for b in pool)
    sources = tuple(dict.fromkeys(s for b in pool for s in b.sources))
    what = "quant" if family is None else "device"
    return Band(family, device, low, round((low + high) / 2, 2), high, sources,
                derived=f"{what} unknown: the span of the bands it could be")
