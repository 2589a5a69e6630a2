"""Options, ini/env precedence and every bad input the user can give the plugin."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from pytest_tokperf.launch.process import free_port
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.settings import resolve

TOUCH = "def test_x(tok_bench):\n    tok_bench(prompt_tokens=8, generate_tokens=4, repetitions=1, warmup=0)\n"


def _resolve(cli: dict[str, str] | None = None, ini: dict[str, str] | None = None,
             env: dict[str, str] | None = None):
    return resolve(cli=lambda n: (cli or {}).get(n), ini=lambda k: (ini or {}).get(k),
                   env=env or {}, rootdir=Path("/proj"))


def test_help_lists_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines([
        "*LLM engine performance (pytest-tokperf)*",
        "*--tokperf-engine=NAME*",
        "*--tokperf-url=URL*",
        "*--tokperf-model=PATH*",
        "*--tokperf-server-bin=PATH*",
        "*--tokperf-db=PATH*",
        "*--tokperf-bandwidth=BW*",
        "*--tokperf-min-efficiency=F*",
        "*--tokperf-baseline=SPEC*",
        "*--tokperf-min-effect=F*",
        "*= 5%) (default 0.05)*",
        "*--tokperf-fail-on-regression*",
        "*--tokperf-server-arg=ARG*",
    ])
    result.stdout.fnmatch_lines(["*tokperf_min_efficiency (string):*"])


def test_precedence_cli_env_ini_default() -> None:
    assert _resolve().repetitions is None  # adaptive
    assert _resolve(ini={"tokperf_repetitions": "7"}).repetitions == 7
    assert _resolve(cli={"repetitions": "3"}, ini={"tokperf_repetitions": "7"}).repetitions == 3
    assert _resolve(env={"PYTEST_TOKPERF_MODEL": "test"}, ini={"tokperf_model": "x.gguf"}).model == "test"
    assert _resolve(cli={"model": "a.gguf"}, env={"PYTEST_TOKPERF_MODEL": "test"}).model == "a.gguf"
    assert _resolve().db == Path("/proj/.tokperf/results.db")
    assert _resolve(cli={"db": "off"}).db is None
    env_db = {"PYTEST_TOKPERF_DB": "/env.db"}
    assert _resolve(env=env_db, ini={"tokperf_db": "/ini.db"}).db == Path("/env.db")
    assert _resolve(cli={"db": "/cli.db"}, env=env_db).db == Path("/cli.db")
    assert _resolve(ini={"tokperf_db": "/ini.db"}).db == Path("/ini.db")
    for off in ("off", "None", "no", " OFF "):
        assert _resolve(cli={"db": off}, env=env_db).db is None
        assert _resolve(env={"PYTEST_TOKPERF_DB": off}, ini={"tokperf_db": "/ini.db"}).db is None
        assert _resolve(ini={"tokperf_db": off}).db is None
    assert _resolve(cli={"url": "http://127.0.0.1:9/"}).engine == "llama-server"


def test_adaptive_repetition_options_and_the_bandwidth_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = _resolve()
    assert (settings.target_interval, settings.min_repetitions, settings.max_repetitions,
            settings.max_cv) == (0.02, 3, 10, 0.05)
    tuned = _resolve(cli={"repetitions": "3-20"}, ini={"tokperf_max_cv": "0.1"},
                     env={"PYTEST_TOKPERF_BANDWIDTH_FILE": "off",
                          "PYTEST_TOKPERF_TARGET_INTERVAL": "0.01"})
    assert (tuned.target_interval, tuned.max_repetitions, tuned.max_cv) == (0.01, 20, 0.1)
    assert tuned.bandwidth_file is None
    assert settings.bandwidth_file is None  # no engine: the cache dir is not looked up
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(tmp_path))
    started = _resolve(cli={"engine": "llama-server"})
    assert started.bandwidth_file == tmp_path / "bandwidth.json"


@pytest.mark.parametrize(("cli", "message"), [
    ({"repetitions": "0"}, "--tokperf-repetitions '0' from option --tokperf-repetitions is "
     "neither N (a whole number in [1, 1048576]) nor MIN-MAX (2 <= MIN <= MAX); e.g. 5, or 3-10"),
    ({"warmup": "-1"}, "--tokperf-warmup '-1'"),
    ({"url": "localhost:8080"}, "is not an http(s) URL"),
    ({"engine": "llamaserver"}, "--tokperf-engine 'llamaserver' is not an engine this plugin knows"),
    ({"startup_timeout": "soon"}, "--tokperf-startup-timeout 'soon'"),
    ({"repetitions": "1-10"}, "--tokperf-repetitions '1-10' from option --tokperf-repetitions "
     "is neither N"),
    ({"repetitions": "6-4"}, "(2 <= MIN <= MAX)"),
    ({"ab_engine": "localhost:8080"}, "--tokperf-ab-engine 'localhost:8080' from option "
     "--tokperf-ab-engine is no http(s) URL, no llama.cpp release (e.g. b11292) and no "
     "llama-server binary (no such file); give one of those, e.g. --tokperf-ab-engine b11292"),
    ({"ab_engine": "ftp://host:1"}, "--tokperf-ab-engine 'ftp://host:1' from option "
     "--tokperf-ab-engine is not an http(s) URL; use e.g. --tokperf-ab-engine http://"),
    ({"ab_engine": "b11292x"}, "is no http(s) URL, no llama.cpp release"),
    ({"report": "out.txt"}, "--tokperf-report 'out.txt' from option --tokperf-report: the "
     "suffix names the format, and '.txt' is none of .md, .markdown, .json, .html, .htm, .svg, "
     ".png; e.g. --tokperf-report summary.md"),
    ({"report": "out"}, "and 'no suffix' is none of .md"),
])
def test_bad_values_name_value_and_fix(cli: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(cli={"engine": "llama-server", **cli})
    assert message in str(info.value)


@pytest.mark.parametrize(("env", "ini", "message"), [
    ({"PYTEST_TOKPERF_TARGET_INTERVAL": "2"}, {}, "tokperf_target_interval '2' from "
     "environment variable PYTEST_TOKPERF_TARGET_INTERVAL is not a fraction in (0, 1); e.g. 0.02"),
    ({}, {"tokperf_max_cv": "0"}, "tokperf_max_cv '0' from ini option tokperf_max_cv"),
    ({}, {"tokperf_repetitions": "5-3"}, "'5-3' from ini option tokperf_repetitions"),
])
def test_project_settings_are_named_as_they_are_set(env: dict[str, str], ini: dict[str, str],
                                                    message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(env=env, ini=ini)
    assert message in str(info.value)


def test_the_ab_engine_takes_a_url_a_release_or_a_binary(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    engine = {"engine": "llama-server"}
    attached = _resolve(cli={"url": "http://127.0.0.1:9", "ab_engine": "https://h:8/"})
    assert (attached.ab_url, attached.ab_server_bin, attached.ab_engine_version) == (
        "https://h:8", None, None)
    for release in ("b11292", "11292"):
        assert _resolve(cli={**engine, "ab_engine": release}).ab_engine_version == "b11292"
    started = _resolve(cli={**engine, "ab_engine": str(binary), "ab_model": "x.gguf"})
    assert (started.ab_server_bin, started.ab_model, started.ab) == (str(binary), "x.gguf", True)
    assert started.ab_settings().server_bin == str(binary)
    assert not _resolve(cli=engine).ab


def test_repetitions_take_n_or_min_max_and_reports_their_suffix() -> None:
    fixed = _resolve(cli={"repetitions": "5"})
    assert (fixed.repetitions, fixed.min_repetitions, fixed.max_repetitions) == (5, 3, 10)
    ranged = _resolve(ini={"tokperf_repetitions": "4-6"})
    assert (ranged.repetitions, ranged.min_repetitions, ranged.max_repetitions) == (None, 4, 6)
    reports = _resolve(cli={"report": ["a.md", "b.JSON", "c/d.htm"]})
    assert (reports.report_md, reports.report_json, reports.report_html) == (
        "a.md", "b.JSON", "c/d.htm")
    assert _resolve(ini={"tokperf_report": "s.markdown, r.html"}).report_html == "r.html"


PROJECT_SETTINGS = {"target_interval": "0.04", "max_cv": "0.04", "agreement": "0.04",
                    "max_body": "8MiB", "columns": "200", "idle_timeout": "30",
                    "bandwidth_file": "off", "api_key_env": "PYTEST_TOKPERF_API_KEY"}


def test_project_settings_are_ini_keys_and_variables_not_flags() -> None:
    from pytest_tokperf.settings import OPTIONS

    assert set(PROJECT_SETTINGS) <= {s.name for s in OPTIONS if not s.cli}
    asked: list[str] = []
    resolve(cli=lambda n: asked.append(n), ini=lambda k: None, env={}, rootdir=Path("/proj"))
    assert asked and not set(asked) & {s.name for s in OPTIONS if not s.cli}
    ini = {f"tokperf_{name}": value for name, value in PROJECT_SETTINGS.items()}
    from_ini = _resolve(ini=ini)
    assert (from_ini.target_interval, from_ini.columns, from_ini.max_body) == (
        0.04, 200, 8 << 20)
    env = {f"PYTEST_TOKPERF_{name.upper()}": value for name, value in PROJECT_SETTINGS.items()}
    assert _resolve(env=env, ini={"tokperf_columns": "300"}).columns == 200


def test_a_front_end_may_take_a_project_setting_as_its_own_option() -> None:
    """``tokperf bench --columns 200``: a name in ``flags`` is read from ``cli``."""
    given = {"columns": "200", "target_interval": "0.05"}
    settings = resolve(cli=given.get, ini=lambda k: None, env={"PYTEST_TOKPERF_COLUMNS": "90"},
                       rootdir=Path("/proj"), flags={"columns": "--columns",
                                                     "target_interval": "--target-interval"})
    assert (settings.columns, settings.target_interval) == (200, 0.05)
    with pytest.raises(ConfigError, match=r"^--columns '20' from option --columns"):
        resolve(cli={"columns": "20"}.get, ini=lambda k: None, env={}, rootdir=Path("/proj"),
                flags={"columns": "--columns"})


def test_a_project_setting_is_no_command_line_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--tokperf-max-cv", "0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --tokperf-max-cv*"])
    pytester.makeini("[pytest]\ntokperf_max_cv = 0.5\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_bad_ini_value_names_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntokperf_repetitions = many\n")
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'many' from ini option tokperf_repetitions*"])


def test_no_engine_skips_with_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TOUCH)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no engine configured: pass --tokperf-engine llama-server*"])


def test_missing_server_binary_is_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--tokperf-engine", "llama-server",
                                "--tokperf-server-bin", "/nope/llama-server")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tokperf-server-bin '/nope/llama-server' does not exist*"])


def test_non_executable_server_binary(pytester: pytest.Pytester) -> None:
    binary = pytester.path / "llama-server"
    binary.write_text("not a program")
    binary.chmod(stat.S_IRUSR | stat.S_IWUSR)
    result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin", str(binary))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not an executable file (chmod +x it*"])


def test_missing_model_is_usage_error(pytester: pytest.Pytester, server_binary: Path) -> None:
    result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin",
                                str(server_binary), "--tokperf-model", "missing.gguf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'missing.gguf' does not exist; pass a .gguf file*"])


def test_non_gguf_model_is_usage_error(pytester: pytest.Pytester, server_binary: Path) -> None:
    model = pytester.path / "model.bin"
    model.write_bytes(b"PK\x03\x04 a zip archive, not a model file at all")
    result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin",
                                str(server_binary), "--tokperf-model", str(model))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not a GGUF file (starts with b'PK\\x03\\x04'*"])


def test_corrupt_gguf_header_is_usage_error(pytester: pytest.Pytester, server_binary: Path) -> None:
    model = pytester.path / "broken.gguf"
    model.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + bytes(16))
    result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin",
                                str(server_binary), "--tokperf-model", str(model))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*claims 1099511627776 tensors*header is corrupt*"])


@pytest.mark.engine
def test_server_exiting_during_startup_shows_log(pytester: pytest.Pytester, server_binary: Path) -> None:
    import gguf

    model = pytester.path / "alien.gguf"
    writer = gguf.GGUFWriter(str(model), "alien-arch")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    pytester.makepyfile(TOUCH)
    result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin",
                                str(server_binary), "--tokperf-model", str(model), "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*EngineUnavailable: llama-server exited with code * during start-up. Last lines of *llama-server-*.log:",
        "*alien-arch*",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")


@pytest.mark.engine
def test_port_in_use(pytester: pytest.Pytester, server_binary: Path, test_model: Path) -> None:
    pytester.makepyfile(TOUCH)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = pytester.runpytest("--tokperf-engine", "llama-server", "--tokperf-server-bin",
                                    str(server_binary), "--tokperf-model", str(test_model),
                                    "--tokperf-port", str(port), "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*port {port} on 127.0.0.1 is already in use*"])


def test_unreachable_url_fails_cleanly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TOUCH)
    url = f"http://127.0.0.1:{free_port()}"
    result = pytester.runpytest("--tokperf-url", url, "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*--tokperf-url '{url}' does not answer as a ready llama-server*"])
    result.stdout.no_fnmatch_line("*Traceback*")


@pytest.mark.engine
def test_request_timeout_fails_cleanly(pytester: pytest.Pytester, llama_url: str) -> None:
    pytester.makepyfile(
        "def test_x(tok_bench):\n"
        "    tok_bench(prompt_tokens=8, generate_tokens=400, repetitions=1, warmup=0)\n"
    )
    result = pytester.runpytest("--tokperf-url", llama_url, "--tokperf-request-timeout", "0.05",
                                "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*did not finish 400 tokens within 0.05 s; raise --tokperf-request-timeout*"])
    result.stdout.no_fnmatch_line("*httpx*Timeout*Traceback*")


def test_marker_rejects_unknown_argument(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.tokperf(repetitons=3)\n" + TOUCH
    )
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off")
    result.assert_outcomes(errors=1)
    assert "@pytest.mark.tokperf got unknown argument(s) ['repetitons']; known: repetitions, warmup" in result.stdout.str()


@pytest.mark.engine
def test_marker_sets_repetitions(pytester: pytest.Pytester, llama_url: str) -> None:
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.tokperf(repetitions=3, warmup=0)\n"
        "def test_x(tok_bench):\n"
        "    r = tok_bench(prompt_tokens=8, generate_tokens=4)\n"
        "    assert len(r.result.samples) == 3\n"
    )
    result = pytester.runpytest("--tokperf-url", llama_url, "--tokperf-db", "off")
    result.assert_outcomes(passed=1)


def test_bad_workload_is_clear(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "def test_x(tok_bench):\n"
        "    tok_bench(prompt_tokens=8, generate_tokens=1)\n"
    )
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*generate_tokens=1 is not a whole number >= 2*"])


@pytest.mark.parametrize(("args", "ini", "expected"), [
    (["--tokperf-request-timeout", "inf"], "",
     "--tokperf-request-timeout 'inf' from option --tokperf-request-timeout is not a number "
     "of seconds in (0, 1e+06)"),
    (["--tokperf-port", "70000"], "",
     "--tokperf-port '70000' from option --tokperf-port is not a whole number in [1, 65535]"),
    (["--tokperf-min-effect", "50"], "",
     "--tokperf-min-effect '50' from option --tokperf-min-effect is not a fraction in (0, 1);"
     " 0.05 means a 5% change"),
    ([], "tokperf_fail_on_regression = maybe",
     "--tokperf-fail-on-regression 'maybe' from ini option tokperf_fail_on_regression is not "
     "true or false"),
    ([], "tokperf_agreement = nan",
     "tokperf_agreement 'nan' from ini option tokperf_agreement is not a fraction in (0, 1]"),
    (["--tokperf-ab-engine", "latest"], "", "--tokperf-ab-engine 'latest' from option "
     "--tokperf-ab-engine is no http(s) URL, no llama.cpp release"),
])
def test_bad_values_are_one_line_usage_errors(
    pytester: pytest.Pytester, args: list[str], ini: str, expected: str
) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(TOUCH)
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(errors) == 1 and expected in errors[0]
    assert "Traceback" not in result.stderr.str()


def test_a_bad_marker_value_names_the_argument(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.tokperf(repetitions='abc')\n" + TOUCH)
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off")
    result.assert_outcomes(errors=1)
    assert ("repetitions 'abc' from @pytest.mark.tokperf is not a whole number in [1, 1048576]"
            in result.stdout.str())
    assert "ValueError" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()


def test_marker_arguments_cover_every_workload_argument() -> None:
    from pytest_tokperf.bench.fixture import WORKLOAD_DEFAULTS
    from pytest_tokperf.settings import MARKER_ARGUMENTS

    assert set(WORKLOAD_DEFAULTS) | {"repetitions", "warmup", "min_efficiency"} == set(
        MARKER_ARGUMENTS)


def test_a_read_only_results_db_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    import os
    import subprocess

    from pytest_tokperf.storage.store import ResultStore

    db = pytester.path / "ro.db"
    ResultStore.open(db).close()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
            pytest.skip("no immutable attribute on this file system, and root ignores chmod")
    else:
        db.chmod(0o444)
    try:
        pytester.makepyfile(TOUCH)
        result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", str(db))
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot write the results database*readonly*"])


def test_xdist_workers_are_refused_for_measurements(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TOUCH)
    result = pytester.runpytest("-n", "2", "--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tokperf measures one engine at a time, and pytest-xdist "
                                 "would run 2 workers*pass -n 0*"])
    plain = pytester.runpytest("-n", "2", "-p", "no:randomly")  # no engine: -n is fine
    plain.assert_outcomes(skipped=1)


@pytest.mark.parametrize(("argv", "message"), [
    (["--tokperf-bandwidth", "-5GB/s"], "ERROR: --tokperf-bandwidth from option "
     "--tokperf-bandwidth: cannot read memory bandwidth '-5GB/s'; use '1008GB/s'*"),
    (["--tokperf-warmup", "-1e3"], "ERROR: --tokperf-warmup '-1e3' from option "
     "--tokperf-warmup is not a whole number in [[]0, 1048576]*"),
    (["--tokperf-request-timeout", "-1e3"], "ERROR: --tokperf-request-timeout '-1e3' from "
     "option --tokperf-request-timeout is not a number of seconds*"),
    (["--tokperf-server-arg", "--flash-attn"], "ERROR: --tokperf-server-arg '--flash-attn': "
     "a value after a space that starts with '-' is read by pytest as another option; write "
     "--tokperf-server-arg=--flash-attn"),
])
def test_a_value_after_a_space_that_starts_with_a_dash_is_named(
    pytester: pytest.Pytester, argv: list[str], message: str
) -> None:
    """pytest's parser takes '-5GB/s' for an option and said "expected one argument"."""
    pytester.makepyfile(TOUCH)
    result = pytester.runpytest(*argv)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "expected one argument" not in result.stderr.str()
