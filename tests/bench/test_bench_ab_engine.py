"""The same-run A/B on the real llama-server: pytest options, build changes, compare-builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tokperf.builds.identity import build_changes, build_identity
from pytest_tokperf.cli.main import main
from tests.versions.test_bisect import PAIRED_ARGS, two_builds

pytestmark = pytest.mark.engine

ARGS = ["--tokperf-engine", "llama-server", "--tokperf-model", "test", "--tokperf-threads", "1",
        "--tokperf-bandwidth", "30GB/s", "--tokperf-db", "off", "--tokperf-ab-budget", "0"]


def test_a_control_binary_turns_every_call_into_an_ab(
        pytester: pytest.Pytester, server_binary: Path) -> None:
    pytester.makepyfile("""
        import pathlib

        def test_short(tok_bench):
            r = tok_bench(prompt_tokens=32, generate_tokens=8, repetitions=4, warmup=1)
            assert r.ab is not None and r.ab.pairs == 4
            assert r.ab.changed.startswith("nothing: the same binary (sha256 ")
            assert r.ab.control.engine.base_url != r.ab.candidate.engine.base_url
            assert r.ab.verdict("decode") is not None
            assert r.efficiency is not None and r.efficiency > 0  # the candidate's own ceiling
            # both servers started here: on Linux the A/B reads their threads' clocks
            if pathlib.Path("/proc/self/schedstat").exists():
                assert r.ab.clock.startswith("decode, prefill, ttft judged net of the engines'"), r.ab.clock
    """)
    result = pytester.runpytest(*ARGS, f"--tokperf-server-bin={server_binary}", f"--tokperf-ab-engine={server_binary}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["A/B test_a_control_binary_turns_every_call_into_an_ab.py::"
                                 "test_short: same-run A/B against control b*: decode *",
                                 "server: http://127.0.0.1:* (stopped at session end)",
                                 "control server: http://127.0.0.1:* (stopped at session end)"])


def test_a_floor_applies_to_the_candidate_alone(pytester: pytest.Pytester,
                                                server_binary: Path) -> None:
    pytester.makepyfile("""
        def test_short(tok_bench):
            tok_bench(prompt_tokens=32, generate_tokens=8, repetitions=2, warmup=0)
    """)
    result = pytester.runpytest(*ARGS, f"--tokperf-server-bin={server_binary}", f"--tokperf-ab-engine={server_binary}",
                                "--tokperf-min-efficiency", "1.5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*decode * tok/s is *% of the * tok/s ceiling*required >= 150%*"])


def test_a_different_control_model_is_refused_unless_named(
        pytester: pytest.Pytester, server_binary: Path, tmp_path: Path) -> None:
    from pytest_tokperf.model.writer import TEST_MODEL, cached_model

    other = tmp_path / "other.gguf"
    other.write_bytes(cached_model(TEST_MODEL).read_bytes())
    pytester.makepyfile("""
        def test_short(tok_bench):
            r = tok_bench(prompt_tokens=32, generate_tokens=8, repetitions=2, warmup=0)
            assert "the models differ" in r.ab.describe()
    """)
    # the model named on purpose: measured, and said to differ
    result = pytester.runpytest(*ARGS, f"--tokperf-server-bin={server_binary}", f"--tokperf-ab-engine={server_binary}",
                                f"--tokperf-ab-model={other}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*the models differ: control 'other.gguf', candidate "
                                 "'tokperf-test-*.gguf'*"])


def test_a_killed_control_fails_naming_it(pytester: pytest.Pytester, server_binary: Path,
                                           tmp_path: Path) -> None:
    pid_file = tmp_path / "control.pid"
    wrapper = tmp_path / "llama-server-dies"
    wrapper.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\nexec "{server_binary}" "$@"\n')
    wrapper.chmod(0o755)
    pytester.makepyfile(f"""
        import os, signal
        from pathlib import Path

        def test_short(tok_bench):
            tok_bench.ab.control()  # started now, beside the candidate
            os.kill(int(Path({str(pid_file)!r}).read_text()), signal.SIGKILL)
            tok_bench(prompt_tokens=32, generate_tokens=8, repetitions=4, warmup=0)
    """)
    result = pytester.runpytest(*ARGS, f"--tokperf-server-bin={server_binary}", f"--tokperf-ab-engine={wrapper}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*MeasurementError: same-run A/B, control side "
                                 "(http://127.0.0.1:*) did not answer:*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_build_identity_tells_a_flag_changed_build_apart(server_binary: Path,
                                                         tmp_path: Path) -> None:
    ident = build_identity(server_binary)
    assert ident.release is not None and ident.release.startswith("b")
    assert ident.cmake_flags is not None and ident.label == ident.release
    custom = tmp_path / "custom" / "llama-server"
    custom.parent.mkdir()
    custom.write_bytes(server_binary.read_bytes())
    custom.chmod(0o755)
    meta = json.loads((server_binary.parent / "install.json").read_text())
    flags = [f for f in meta["cmake_flags"] if "GGML_NATIVE" not in f] + [
        "-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF"]
    (custom.parent / "install.json").write_text(json.dumps({**meta, "cmake_flags": flags}))
    other = build_identity(custom)
    assert other.label == f"{ident.release}+GGML_NATIVE=OFF,GGML_AVX2=OFF"
    custom.write_bytes(server_binary.read_bytes() + b"\0")  # a different binary
    changed = build_changes(server_binary, custom)
    assert changed.startswith("build flags -GGML_NATIVE=ON +GGML_NATIVE=OFF +GGML_AVX2=OFF; "
                              "binary sha256 ")


def test_compare_builds_paired_finds_a_ttft_step(server_binary: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # the default design in small: the budget split over 4 starts, both servers restarted
    a, b = two_builds(tmp_path, server_binary, monkeypatch)
    args = ["compare-builds", a, b, "--rounds", "1", "--metric", "ttft", "--db",
            str(tmp_path / "c.db"), "--json", "--", "test_selection.py",
            *PAIRED_ARGS, "--tokperf-ab-budget", "10", "-o", "tokperf_ab_starts=4"]
    assert main(args) == 0
    found = json.loads(capsys.readouterr().out)
    assert "binary sha256" in found["changed"]
    (ttft,) = found["results"]
    assert ttft["comparison"]["verdict"] == "regression" and ttft["starts"] == 4
    assert "from 4 server starts a side" in ttft["comparison"]["reason"]
    assert ttft["pairs"] >= 8 and ttft["median_b"] > ttft["median_a"]


def test_a_flag_changed_build_is_its_own_environment(pytester: pytest.Pytester,
                                                     server_binary: Path, tmp_path: Path) -> None:
    import sqlite3

    custom = tmp_path / "avx2-off" / "llama-server"
    custom.parent.mkdir()
    custom.write_bytes(server_binary.read_bytes())
    custom.chmod(0o755)
    meta = json.loads((server_binary.parent / "install.json").read_text())
    flags = [f for f in meta["cmake_flags"] if "GGML_NATIVE" not in f] + [
        "-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF"]
    (custom.parent / "install.json").write_text(json.dumps({**meta, "cmake_flags": flags}))
    pytester.makepyfile("""
        def test_short(tok_bench):
            tok_bench(prompt_tokens=16, generate_tokens=4, repetitions=1, warmup=0)
    """)
    db = tmp_path / "r.db"
    args = [a if a != "off" else str(db) for a in ARGS]
    for binary in (server_binary, custom):
        pytester.runpytest(*args, f"--tokperf-server-bin={binary}").assert_outcomes(passed=1)
    rows = sqlite3.connect(db).execute(
        "SELECT engine_build, engine_settings FROM environments ORDER BY id").fetchall()
    release = build_identity(server_binary).release
    assert [r[0] for r in rows] == [release, f"{release}+GGML_NATIVE=OFF,GGML_AVX2=OFF"]
    settings = [json.loads(r[1]) for r in rows]
    assert settings[0]["binary_sha256"] == settings[1]["binary_sha256"]  # same bytes, other flags
    assert "-DGGML_AVX2=OFF" in settings[1]["build_flags"]
