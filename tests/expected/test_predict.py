"""Predictions for hardware from the catalog."""

from __future__ import annotations

import json
import pathlib
from typing import get_args

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.bands import (
    BANDS,
    DeviceClass,
    QUANT_FAMILIES,
    band_for,
    quant_family,
)
from pytest_tokperf.expected.prediction import (
    footprint_from_file_size,
    format_prediction,
    predict,
    prediction_to_dict,
)
from pytest_tokperf.results import Footprint

LLAMA_8B_Q4_K_M = Footprint(
    architecture="llama",
    weights_bytes=4_900_000_000,
    kv_bytes_per_position=131_072,
    depth_tokens=0,
    kv_type="f16",
    resident_bytes=4_920_000_000,
    active_parameters=8_030_000_000,
    total_parameters=8_030_000_000,
)


def test_rtx_4090_8b_q4_k_m_is_about_205_tok_s() -> None:
    pred = predict("RTX 4090", LLAMA_8B_Q4_K_M, (0.5, 0.6, 0.75, 0.8))
    assert pred.ceiling.decode_tokens_per_s == pytest.approx(205.7, abs=0.1)
    assert pred.entry is not None and pred.entry.name == "NVIDIA GeForce RTX 4090"
    assert pred.band is None  # fractions given: no band
    assert pred.expected_tokens_per_s == pytest.approx(
        tuple(205.714 * f for f in (0.5, 0.6, 0.75, 0.8)), rel=1e-4
    )
    assert pred.expected_low == pytest.approx(102.86, abs=0.01)
    assert pred.expected_high == pytest.approx(164.57, abs=0.01)
    assert pred.memory_needed_bytes == 4_920_000_000
    assert pred.fits is True
    assert pred.ceiling.prefill_tokens_per_s == pytest.approx(330.3e12 / (2 * 8.03e9))


def test_format_prediction() -> None:
    text = format_prediction(predict("RTX 4090", LLAMA_8B_Q4_K_M, (0.5, 0.6, 0.75, 0.8)))
    lines = text.splitlines()
    assert lines[0].startswith("NVIDIA GeForce RTX 4090: 1008 GB/s (https://")
    assert lines[1] == (
        "decode ceiling: 205.7 tok/s "
        "(1008 GB/s / 4.90 GB per token: weights 4.90 GB + KV 0 B at depth 0)"
    )
    assert lines[2] == (
        "expected decode: 102.9-164.6 tok/s (50%: 102.9, 60%: 123.4, 75%: 154.3, 80%: 164.6)"
    )
    assert lines[3] == (
        "memory needed: 4.92 GB (model 4.92 GB + KV 0 B at depth 0) of 24.00 GB: fits"
    )
    assert lines[4].startswith("prefill bound: 20567 tok/s (330.3 TFLOPS FP16 dense")


def test_prediction_to_dict_is_json() -> None:
    data = prediction_to_dict(predict("RTX 4090", LLAMA_8B_Q4_K_M))
    assert json.loads(json.dumps(data)) == data
    assert data["catalog_name"] == "NVIDIA GeForce RTX 4090"
    assert data["bandwidth_bytes_per_s"] == 1008e9
    assert data["decode_ceiling_tokens_per_s"] == pytest.approx(205.71, abs=0.01)
    assert data["efficiency_band"]["low"] == 0.55
    assert data["efficiency_band"]["device_class"] == "consumer-gpu"
    assert data["efficiency_band"]["quant_family"] is None  # no quant given: widest band
    assert data["fits"] is True


def test_memory_counts_kv_at_depth_and_can_fail_to_fit() -> None:
    deep = Footprint(
        architecture="llama",
        weights_bytes=16_000_000_000,
        kv_bytes_per_position=131_072,
        depth_tokens=65_536,
        kv_type="f16",
        resident_bytes=16_100_000_000,
        active_parameters=8_030_000_000,
        total_parameters=8_030_000_000,
    )
    pred = predict("RTX 4080", deep)
    assert pred.memory_needed_bytes == 16_100_000_000 + 131_072 * 65_536
    assert pred.fits is False
    assert "does NOT fit" in format_prediction(pred)


def test_bandwidth_given_directly() -> None:
    by_float = predict(1.008e12, LLAMA_8B_Q4_K_M)
    by_text = predict("1008GB/s", LLAMA_8B_Q4_K_M)
    for pred in (by_float, by_text):
        assert pred.entry is None
        assert pred.ceiling.bandwidth.source == "explicit"
        assert pred.ceiling.decode_tokens_per_s == pytest.approx(205.7, abs=0.1)
        assert pred.fits is None
        assert format_prediction(pred).startswith("given bandwidth: 1008 GB/s\n")


def test_apple_core_variant() -> None:
    binned = predict("Apple M4 Max", LLAMA_8B_Q4_K_M, gpu_cores=32)
    assert binned.ceiling.bandwidth.bytes_per_s == pytest.approx(409.6e9)
    assert binned.ceiling.bandwidth.source == "apple-catalog"


def test_unknown_hardware_lists_close_names() -> None:
    with pytest.raises(ConfigError) as info:
        predict("H100", LLAMA_8B_Q4_K_M)
    message = str(info.value)
    assert message.startswith("hardware 'H100' does not name one row of the hardware catalog")
    assert "NVIDIA H100 SXM, NVIDIA H100 PCIe, NVIDIA H100 NVL" in message
    assert "'1008GB/s'" in message
    with pytest.raises(ConfigError, match="close catalog names: .*NVIDIA GeForce RTX 4090"):
        predict("RTX 4091", LLAMA_8B_Q4_K_M)


@pytest.mark.parametrize("bad", [(), (0.0,), (2.0,)])
def test_efficiencies_validated(bad: tuple[float, ...]) -> None:
    with pytest.raises(ConfigError, match="efficienc"):
        predict("RTX 4090", LLAMA_8B_Q4_K_M, bad)


def test_bad_bandwidth_rejected() -> None:
    with pytest.raises(ConfigError, match="bandwidth -5.0 bytes/s must be positive"):
        predict(-5.0, LLAMA_8B_Q4_K_M)
    with pytest.raises(ConfigError, match="cannot read memory bandwidth 'x GB/s'"):
        predict("x GB/s", LLAMA_8B_Q4_K_M)


@pytest.mark.parametrize(
    ("hardware", "quant", "family", "device", "typical"),
    [
        ("RTX 4090", "F16", "f16", "consumer-gpu", 0.90),
        ("RTX 4090", "Q8_0", "q8", "consumer-gpu", 0.81),
        ("RTX 4090", "Q4_K_M", "q4", "consumer-gpu", 0.68),
        ("RTX 4090", 4.5, "q4", "consumer-gpu", 0.68),
        ("Apple M4 Max", "Q4_0", "q4", "apple", 0.74),
        ("RX 7900 XTX", "Q4_K_M", "q4", "amd-gpu", 0.62),
        ("H100 SXM", "F16", "f16", "datacenter-gpu", 0.40),
        ("DDR5-5600 x2", "Q8_0", "q8", "cpu", 0.60),
    ],
)
def test_band_per_quant_family_and_device_class(
    hardware: str, quant: str | float, family: str, device: str, typical: float
) -> None:
    pred = predict(hardware, LLAMA_8B_Q4_K_M, quant=quant, band_source="fixed")
    assert pred.band is not None and pred.band_origin == "fixed"
    assert (pred.band.family, pred.band.device_class) == (family, device)
    assert pred.band.typical == typical
    assert pred.efficiencies == pred.band.fractions
    assert pred.expected_low == pytest.approx(pred.ceiling.decode_tokens_per_s * pred.band.low)
    text = format_prediction(pred)
    assert f"efficiency band: {typical:.0%}" in text and "\n  source: " in text


def test_every_band_has_a_public_source_and_ordered_fractions() -> None:
    for band in BANDS:
        assert band.sources, band
        assert all(s.startswith(("https://", "db/runs/")) for s in band.sources), band
        assert 0 < band.low < band.typical < band.high <= 1.0, band
    for family in QUANT_FAMILIES:
        for device in get_args(DeviceClass):
            assert band_for(family, device).family == family


def test_f16_bands_sit_above_q4_bands_where_measured() -> None:
    for device in ("consumer-gpu", "apple", "amd-gpu"):
        assert band_for("f16", device).typical > band_for("q4", device).typical


@pytest.mark.parametrize(
    ("quant", "family"),
    [("Q4_K_M", "q4"), ("q8_0", "q8"), ("BF16", "f16"), ("Q6_K", "q5-q6"), ("IQ2_XS", "low-bit"),
     ("MXFP4", "q4"), ("4.5", "q4"), (8.5, "q8"), (16, "f16"), (2.6, "low-bit"), ("what", None)],
)
def test_quant_family(quant: str | float, family: str | None) -> None:
    assert quant_family(quant) == family


def test_unknown_device_or_quant_gets_the_span() -> None:
    wide = band_for(None, "unknown")
    assert wide.low <= band_for("q4", "amd-gpu").low and wide.high >= band_for("f16", "consumer-gpu").high
    assert "unknown" in wide.derived


def test_footprint_from_file_size() -> None:
    by_quant = footprint_from_file_size(4.9e9, "Q4_K_M")
    assert by_quant.weights_bytes == pytest.approx(4.9e9, rel=1e-6)
    assert by_quant.total_parameters == pytest.approx(4.9e9 * 8 / 4.84, rel=1e-3)
    by_params = footprint_from_file_size(4.9e9, None, parameters=8e9, n_layer=32, n_head_kv=8,
                                         head_dim=128, depth_tokens=4096)
    assert by_params.weights_bytes == pytest.approx(4.9e9, rel=1e-6)
    assert by_params.kv_bytes == 32 * 2 * 8 * 128 * 2 * 4096
    with pytest.raises(ConfigError, match="needs --params or --quant"):
        footprint_from_file_size(4.9e9, None)
    with pytest.raises(ConfigError, match="file size -1.0 bytes must be positive"):
        footprint_from_file_size(-1.0, "Q4_K_M")


def test_json_expected_decode_has_named_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.cli.main import main

    assert main(["predict", "--hardware", "RTX 4090", "--params", "8e9", "--quant", "Q4_K_M",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    band = data["efficiency_band"]
    expected = data["expected_decode_tokens_per_s"]
    assert set(expected) == {"low", "typical", "high"}
    ceiling = data["decode_ceiling_tokens_per_s"]
    for key in ("low", "typical", "high"):
        assert expected[key] == pytest.approx(ceiling * band[key])
    assert [e["efficiency"] for e in data["expected_decode"]] == [
        band["low"], band["typical"], band["high"]]


def test_does_not_fit_replaces_the_expected_line() -> None:
    big = Footprint(architecture="llama", weights_bytes=40_000_000_000,
                    kv_bytes_per_position=0, depth_tokens=0, kv_type="f16",
                    resident_bytes=40_000_000_000, active_parameters=70_000_000_000,
                    total_parameters=70_000_000_000)
    pred = predict("RTX 4090", big, quant="Q4_K_M")
    lines = format_prediction(pred).splitlines()
    assert lines[2] == "expected decode: does not fit (40.00 GB needed of 24.00 GB)"
    assert not any(line.startswith("expected decode: ") and "tok/s" in line for line in lines)
    data = prediction_to_dict(pred)
    assert data["expected_decode_tokens_per_s"] is None and data["fits"] is False
    assert any(w.startswith("does not fit: 40.00 GB needed of 24.00 GB") for w in data["warnings"])


def test_small_model_on_a_gpu_warns_overhead_bound() -> None:
    """67 MB of weights on an RTX 4090: the band's 80-98% would promise ~7,000 tok/s."""
    tiny = footprint_from_file_size(67e6, "F16")
    text = format_prediction(predict("RTX 4090", tiny, quant="F16"))
    assert "warning: 67.0 MB of weights per token is under 1 GB" in text
    assert "overhead" not in format_prediction(predict("RTX 4090", LLAMA_8B_Q4_K_M))
    cpu = format_prediction(predict("DDR5-5600 x2", tiny, quant="F16"))
    assert "under 1 GB" not in cpu  # a CPU has no launch overhead to speak of


def test_moe_without_expert_sizes_warns_and_with_them_does_not() -> None:
    from pytest_tokperf.model.estimate import estimate_footprint

    blurred = estimate_footprint(30e9, "Q4_K_M", active_parameters=3e9)
    assert any(w.startswith("MoE without expert sizes") for w in
               predict("RTX 4090", blurred, quant="Q4_K_M").warnings)
    priced = estimate_footprint(21e9, "Q8_0", active_parameters=4.3e9,
                                expert_parameters=19e9, expert_quant="MXFP4")
    assert not predict("RTX 4090", priced, quant="MXFP4", expert_sizes=True).warnings


def test_a_dense_model_file_is_not_called_a_moe(tmp_path: pathlib.Path) -> None:
    # a dense GGUF reads fewer parameters than it holds (one embedding row per token)
    from pytest_tokperf.model.footprint import footprint
    from pytest_tokperf.model.gguf_file import load_gguf
    from pytest_tokperf.model.spec import TEST_MODEL
    from pytest_tokperf.model.writer import write_model

    fp = footprint(load_gguf(write_model(TEST_MODEL, tmp_path / "m.gguf")), depth_tokens=0)
    assert fp.active_parameters < fp.total_parameters and fp.expert_count == 0
    assert not any("MoE" in w for w in predict("Apple M4 Max", fp, quant="F16").warnings)


def test_cli_moe_experts_set_the_active_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.cli.main import main
    from pytest_tokperf.model.estimate import bits_per_weight

    assert main(["predict", "--hardware", "RTX 4090", "--params", "21e9", "--quant", "Q8_0",
                 "--expert-params", "19e9", "--expert-quant", "MXFP4", "--experts", "4/32",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dense, experts_read = 2e9, 19e9 * 4 / 32
    bytes_read = dense * bits_per_weight("Q8_0") / 8 + experts_read * bits_per_weight("MXFP4") / 8
    assert data["weights_bytes_per_token"] == pytest.approx(bytes_read, rel=1e-6)
    assert data["efficiency_band"]["quant_family"] == "q4"  # the experts' MXFP4 dominates
    assert not data["warnings"]


@pytest.mark.parametrize("argv, message", [
    (["--experts", "40/32"], "--experts '40/32' must be USED/TOTAL"),
    (["--experts", "4/32"], "--experts needs --params and --expert-params"),
])
def test_cli_moe_bad_experts(capsys: pytest.CaptureFixture[str], argv: list[str],
                             message: str) -> None:
    from pytest_tokperf.cli.main import main

    base = ["predict", "--hardware", "RTX 4090", "--params", "21e9"]
    assert main([*base, *argv]) == 2
    assert message in capsys.readouterr().err


def test_band_at_depth_is_named_and_the_kv_is_in_the_ceiling() -> None:
    from pytest_tokperf.model.estimate import estimate_footprint

    shallow = estimate_footprint(8e9, "Q4_K_M", n_layer=32, n_head_kv=8, head_dim=128)
    deep = estimate_footprint(8e9, "Q4_K_M", n_layer=32, n_head_kv=8, head_dim=128,
                              depth_tokens=32768)
    a = predict("RTX 4090", shallow, quant="Q4_K_M", band_source="fixed")
    b = predict("RTX 4090", deep, quant="Q4_K_M", band_source="fixed")
    assert b.ceiling.decode_tokens_per_s < a.ceiling.decode_tokens_per_s
    assert b.expected_high == pytest.approx(b.ceiling.decode_tokens_per_s * b.efficiencies[-1])
    text = format_prediction(b)
    assert "efficiency band: 68% (55%-80%) for q4 on a consumer" in text
    assert "at depth 32768" in text and "  at depth: the ceiling counts the KV" in text
    assert prediction_to_dict(b)["efficiency_band"]["depth_tokens"] == 32768
    assert "  at depth: " not in format_prediction(a)


def test_fitted_band_charges_depth_beyond_the_kv_bytes() -> None:
    from pytest_tokperf.model.estimate import estimate_footprint

    shape = {"n_layer": 32, "n_head_kv": 8, "head_dim": 128}
    a = predict("RTX 4090", estimate_footprint(8e9, "Q4_K_M", **shape), quant="Q4_K_M")
    b = predict("RTX 4090", estimate_footprint(8e9, "Q4_K_M", depth_tokens=32768, **shape),
                quant="Q4_K_M")
    assert a.band_origin == b.band_origin == "fitted"
    assert a.band is not None and b.band is not None
    assert b.band.typical < a.band.typical  # the depth cost, on top of the KV in the ceiling
    text = format_prediction(b)
    assert "  at depth: the ceiling counts the KV read at this depth and the fitted" in text
    data = prediction_to_dict(b)["efficiency_band"]
    assert data["origin"] == "fitted" and data["depth_note"].startswith("the ceiling counts")


def test_a_class_with_enough_public_rows_gets_the_fitted_band() -> None:
    pred = predict("RTX 4090", LLAMA_8B_Q4_K_M, quant="Q4_K_M")
    assert pred.band is not None and pred.band_origin == "fitted"
    assert pred.band.low < pred.band.typical <= pred.band.high <= 1.0
    assert pred.efficiencies == pred.band.fractions
    text = format_prediction(pred)
    from pytest_tokperf.expected.band_fit import load_fitted

    fitted = load_fitted()
    assert fitted is not None
    rows = fitted.model.rows_per_class["consumer-gpu"]
    sources = fitted.model.sources_per_class["consumer-gpu"]
    inside, checked = fitted.loso_inside["consumer-gpu"]
    assert rows >= 20 and inside / checked >= 0.9  # the target, on the shipped fit
    assert (f"\n  band from: fitted model of db/public ({rows} rows from {sources} sources; "
            f"each source held out: {inside}/{checked} ({inside / checked:.0%}) inside;") in text
    assert "\n  source: db/public: published llama-bench rows" in text
    data = prediction_to_dict(pred)["efficiency_band"]
    assert data["origin"] == "fitted" and data["origin_detail"].startswith("fitted model")
    # the fixed band is still there when asked for
    assert predict("RTX 4090", LLAMA_8B_Q4_K_M, quant="Q4_K_M",
                   band_source="fixed").band == band_for("q4", "consumer-gpu")


@pytest.mark.parametrize(("hardware", "quant", "why"), [
    ("Apple M4 Max", "Q4_0", "Apple Silicon (Metal) has 7)"),
    ("RX 7900 XTX", "Q4_K_M", "an AMD Radeon GPU (ROCm or Vulkan) has 9)"),
    ("RTX 4090", None, "the fitted model needs the quant (--quant) to price the bytes)"),
    ("H100 SXM", "F16", "a data-centre GPU at batch 1 has 0)"),
])
def test_classes_with_few_public_rows_keep_the_fixed_band(
        hardware: str, quant: str | None, why: str) -> None:
    pred = predict(hardware, LLAMA_8B_Q4_K_M, quant=quant)
    assert pred.band_origin == "fixed"
    assert pred.band_detail.startswith("fixed band of expected.bands (")
    assert pred.band_detail.endswith(why)
    assert f"  band from: {pred.band_detail}" in format_prediction(pred)


def test_fitted_band_follows_the_per_token_overhead() -> None:
    """A small model loses more to the fixed per-token cost than a big one."""
    small = predict("RTX 4090", footprint_from_file_size(1.2e9, "Q8_0"), quant="Q8_0")
    big = predict("RTX 4090", footprint_from_file_size(12e9, "Q8_0"), quant="Q8_0")
    assert small.band is not None and big.band is not None
    assert small.band.typical < big.band.typical - 0.1
    tiny = footprint_from_file_size(67e6, "F16")
    fitted = predict("RTX 4090", tiny, quant="F16")
    fixed = predict("RTX 4090", tiny, quant="F16", band_source="fixed")
    # the fixed band promises over 12,000 tok/s for 67 MB; the overhead puts it near 1,600
    assert fixed.expected_low > 12_000
    assert fitted.expected_tokens_per_s[1] < 2_000 and fitted.expected_high < 2_500
    assert any("the fitted band counts that cost" in w for w in fitted.warnings)
    assert any("overstates it" in w for w in fixed.warnings)
