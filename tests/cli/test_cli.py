"""The `tokperf` command: each verb's output and its errors (exit 2, one clear line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from pytest_tokperf.cli.main import main


def test_install_engine_reuses_cached_build(capsys: pytest.CaptureFixture[str],
                                            server_binary: Path) -> None:
    assert main(["install-engine", "llama-server", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["binary"] == str(server_binary)
    assert data["build_number"] == 11434 and data["cached"] is True
    assert "already built" in err


def test_make_model_writes_loadable_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "m.gguf"
    assert main(["make-model", "--preset", "test", "--layers", "2", "--type", "Q8_0",
                 "-o", str(out_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(out_path) and data["bytes"] == out_path.stat().st_size
    reader = gguf.GGUFReader(out_path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.block_count"].contents() == 2
    types = {t.tensor_type.name for t in reader.tensors}
    assert "Q8_0" in types


def test_make_model_size_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "s.gguf"
    assert main(["make-model", "--size", "20MB", "-o", str(out_path)]) == 0
    assert abs(out_path.stat().st_size - 20e6) / 20e6 < 0.10


def test_predict_catalog_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", "RTX 4090", "--params", "8e9", "--quant", "Q4_K_M"]) == 0
    out = capsys.readouterr().out
    assert "1008 GB/s" in out and "decode ceiling: 208" in out


def test_predict_bits_per_weight_and_file_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", "1000GB/s", "--params", "8e9", "--quant", "4.5"]) == 0
    out = capsys.readouterr().out
    assert "decode ceiling: 222.2 tok/s (1000 GB/s / 4.50 GB per token" in out
    assert "efficiency band: " in out and "for q4 on an unnamed device" in out
    assert main(["predict", "--hardware", "RTX 4090", "--size", "4.9GB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bytes_per_token"] == 4_900_000_000
    assert data["efficiency_band"]["quant_family"] == "q4"
    assert main(["predict", "--hardware", "RTX 4090", "--size", "16GB", "--params", "8e9",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["efficiency_band"]["quant_family"] == "f16"


def test_predict_gguf_json(capsys: pytest.CaptureFixture[str], test_model: Path) -> None:
    assert main(["predict", "--hardware", "100GB/s", "--model", str(test_model), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    reader = gguf.GGUFReader(test_model)
    tensors = {t.name: int(t.n_bytes) for t in reader.tensors}
    embd_row = tensors["token_embd.weight"] // reader.fields["llama.vocab_size"].contents() \
        if "llama.vocab_size" in reader.fields else None
    streamed = sum(v for k, v in tensors.items() if k != "token_embd.weight")
    assert embd_row is None or data["bytes_per_token"] == streamed + embd_row
    assert data["bytes_per_token"] >= streamed
    assert data["decode_ceiling_tokens_per_s"] == pytest.approx(100e9 / data["bytes_per_token"])
    assert data["bandwidth_source"] == "explicit"


@pytest.mark.parametrize(("argv", "message"), [
    (["predict", "--hardware", "RTX 9999", "--params", "8e9"], "hardware 'RTX 9999' does not name"),
    (["predict", "--hardware", "RTX 4090"], "predict needs a model"),
    (["predict", "--hardware", "RTX 4090", "--model", "/nope.gguf"], "/nope.gguf"),
    (["make-model", "--size", "lots"], "'lots'"),
])
def test_errors_exit_2_with_one_line(argv: list[str], message: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_console_script_help() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest_tokperf.cli.main", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for verb in ("install-engine", "make-model", "predict"):
        assert verb in out


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "--bandwidth", "-5GB/s"], "cannot read memory bandwidth '-5GB/s'"),
    (["bench", "--warmup", "-1e3"], "tokperf bench: --warmup '-1e3' from option --warmup is "
                                    "not a whole number"),
])
def test_a_negative_value_after_a_space_reaches_the_verbs_check(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse took '-5GB/s' for an option: "expected one argument", no value named."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
