"""llama-bench's own output (the README examples of tools/llama-bench) into the results DB."""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.cli.main import main
from pytest_tokperf.errors import StorageError
from pytest_tokperf.storage.exchange import read_runs
from pytest_tokperf.expected.llama_bench_parse import parse_llama_bench, read_llama_bench
from pytest_tokperf.expected.llama_bench_import import (
    SETTING_PREFIX,
    active_parameters_of,
    import_llama_bench,
    quant_of,
)
from pytest_tokperf.storage.store import ResultStore

FIXTURES = Path(__file__).parent / "llama_bench"
FULL_FORMS = ("readme.json", "readme.jsonl", "readme.csv", "readme.sql", "readme_new.json")


@pytest.mark.parametrize("name", [*FULL_FORMS, "readme.md"])
def test_every_readme_form_reads_its_rows(name: str) -> None:
    records = read_llama_bench(FIXTURES / name)
    text = (FIXTURES / name).read_text(encoding="utf-8")
    tg = [r for r in records if r.test_name.startswith("tg128")]
    assert tg and all(r.get("build_commit") == "8cf427ff" and r.get("build_number") == 5163
                      for r in records)
    # the tg128 figure printed in the file is the one read
    assert f"{tg[0].get('avg_ts'):.2f}" in text or repr(tg[0].get("avg_ts")) in text


def test_json_and_csv_give_the_same_typed_fields() -> None:
    """CSV and SQL print every value as text; they come back typed as the JSON has them."""
    json_rec = read_llama_bench(FIXTURES / "readme.json")[1].fields
    csv_rec = read_llama_bench(FIXTURES / "readme.csv")[1].fields
    sql_rec = read_llama_bench(FIXTURES / "readme.sql")[1].fields
    for rec in (csv_rec, sql_rec):
        assert rec["model_size"] == json_rec["model_size"] == 4677120000
        assert rec["use_mmap"] is True and rec["cpu_strict"] is False
        assert rec["tensor_split"] == "0.00" and rec["n_gpu_layers"] == 99
        assert set(json_rec) - set(rec) == {"samples_ns", "samples_ts"}


def test_md_rows_keep_depth_build_and_rounded_sizes() -> None:
    records = read_llama_bench(FIXTURES / "readme.md")
    names = [r.test_name for r in records]
    assert names == ["pp512", "tg128", "pp512", "tg128", "pp512 @ d512", "tg128 @ d512"]
    deep = records[-1].fields
    assert deep["n_depth"] == 512 and deep["avg_ts"] == 116.71 and deep["stddev_ts"] == 0.60
    assert deep["model_type"] == "qwen2 7B Q4_K - Medium" and deep["n_gpu_layers"] == 99
    assert deep["model_size"] == round(4.36 * 1024**3) and deep["model_n_params"] == 7.62e9
    assert "cpu_info" not in deep and "test_time" not in deep


def test_csv_with_a_value_missing_is_refused_with_its_line() -> None:
    """The current README's CSV example has 42 header fields and 41 values per row."""
    with pytest.raises(StorageError, match=r"readme_new.csv.*line 2 has 41 values for the 42"):
        read_llama_bench(FIXTURES / "readme_new.csv")


def test_sql_cannot_reach_outside_its_memory_database(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    text = (f"ATTACH DATABASE '{target}' AS x; CREATE TABLE x.t (a); "
            "INSERT INTO x.t VALUES (1);")
    with pytest.raises(StorageError, match="not readable llama-bench -o sql"):
        parse_llama_bench(text, "evil.sql")
    assert not target.exists()


def test_not_llama_bench_output_names_what_it_expected(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"not llama-bench output.*'hello'"):
        parse_llama_bench("hello\n", str(tmp_path / "x.txt"))


@pytest.mark.parametrize("model_type, quant, active", [
    ("llama 7B mostly Q4_0", "Q4_0", None), ("qwen2 7B Q4_K - Medium", "Q4_K_M", None),
    ("llama 8B IQ4_XS - 4.25 bpw", "IQ4_XS", None), ("llama 7B Q5_K - Small", "Q5_K_S", None),
    ("qwen3moe 30B.A3B Q4_K - Medium", "Q4_K_M", 3e9), ("llama 8B BF16", "BF16", None),
])
def test_quant_and_active_parameters_from_model_type(
        model_type: str, quant: str, active: float | None) -> None:
    assert quant_of(model_type) == quant
    assert active_parameters_of(model_type) == active


def test_import_gives_ceiling_efficiency_verdict_and_samples(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    added, rows = import_llama_bench(db, [FIXTURES / "readme.json"])
    assert (added.runs, added.results, added.samples) == (1, 2, 10)
    tg = next(r for r in rows if r.record.test_name == "tg128")
    assert tg.hardware is not None and tg.hardware.name == "NVIDIA GeForce RTX 4080"
    assert tg.ceiling is not None and tg.efficiency is not None and tg.band is not None
    spec = tg.hardware.spec_bandwidth
    assert spec is not None
    assert tg.ceiling.decode_tokens_per_s == pytest.approx(spec.bytes_per_s / 4677120000)
    median = statistics.median(tg.record.get("samples_ts"))
    assert tg.efficiency == pytest.approx(median / tg.ceiling.decode_tokens_per_s)
    assert tg.verdict == ("pass" if tg.efficiency >= tg.band.low else "fail")
    with ResultStore.open(db) as store:
        samples = [r["engine_decode_tokens_per_s"] for r in store.db.query(
            "SELECT s.* FROM samples s JOIN results r ON r.id = s.result_id "
            "WHERE r.generate_tokens = 128 ORDER BY repetition")]
    assert samples == [119.03, 120.178, 119.43, 118.307, 117.464]
    again, _ = import_llama_bench(db, [FIXTURES / "readme.json"])
    assert (again.runs, again.results) == (0, 0)


def test_a_pp_row_is_a_prefill_series_with_nothing_invented(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # llama-bench measures no TTFT and no text: the import once stored 1/ts (tg) or
    # prompt/ts (pp) as TTFT and 0 characters; and showed a pp row the decode ceiling
    db = tmp_path / "r.db"
    assert main(["import-llama-bench", str(FIXTURES / "readme.json"), "--db", str(db),
                 "--json"]) == 0
    rows = {r["test_id"].split()[1]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["pp512"]["metric"] == "prefill" and rows["tg128"]["metric"] == "decode"
    assert rows["pp512"]["ceiling_tokens_per_s"] is None and rows["pp512"]["band"] is None
    assert rows["tg128"]["ceiling_tokens_per_s"] and rows["tg128"]["band"]
    with ResultStore.open(db) as store:
        for result_id, in store.tuples("SELECT id FROM results"):
            result = store.result(result_id).result
            assert result.ttft_s is None and result.chars_per_s is None
            assert all(s.ttft_s is None and s.text_chars is None and s.chars_per_s is None
                       for s in result.samples)


def _invent_as_before(db: Path) -> None:
    """What an importer before schema 9 stored: TTFT 1/ts (tg) or prompt/ts (pp) and 0
    characters, on the llama-bench rows; a llama-server row beside them is measured."""
    with ResultStore.open(db) as store:
        store.db.execute("UPDATE samples SET text_chars = 0, ttft_s = CASE WHEN"
                         " decode_tokens_per_s IS NOT NULL THEN 1 / decode_tokens_per_s"
                         " ELSE prompt_tokens / prefill_tokens_per_s END")
        store.db.execute("UPDATE results SET chars_per_s_median = 0.0, ttft_s_n = 5,"
                         " ttft_s_median = 0.008, ttft_s_mean = 0.008, ttft_s_min = 0.007")
        store.db.conn.commit()


def _invented(db: Path) -> list[object]:
    with ResultStore.open(db) as store:
        return [v for row in store.db.execute(
            "SELECT s.ttft_s, s.text_chars, r.ttft_s_median, r.ttft_s_n, r.chars_per_s_median"
            " FROM samples s JOIN results r ON r.id = s.result_id").fetchall()
            for v in row if v is not None]


def test_an_old_db_forgets_the_ttft_it_invented_for_llama_bench_rows(tmp_path: Path) -> None:
    from tests.support.storage_factory import make_result, record_kwargs

    db = tmp_path / "r.db"
    import_llama_bench(db, [FIXTURES / "readme.json"])
    _invent_as_before(db)
    assert _invented(db)  # the planted figures are there
    with ResultStore.open(db) as store:  # a measured row beside them, then back to schema 8
        store.record(store.tuples("SELECT run_id FROM runs")[0][0], "measured::t",
                     make_result(), **record_kwargs())
        store.db.execute("PRAGMA user_version = 8")
        store.db.conn.commit()
    with ResultStore.open(db) as store:  # migrates 8 -> 9
        left = store.tuples(
            "SELECT s.ttft_s, s.text_chars, r.ttft_s_median, r.ttft_s_n, r.chars_per_s_median"
            " FROM samples s JOIN results r ON r.id = s.result_id JOIN environments e"
            " ON e.id = r.environment_id WHERE e.engine_name = 'llama-bench'")
        measured = store.tuples("SELECT r.ttft_s_median, s.ttft_s FROM results r JOIN samples"
                                " s ON s.result_id = r.id JOIN environments e ON e.id ="
                                " r.environment_id WHERE e.engine_name != 'llama-bench'")
    assert len(left) == 10 and {v for row in left for v in row} == {None}
    assert measured and measured[0][0] == pytest.approx(make_result().ttft_s.median)
    assert all(ttft is not None for _, ttft in measured)  # measured rows keep their TTFT


def test_an_old_run_file_imports_without_the_invented_ttft(tmp_path: Path) -> None:
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    import_llama_bench(old, [FIXTURES / "readme.json"])
    _invent_as_before(old)
    assert main(["save-reference", "--db", str(old), "-d", str(tmp_path / "runs")]) == 0
    text = next((tmp_path / "runs").glob("*.jsonl")).read_text(encoding="utf-8")
    assert '"ttft_s_median": 0.008' in text  # the file carries the invented figures
    assert main(["import", "--db", str(new), str(tmp_path / "runs")]) == 0
    assert _invented(new) == []


def _fields_back(result: dict[str, Any], samples: Sequence[dict[str, Any]] = ()
                 ) -> dict[str, Any]:
    """The llama-bench record an exported result row (and its samples) came from."""
    settings = result["engine_settings"]
    if isinstance(settings, str):
        settings = json.loads(settings)
    fields: dict[str, Any] = {k.removeprefix(SETTING_PREFIX): json.loads(v)
                              for k, v in settings.items() if k.startswith(SETTING_PREFIX)}
    fields["n_prompt"], fields["n_gen"] = result["prompt_tokens"], result["generate_tokens"]
    fields["n_depth"] = result["depth_tokens"]
    figure = next(name for name in ("decode_tokens_per_s", "prefill_tokens_per_s",
                                    "aggregate_tokens_per_s")
                  if result.get(f"{name}_mean") is not None)
    fields["avg_ts"] = result[f"{figure}_mean"]
    fields["stddev_ts"] = result[f"{figure}_stdev"]
    column = {"decode_tokens_per_s": "engine_decode_tokens_per_s",
              "prefill_tokens_per_s": "engine_prefill_tokens_per_s"}.get(figure)
    if samples and column:
        fields["samples_ns"] = [round(s["round_wall_s"] * 1e9) for s in samples]
        fields["samples_ts"] = [s[column] for s in samples]
    return fields


@pytest.mark.parametrize("name", FULL_FORMS)
def test_round_trip_through_export_loses_no_field(tmp_path: Path, name: str) -> None:
    db, out = tmp_path / "r.db", tmp_path / "x.json"
    original = [r.fields for r in read_llama_bench(FIXTURES / name)]
    import_llama_bench(db, [FIXTURES / name])
    assert main(["export", "--db", str(db), "--format", "json", "-o", str(out)]) == 0
    exported = json.loads(out.read_text(encoding="utf-8"))
    no_samples = [{k: v for k, v in rec.items() if k not in ("samples_ns", "samples_ts")}
                  for rec in original]
    assert [_fields_back(row) for row in exported] == no_samples
    with ResultStore.open(db) as store:  # the text form (save-reference) keeps samples
        bundles = [b for run in read_runs(store) for b in run.results]
        back = [_fields_back({**b.result, **b.environment}, b.samples) for b in bundles]
    assert back == original


def test_md_round_trip_and_device_given_on_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, out = tmp_path / "r.db", tmp_path / "x.json"
    assert main(["import-llama-bench", str(FIXTURES / "readme.md"), "--db", str(db),
                 "--device", "RTX 4090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    tg = [r for r in data["rows"] if r["test_id"].startswith("llama-bench tg128 [")]
    assert tg and all(r["hardware"] == "NVIDIA GeForce RTX 4090" and r["efficiency"]
                      for r in tg)
    assert main(["export", "--db", str(db), "--format", "json", "-o", str(out)]) == 0
    exported = json.loads(out.read_text(encoding="utf-8"))
    original = [{**r.fields, "device": "RTX 4090"}
                for r in read_llama_bench(FIXTURES / "readme.md")]
    assert [_fields_back(row) for row in exported] == original


def test_history_and_compare_work_on_imported_builds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    newer = tmp_path / "newer.json"
    rows = json.loads((FIXTURES / "readme.json").read_text(encoding="utf-8"))
    for row in rows:
        row.update(build_commit="abcdef12", build_number=5200,
                   test_time=row["test_time"].replace("2025-04-24", "2025-05-01"),
                   samples_ts=[t * 0.8 for t in row["samples_ts"]], avg_ts=row["avg_ts"] * 0.8)
    newer.write_text(json.dumps(rows), encoding="utf-8")
    shutil.copy(FIXTURES / "readme.json", tmp_path / "older.json")
    _, imported = import_llama_bench(tmp_path / "keys.db", [tmp_path / "older.json"])
    assert main(["import-llama-bench", str(tmp_path / "older.json"), str(newer),
                 "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["history", "--db", str(db), "llama-bench tg128"]) == 0
    history = capsys.readouterr().out
    assert "b5163" in history and "b5200" in history
    assert main(["compare", "--db", str(db), "--baseline", "b5163", "--current", "b5200",
                 "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    tg = next(r for r in imported if r.record.test_name == "tg128")
    assert verdicts[tg.series_key]["verdict"] == "regression"
    assert verdicts[tg.series_key]["relative_change"] == pytest.approx(-0.2)


def test_md_log_gives_device_and_the_build_printed_above_the_table() -> None:
    text = (
        "ggml_vulkan: Found 1 Vulkan devices:\n"
        "ggml_vulkan: 0 = AMD Radeon RX 580 Series (RADV POLARIS10) (radv) | uma: 0 | fp16: 0\n"
        "build: e598697d (4696)\n\n"
        "| model                  |       size |     params | backend | ngl |  test |           t/s |\n"
        "| ---------------------- | ---------: | ---------: | ------- | --: | ----: | ------------: |\n"
        "| llama 3B Q4_K - Medium |   1.87 GiB |     3.21 B | Vulkan  |  99 | tg128 | 36.23 ± 17.62 |\n"
        "\n  Device 0: NVIDIA GeForce RTX 3060, compute capability 8.6, VMM: yes\n"
        "| model          |       size |     params | backend | ngl |  test |          t/s |\n"
        "| -------------- | ---------: | ---------: | ------- | --: | ----: | -----------: |\n"
        "| llama 8B Q5_K - Medium |   5.33 GiB |     8.03 B | CUDA  |  99 | tg512 | 53.01 ± 0.06 |\n"
        "\nbuild: 0000000 (9999)\n"
    )
    first, second = (r.fields for r in parse_llama_bench(text, "log.md"))
    assert first["gpu_info"] == "AMD Radeon RX 580 Series"
    assert (first["build_commit"], first["build_number"]) == ("e598697d", 4696)
    assert second["gpu_info"] == "NVIDIA GeForce RTX 3060"
    assert second["build_number"] == 9999  # the footer under the second table


@pytest.mark.parametrize("line, device", [
    ("ggml_metal_device_init: GPU name:   MTL0 (Apple M5 Max)", "Apple M5 Max"),
    ("ggml_metal_init: found device: Apple M2 Max", "Apple M2 Max"),
    ("  Device 0: AMD Radeon RX 7600 XT, gfx1102 (0x1102), VMM: no, Wave Size: 32",
     "AMD Radeon RX 7600 XT"),
])
def test_md_device_lines_of_each_backend(line: str, device: str) -> None:
    text = (f"{line}\n| model | size | params | backend | test | t/s |\n"
            "| --- | --- | --- | --- | --- | --- |\n"
            "| llama 7B Q4_0 | 3.83 GiB | 7.24 B | Metal | tg 128 | 26.59 ± 0.88 |\n")
    assert parse_llama_bench(text, "log.md")[0].get("gpu_info") == device


def test_public_dataset_rows_carry_source_and_build_and_stay_under_the_ceiling(
        tmp_path: Path) -> None:
    public = Path(__file__).resolve().parents[2] / "db" / "public"
    files = sorted(p for p in public.iterdir() if p.name != "README.md")
    records = [r for p in files for r in read_llama_bench(p)]
    assert records
    for record in records:
        assert str(record.get("source_url", "")).startswith("https://"), record.source
        assert record.get("build_number") or record.get("build_ref"), record.source
        assert record.get("device") or record.get("gpu_info"), record.source
    added, rows = import_llama_bench(tmp_path / "p.db", [public])
    assert added.results == len(records) == len(rows)
    judged = [r for r in rows if r.efficiency is not None]
    assert judged and all(r.efficiency <= 1.0 for r in judged)


def test_a_file_without_times_imported_from_another_path_adds_nothing(tmp_path: Path) -> None:
    """Rows without test_time are timed by their position in the file, not by its path."""
    rows = json.loads((FIXTURES / "readme.json").read_text(encoding="utf-8"))
    for row in rows:
        del row["test_time"]
    paths = [tmp_path / "a1" / "run.json", tmp_path / "b22" / "run.json"]
    for path in paths:
        path.parent.mkdir()
        path.write_text(json.dumps(rows), encoding="utf-8")
    db = tmp_path / "r.db"
    added, _ = import_llama_bench(db, [paths[0]])
    again, _ = import_llama_bench(db, [paths[1]])
    assert added.results == 2 and (again.runs, again.results) == (0, 0)


def test_an_old_record_names_its_backend_by_booleans(tmp_path: Path) -> None:
    """llama-bench of 2023 (b1275) printed cuda/metal/blas flags, not ``backends``."""
    from pytest_tokperf.expected.llama_bench_import import backends_of, device_of

    old = {"cuda": True, "metal": False, "gpu_blas": True, "blas": True, "n_gpu_layers": 99,
           "cpu_info": "13th Gen Intel(R) Core(TM) i9-13900K",
           "gpu_info": "NVIDIA GeForce RTX 3090 Ti"}
    assert backends_of(old) == ["CUDA", "BLAS"]
    assert device_of(old) == ("NVIDIA GeForce RTX 3090 Ti", True)
    assert device_of({**old, "cuda": False}) == ("13th Gen Intel(R) Core(TM) i9-13900K", False)
    assert backends_of({"backends": "Metal,BLAS", "cuda": True}) == ["Metal", "BLAS"]
    public = Path(__file__).resolve().parents[2] / "db" / "public"
    _, rows = import_llama_bench(tmp_path / "o.db",
                                 [public / "llama.cpp-llama-bench-readme-b1275.jsonl"])
    decode = next(r for r in rows if r.efficiency is not None)
    assert decode.hardware is not None and decode.hardware.kind == "gpu"
    assert decode.ceiling is not None
    # the median of its five repetitions (130.019 ... 132.293), as for a pytest run
    assert decode.efficiency == pytest.approx(131.295 / decode.ceiling.decode_tokens_per_s)
