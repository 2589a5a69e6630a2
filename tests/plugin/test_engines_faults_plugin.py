"""The same faults through the plugin: what a user sees, and what is kept on disk.

Each run is a pytest subprocess attached to a misbehaving fake on 127.0.0.1; every
byte it prints or writes (stdout, stderr, results DB, JSON and markdown reports,
JUnit XML) is searched for the API key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.fake_engines import FakeOllama
from tests.support.fake_faults import FakeFaultyLlama

from pytest_tokperf.launch.process import free_port

SECRET = "sk-tokperf-SECRET-4f1c9a"

BENCH = """
def test_bench(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)
"""


def _run(pytester: pytest.Pytester, url: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(BENCH)
    return pytester.runpytest(
        "-v", "-l", "--tokperf-url", url, "--tokperf-bandwidth", "30GB/s",
        "--tokperf-report", "report.json", "--tokperf-report", "report.md",
        "--junitxml", "junit.xml", *args)


def _everything_written(pytester: pytest.Pytester, result: pytest.RunResult) -> bytes:
    files = [p.read_bytes() for p in Path(pytester.path).rglob("*") if p.is_file()]
    return b"\n".join([result.stdout.str().encode(), result.stderr.str().encode(), *files])


@pytest.mark.parametrize(("mode", "server_key", "shown"), [
    ("ok", SECRET, None),  # the key is right: measured and stored
    ("ok", "another-key", "*HTTP 401: Invalid API Key (got 'Bearer ***')*"),
    ("echo_error", None, "*reported an error mid-stream: upstream refused Bearer ****"),
])
def test_the_api_key_is_never_printed_or_stored(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str,
    server_key: str | None, shown: str | None,
) -> None:
    monkeypatch.setenv("PYTEST_TOKPERF_API_KEY", SECRET)
    with FakeFaultyLlama(mode, api_key=server_key) as fake:
        result = _run(pytester, fake.url, "--tokperf-db", "results.db")
    result.assert_outcomes(**({"passed": 1} if shown is None else {"failed": 1}))
    assert fake.authorizations and set(fake.authorizations) == {f"Bearer {SECRET}"}
    written = _everything_written(pytester, result)
    assert (pytester.path / "results.db").exists()
    assert SECRET.encode() not in written
    if shown is not None:
        result.stdout.fnmatch_lines([shown])


def test_a_key_in_a_named_variable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    monkeypatch.setenv("MY_ENGINE_KEY", SECRET)
    pytester.makeini("[pytest]\ntokperf_api_key_env = MY_ENGINE_KEY\n")
    with FakeFaultyLlama("ok", api_key=SECRET) as fake:
        result = _run(pytester, fake.url, "--tokperf-db", "off")
    result.assert_outcomes(passed=1)
    assert SECRET.encode() not in _everything_written(pytester, result)


def test_an_unset_key_variable_is_a_usage_error(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    pytester.makepyfile(BENCH)
    monkeypatch.setenv("PYTEST_TOKPERF_API_KEY_ENV", "NO_SUCH_KEY_VAR")
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tokperf_api_key_env 'NO_SUCH_KEY_VAR': the environment "
                                 "variable NO_SUCH_KEY_VAR is not set*"])


def test_a_key_given_instead_of_a_variable_name_is_refused_unechoed(
    pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(BENCH)
    pytester.makeini(f"[pytest]\ntokperf_api_key_env = {SECRET}\n")
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not an environment variable name; name the variable*"])


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf", "nan"])
def test_a_bad_idle_timeout_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(BENCH)
    pytester.makeini(f"[pytest]\ntokperf_idle_timeout = {value}\n")
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*tokperf_idle_timeout {value!r} from ini option "
                                 f"tokperf_idle_timeout is not a number of seconds*"])


def test_a_stall_fails_the_test_at_the_idle_limit(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntokperf_idle_timeout = 0.5\n")
    with FakeFaultyLlama("stall") as fake:
        result = _run(pytester, fake.url, "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*repetition 1 of 2 failed: *: no token for 0.5 s "
                                 "(ini tokperf_idle_timeout)*"])
    result.stdout.no_fnmatch_line("*raise --tokperf-request-timeout*")


def test_refused_says_refused(pytester: pytest.Pytester) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _run(pytester, url, "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*--tokperf-url '{url}' does not answer as a ready "
                                 f"llama-server: connection refused: nothing listens on*"])


def test_the_default_engine_at_an_ollama_url_names_ollama(pytester: pytest.Pytester) -> None:
    with FakeOllama() as fake:
        result = _run(pytester, fake.url, "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--tokperf-engine 'llama-server' (the default)*it looks like "
                                 "Ollama 0.12.3*Pass --tokperf-engine ollama to measure it*"])


def test_credentials_in_the_url_never_reach_output_or_the_db(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_tokperf.cli.main import main

    with FakeFaultyLlama("ok") as fake:
        host = fake.url.split("://", 1)[1]
        url = f"http://me:{SECRET}@{host}/?token={SECRET}"
        result = _run(pytester, url, "--tokperf-db", "results.db")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["tokperf: engine llama-server, attach http://127.0.0.1:*"])
    db = str(pytester.path / "results.db")
    assert main(["export", "--db", db, "-o", str(pytester.path / "export.json"), "--format", "json"]) == 0
    assert main(["save-reference", "--db", db, "-d", str(pytester.path / "runs")]) == 0
    assert main(["history", "--db", db, "test_bench", "--json"]) == 0
    shown = capsys.readouterr()
    written = _everything_written(pytester, result) + (shown.out + shown.err).encode()
    assert SECRET.encode() not in written
