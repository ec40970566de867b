"""The command line through click's CliRunner, on small models made on the fly."""

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specbench.cli.main import cli
from specbench.measure import bench
from specbench.model.checkpoints import hf_layout
from specbench.results.export import CSV_COLUMNS

from conftest import TARGET, assert_one_line_error, invoke

FAST = ["--repeats", 2, "--n-tokens", 12]


def test_run_shows_ar_against_sd_and_saves_results(env, tmp_path):
    result = invoke("run", *env, *FAST, "--K", 3, "--export-json", tmp_path / "out.json", "--export-csv", "-")
    assert result.exit_code == 0, result.output
    for text in (
        "autoregressive",
        "speculative K=3",
        "t_verify",
        "measured/refined",
        "round model",
        "identical",
        "saved",
    ):
        assert text in result.output
    row = json.loads((tmp_path / "out.json").read_text())[0]
    assert row["K"] == 3 and row["n_tokens"] == 12 and row["identical"] is True
    assert row["verdict"] == "lazy" and row["xla_loops"] == "xla default"  # the CPU's choices, recorded
    assert row["ar_token_ids"] == row["sd_token_ids"] and len(row["ar_token_ids"]) == 12
    assert len(row["ar_times_s"]) == len(row["sd_times_s"]) == 2
    assert len(row["accepted_hist"]) == 4 and sum(row["accepted_hist"]) == row["n_rounds"]
    assert row["speedup"] == pytest.approx(
        sum(a / s for a, s in zip(row["ar_times_s"], row["sd_times_s"])) / 2
    )
    for key in (
        "specbench_version",
        "jax_version",
        "device",
        "timestamp",
        "prompt_sha",
        "t_draft_s",
        "alpha",
    ):
        assert row[key] not in (None, "")
    assert row["t_overhead_s"] == pytest.approx(row["t_round_s"] - 3 * row["t_draft_s"] - row["t_verify_s"])
    assert row["round_model_speedup"] == pytest.approx(
        row["tokens_per_round"] * row["t_ar_token_s"] / row["t_round_s"]
    )
    saved = list((tmp_path / "results").glob("run-*.json"))
    assert len(saved) == 1
    # the CSV went to stdout: it parses and has the documented columns
    csv_text = result.output[result.output.index(",".join(CSV_COLUMNS[:3])) :]
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert list(rows[0].keys()) == CSV_COLUMNS and rows[0]["K"] == "3"


def test_run_markdown_export_and_sampling_flags(env, tmp_path):
    md = tmp_path / "out.md"
    # top-p is left out here: a sort over 50,257 logits per step is slow on a CPU (tested in test_decoding)
    result = invoke(
        "run",
        *env,
        *FAST,
        "--temperature",
        0.8,
        "--top-k",
        50,
        "--no-save",
        "--host-loop",
        "--export-markdown",
        md,
    )
    assert result.exit_code == 0, result.output
    lines = md.read_text().splitlines()
    assert lines[0].startswith("| implementation") and "speedup" in lines[0] and len(lines) == 3
    assert "0.8" in lines[2]
    row = {
        k.strip(): v.strip() for k, v in zip(lines[0].strip("|").split("|"), lines[2].strip("|").split("|"))
    }
    assert row["temperature"] == "0.8" and row["K"] == "4"
    assert "identical" not in result.output
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").glob("*.json"))


def test_trace_colours_each_round(env):
    result = invoke("trace", *env, "--n-tokens", 20, "--K", 4)
    assert result.exit_code == 0, result.output
    assert "legend" in result.output and "rounds" in result.output and "α" in result.output
    assert "tokens/round" in result.output
    assert "rounds accepting 0..4 drafts [" in result.output  # a histogram of rounds, named as one


def test_theory_seed_points():
    for r, expected in ((0.8, "2.65"), (0.62, "2.05")):
        result = invoke("theory", "--K", 4, "--t-draft", 1.8, "--t-target", 14.1, "--r", r)
        assert result.exit_code == 0, result.output
        assert f"speedup = {expected}" in result.output


def test_theory_range_marks_the_best_K():
    result = invoke("theory", "--K", "1-8", "--t-draft", 1, "--t-target", 10, "--alpha", 0.8)
    assert result.exit_code == 0, result.output
    best_lines = [line for line in result.output.splitlines() if "best" in line]
    # by hand, (1 - 0.8^(K+1)) / (0.2 (0.1 K + 1)): K=4 2.401, K=5 2.459, K=6 2.470, K=7 2.448
    assert len(best_lines) == 1 and best_lines[0].split()[1] == "6" and "2.47" in best_lines[0]


def test_models_list_and_prompts(env):
    result = invoke("models", "list")
    assert result.exit_code == 0
    for name in ("124M", "gpt2-xl", "1558M", "random-target"):
        assert name in result.output
    assert "124.4M" in result.output
    result = invoke("prompts")
    assert result.exit_code == 0 and "seed-turing" in result.output and "dialogue-1" in result.output
    assert "repetition" in result.output and "refrain-1" in result.output


def test_sweep_writes_every_row_and_resume_completes_the_grid(env, tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    # one K and prompts of one length bucket: every row runs the same compiled programs
    args = [
        "sweep",
        *env,
        "--K",
        2,
        "--temperature",
        "0",
        "--prompts",
        "fairy-1,narrative-2,description-2",
        "--repeats",
        1,
        "--n-tokens",
        6,
        "--output",
        out,
    ]
    real = bench.run_benchmark
    calls = []

    def dies_on_the_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(bench, "run_benchmark", dies_on_the_third)
    result = invoke(*args)
    assert result.exit_code == 130
    assert len(json.loads(out.read_text())) == 2  # the two finished rows survived
    monkeypatch.setattr(bench, "run_benchmark", real)
    result = invoke(*args, "--resume", "--export-csv", tmp_path / "sweep.csv")
    assert result.exit_code == 0, result.output
    assert "2 already in" in result.output
    rows = json.loads(out.read_text())
    keys = [(r["K"], r["temperature"], r["prompt_id"]) for r in rows]
    assert sorted(keys) == sorted((2, 0.0, p) for p in ("fairy-1", "narrative-2", "description-2"))
    assert len(list(csv.DictReader((tmp_path / "sweep.csv").open()))) == 3
    result = invoke(*args, "--resume")  # nothing left to do
    assert result.exit_code == 0 and "0 to run" in result.output and len(json.loads(out.read_text())) == 3


RECORDED = Path(__file__).resolve().parent.parent / "results" / "recorded"


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("cpu-sweep-*.json")))
def test_plot_draws_every_recorded_sweep(name, tmp_path):
    # sweeps over K, drafters, prompts and batch sizes, rows of older versions, and rows whose
    # alpha is undefined (dynamic K that never drafted)
    pytest.importorskip("matplotlib")
    result = invoke("plot", RECORDED / name, "--output", tmp_path / "s.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["run", "--K", 0], ["--K", "range"]),
        (["run", "--K", -3], ["--K"]),
        (["run", "--temperature", -0.5], ["--temperature", "range"]),
        (["run", "--top-p", 1.5], ["--top-p", "range"]),
        (["run", "--top-p", 0], ["--top-p"]),
        (["run", "--draft", "no-such-model"], ["--draft", "unknown model 'no-such-model'"]),
        (["run", "--target", "gpt2-large"], ["--target", "not downloaded"]),
        (["run", "--n-tokens", 5000], ["--n-tokens", "exceeds the context"]),
        (["sweep", "--K", "1,x,4"], ["--K", "comma list"]),
        (["sweep", "--prompts", "no-such-prompt"], ["--prompts", "unknown prompt"]),
        (["sweep", "--temperature", "0,-1"], ["--temperature", ">= 0"]),
        (["run", "--prompt-id", "no-such-prompt"], ["--prompt-id", "not a prompt id"]),
        (["run", "--prompt-id", "all"], ["--prompt-id", "sweep --prompts all"]),
        (["sweep", "-o", "out.csv"], ["--output", "*.json"]),
        (["run", "--export-csv", "out.json"], ["--export-csv", "*.csv"]),
        (["run", "--export-markdown", "out.txt"], ["--export-markdown", "*.md"]),
        (["roofline", "--context", 100000], ["--context", "exceeds", "use at most"]),
        (["run", "--drafter", "oracle"], ["--drafter", "not a drafter", "lookup"]),
        (["sweep", "--drafter", "model,oracle"], ["--drafter", "not a drafter"]),
        (["run", "--drafter", "layerskip", "--draft-layers", 0], ["--draft-layers", ">= 1"]),
        (["run", "--drafter", "layerskip", "--draft-layers", 2], ["--draft-layers", "1..1"]),
        (["run", "--drafter", "lookup", "--ngram", 0], ["--ngram", ">= 1"]),
        (["run", "--dynamic-K", "--draft-confidence", 1.5], ["--draft-confidence", "(0, 1)"]),
        (["run", "--dynamic-K", "--draft-confidence", 0], ["--draft-confidence", "(0, 1)"]),
        (["trace", "--drafter", "lookup", "--dynamic-K"], ["--dynamic-K", "not lookup"]),
        (["run", "--prompt", ""], ["--prompt", "at least one token"]),
        (["sweep", "--K", "8-2"], ["--K"]),
        (["run", "--export-csv", "/nonexistent-dir/out.csv"], ["--export-csv", "does not exist"]),
        (["theory", "--K", 4, "--t-draft", 1, "--t-target", 10], ["--r/--alpha"]),
        (["roofline", "--dtype", "float32,float16"], ["--dtype", "float32, bfloat16, int8"]),
        (["theory", "--K", 4, "--t-draft", 1, "--t-target", 10, "--r", 0.1], ["--r", "1/(K+1)"]),
        (["run", "--batch", 0], ["--batch", "range"]),
        (["run", "--batch", -2], ["--batch"]),
        (["sweep", "--batch", "1,0"], ["--batch", "integers >= 1"]),
        (["run", "--batch", 2, "--host-loop"], ["--host-loop", "device loop only"]),
        (["run", "--batch", 10**9], ["--batch", "GiB", "use at most --batch"]),
        (["sweep", "--batch", f"1,{10**9}"], ["--batch", "GiB", "use at most --batch"]),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(env, args, fragments):
    if args[0] in ("run", "sweep", "trace") and "--draft" not in args and "--target" not in args:
        uses_draft = "lookup" not in args and "layerskip" not in args
        args = args[:1] + (env if uses_draft else env[2:]) + args[1:]
    assert_one_line_error(invoke(*args), *fragments)


def test_vocab_mismatch_is_refused(env, model_dirs):
    result = invoke("run", "--draft", model_dirs / "small-vocab", "--target", model_dirs / "t")
    assert_one_line_error(result, "--draft/--target", "share the vocabulary")


def test_unwritable_export_path(env, tmp_path):
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    # a read-only folder stops a normal user; /proc stops root too
    target = locked / "x.json" if not os.access(locked, os.W_OK) else "/proc/specbench-test.json"
    try:
        assert_one_line_error(invoke("run", *env, "--export-json", target), "--export-json", "not writable")
    finally:
        locked.chmod(0o700)


def test_export_path_that_is_a_directory(env, tmp_path):
    assert_one_line_error(invoke("run", *env, "--export-json", tmp_path), "--export-json", "is a directory")


def test_corrupt_results_file_for_resume(env, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"K": 1}, {"trunc')
    result = invoke("sweep", *env, "--output", bad, "--resume")
    assert_one_line_error(result, "--resume", "not a specbench JSON results file")
    assert bad.read_text() == '[{"K": 1}, {"trunc'  # nothing already written is lost


def test_roofline_times_steps_of_1_to_K_plus_1(env, model_dirs, tmp_path):
    out = tmp_path / "roof.json"
    result = invoke(
        "roofline", "-m", model_dirs / "t", "--K", 2, "--iters", 2, "--context", 32, "--export-json", out
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [r["n_tokens_per_step"] for r in rows] == [1, 2, 3]
    assert rows[0]["t_over_t1"] == 1.0 and all(r["t_step_s"] > 0 for r in rows)
    assert rows[0]["plain_over_loop"] == pytest.approx(rows[0]["t_plain_step_s"] / rows[0]["t_step_s"])
    # bytes per step: every weight once, plus the K/V cache (2 x n_layer x context x n_embd floats)
    n_weights = sum(
        x.size for x in __import__("jax").tree_util.tree_leaves(hf_layout.load_dir(model_dirs / "t")[1])
    )
    assert rows[0]["bytes_per_step"] == 4 * (n_weights + 2 * TARGET.n_layer * 32 * TARGET.n_embd)
    assert rows[0]["achieved_gbps"] == pytest.approx(rows[0]["bytes_per_step"] / rows[0]["t_step_s"] / 1e9)
    # the bound every row was compared with: on the CPU, the measured read bandwidth
    r = rows[0]
    assert r["bound_source"] == "measured" and r["bound_gbps"] == r["measured_gbps"] > 0
    assert r["bound_s"] == pytest.approx(r["bytes_per_step"] / (r["bound_gbps"] * 1e9))
    assert r["fraction_of_bound"] == pytest.approx(r["bound_s"] / r["t_step_s"])
    assert_one_line_error(invoke("roofline", "-m", model_dirs / "t", "--random-init"), "--random-init")


# --- issue 10: a new user's trial ----------------------------------------------------------------


def test_run_refuses_an_unwritable_results_folder_before_any_work(env, monkeypatch):
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", "/proc")  # not writable, even for root
    called = []
    monkeypatch.setattr(bench, "run_benchmark", lambda *a, **k: called.append(1))
    assert_one_line_error(invoke("run", *env), "--save", "not writable", "--no-save")
    assert not called


def test_no_folder_is_made_that_the_user_did_not_name(env, tmp_path, monkeypatch):
    from specbench.cli.commands import plan

    monkeypatch.delenv("SPECBENCH_RESULTS_DIR")
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "nonexistent" / "weights"))
    before = set(Path("/").iterdir())
    folder = plan.results_dir()
    assert folder.is_dir() and folder.name == "results" and (folder.parent / "pyproject.toml").exists()
    assert set(Path("/").iterdir()) == before and not (tmp_path / "nonexistent").exists()
    # a weights folder the user named must exist: one line, and still no folder made
    assert_one_line_error(invoke("models", "list"), "SPECBENCH_WEIGHTS_DIR", "does not exist")
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("content, fragment", [("[]", "no rows"), ('[{"K": 4}]', "has no temperature")])
def test_plot_of_rows_it_cannot_draw_is_one_line(env, tmp_path, content, fragment):
    pytest.importorskip("matplotlib")
    f = tmp_path / "rows.json"
    f.write_text(content)
    assert_one_line_error(invoke("plot", f), "FILE", fragment)
    assert not (tmp_path / "rows.png").exists()


def test_invalid_config_json_is_named(env, model_dirs, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(model_dirs / "t", broken)
    (broken / "config.json").write_text("{not json")
    assert_one_line_error(
        invoke("run", "--draft", model_dirs / "d", "--target", broken), "config.json", "is not JSON"
    )


def test_sweep_prints_stdout_exports_once_and_plurals(env, tmp_path):
    out = tmp_path / "s.json"
    result = invoke(
        "sweep", *env, "--K", "1,2", "--repeats", 1, "--n-tokens", 5, "-o", out, "--export-csv", "-"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("specbench_version,") == 1  # the CSV header, once, after the last row
    assert len(list(csv.DictReader(io.StringIO(result.stdout)))) == 2
    assert "2 configurations" in result.output and "2 rows" in result.output and "no spread" in result.output
    result = invoke("sweep", *env, "--K", "3", "--repeats", 1, "--n-tokens", 5, "-o", tmp_path / "t.json")
    assert "1 configuration," in result.output and "1 row " in result.output
    assert "1 configurations" not in result.output and "1 rows" not in result.output
    row = json.loads(out.read_text())[0]
    assert row["measured_over_refined"] == pytest.approx(row["speedup"] / row["refined_speedup"])
    assert row["measured_over_theory"] == pytest.approx(row["speedup"] / row["theory_speedup"])


def test_sweep_table_cells_have_fixed_decimals():
    from specbench.results.schema import cell as fmt_fixed

    assert [
        fmt_fixed("speedup", 1.0),
        fmt_fixed("speedup", 1.23456),
        fmt_fixed("alpha", 0.5),
        fmt_fixed("ar_tokens_per_s", 311.56),
        fmt_fixed("temperature", 0.7),
        fmt_fixed("K", 4),
        fmt_fixed("identical", True),
        fmt_fixed("top_p", None),
    ] == ["1.00", "1.23", "0.500", "311.6", "0.7", "4", "True", ""]


def test_resume_refuses_rows_of_other_settings(env, tmp_path):
    out = tmp_path / "s.json"
    base = ["sweep", *env, "--K", "1", "--repeats", 1, "-o", out]
    assert invoke(*base, "--n-tokens", 5).exit_code == 0
    before = out.read_text()
    result = invoke(*base, "--n-tokens", 6, "--repeats", 2, "--resume")
    assert_one_line_error(result, "--resume", "n_tokens 5 there, 6 now", "repeats")
    assert out.read_text() == before


def test_one_repeat_prints_no_spread(env):
    result = invoke("run", *env, "--repeats", 1, "-n", 5, "--no-save")
    assert result.exit_code == 0, result.output
    assert "± 0.00" not in result.output and "no spread" in result.output and "1 repeat " in result.output


def test_overhead_carries_its_uncertainty():
    from specbench.cli.views.render import fmt_overhead

    text = fmt_overhead({"t_overhead_s": -0.0061, "t_overhead_err_s": 0.007})
    assert text == "-6.10 ± 7.00 ms"


def test_theory_says_when_the_optimum_is_the_search_limit():
    result = invoke("theory", "--K", 4, "--t-draft", 1, "--t-target", 10, "--alpha", 1)
    assert result.exit_code == 0, result.output
    assert "no optimal K" in result.output and "still grows" in result.output
    assert not any(line.startswith("optimal K") for line in result.output.splitlines())
    result = invoke("theory", "--K", "1-4", "--t-draft", 1, "--t-target", 10, "--alpha", 0.99)
    assert "best so far" in result.output and "try larger K" in result.output


def test_progress_is_printed_as_plain_lines_when_not_a_terminal(env):
    result = invoke("run", *env, "--repeats", 1, "-n", 5, "--no-save")
    assert result.exit_code == 0
    assert "[progress]" in result.stderr and "\x1b" not in result.stderr


def test_plain_progress_lines_say_what_how_far_and_eta():
    from specbench.cli.views.progress import progress

    buf = io.StringIO()
    with progress("train", 10, unit="step", interval=0, stream=buf) as bar:
        bar.update(1)  # the first unit (a compile) is left out of the ETA
        bar.update(5, info="loss 3.2")
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("[progress] train: step 0/10 (0%)")  # a line at once, before the first unit
    assert lines[2].startswith("[progress] train: step 5/10 (50%) · loss 3.2 · elapsed") and "ETA" in lines[2]
    assert "ETA" not in lines[1] and len(lines) == 3  # the last line is not printed again at the end


def _cli_subprocess(*args, **kw):
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "specbench", *map(str, args)], env=env, text=True, **kw)


def test_ctrl_c_during_the_first_row_exits_130(env, tmp_path):
    import signal
    import subprocess

    out = tmp_path / "s.json"
    proc = _cli_subprocess(
        "sweep",
        *env,
        "--K",
        "1,2,3",
        "--repeats",
        1,
        "-n",
        5,
        "-o",
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # the sweep's first line comes just before the first row compiles: a signal then arrives
    # during that row on any host, fast or slow (a fixed sleep let a fast host finish first)
    line = proc.stdout.readline()
    while line and not line.startswith("sweep:"):
        line = proc.stdout.readline()
    assert line, "the sweep ended before it began measuring"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr and "Segmentation" not in stderr
    if out.exists():  # whatever finished is whole
        json.loads(out.read_text())
    else:  # and no file is named that does not exist
        assert "nothing was written" in stderr and str(out) not in stderr


def test_sigterm_ends_like_ctrl_c_with_143_and_the_resume_hint(env, tmp_path):
    import signal
    import subprocess
    import time

    out = tmp_path / "s.json"
    proc = _cli_subprocess(
        "sweep",
        *env,
        "--K",
        "1,2",
        "--repeats",
        1,
        "-n",
        5,
        "-o",
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 90
    while not out.exists() and time.monotonic() < deadline:  # until the first row is kept
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode in (143, 0), stderr  # 0: the sweep ended before the signal came
    if proc.returncode == 143:
        assert f"--resume --output {out}" in stderr and "Traceback" not in stderr


def test_a_closed_pipe_ends_quietly(env):
    import os
    import subprocess

    proc = _cli_subprocess(
        "run", *env, "--repeats", 1, "-n", 5, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    stderr = proc.stderr.read()
    proc.wait(timeout=120)
    assert first.startswith("draft") and proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "Error" not in stderr
    assert len(list((Path(os.environ["SPECBENCH_RESULTS_DIR"])).glob("run-*.json"))) == 1  # the row was kept


def test_draft_with_a_drafter_that_needs_none_is_refused(env):
    assert_one_line_error(invoke("run", *env, "--drafter", "lookup"), "--draft", "only the model drafter")


def test_sweep_compares_drafters_and_every_row_names_its_drafter(env, tmp_path):
    out, md = tmp_path / "d.json", tmp_path / "d.md"
    result = invoke(
        "sweep",
        "--target",
        env[3],
        "--drafter",
        "lookup,layerskip",
        "--K",
        3,
        "--repeats",
        1,
        "-n",
        8,
        "--prompts",
        "list-1",
        "-o",
        out,
        "--export-markdown",
        md,
        "--dynamic-K",
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [r["drafter"] for r in rows] == ["lookup", "layerskip"]
    assert rows[0]["ngram"] == 3 and rows[0]["draft"] == "lookup(n=3)" and rows[0]["dynamic_K"] is False
    assert rows[1]["draft_layers"] == 1 and rows[1]["draft"] == "t[:1]" and rows[1]["dynamic_K"] is True
    assert all(r["identical"] for r in rows) and all(sum(r["drafted_hist"]) == r["n_rounds"] for r in rows)
    assert "lookup" in md.read_text() and "layerskip" in md.read_text()
    result = invoke("trace", "--target", env[3], "--drafter", "lookup", "--prompt-id", "list-1", "-n", 10)
    assert result.exit_code == 0 and "draft lookup(n=3)" in result.output


def test_run_batch_decodes_the_built_in_prompts_together(env, tmp_path):
    out = tmp_path / "b.json"
    result = invoke("run", *env, "--batch", 3, "--repeats", 1, "-n", 8, "--K", 2, "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "batch of 3" in result.output and "idle slots" in result.output and "all 3 pairs" in result.output
    row = json.loads(out.read_text())[0]
    assert row["batch"] == 3 and row["prompt_id"] == "all" and row["batch_prompts"] == 3
    assert row["batch_prompt_ids"] == ["narrative-1", "dialogue-1", "fairy-1"]  # categories mixed
    per_seq = row["accepted_hist_per_seq"]  # each request's own histogram, summing to the batch's
    assert len(per_seq) == 3 and [sum(h) for h in zip(*per_seq)] == row["accepted_hist"]
    assert len(row["sd_token_ids"]) == 3 and all(len(ids) == 8 for ids in row["sd_token_ids"])
    assert row["identical"] is True and len(row["prompt"]) == 3 and len(row["sd_text"]) == 3
    assert row["sd_tokens_per_s"] == pytest.approx(3 * 8 / row["sd_mean_s"])
    assert row["refined_speedup"] == pytest.approx(
        row["tokens_per_batch_round"] * row["t_target_s"] / (2 * row["t_draft_s"] + row["t_verify_s"])
    )
    # a chosen prompt is repeated instead (the same shapes: the compiled programs are reused)
    result = invoke(
        "run",
        *env,
        "--batch",
        3,
        "--repeats",
        1,
        "-n",
        8,
        "--K",
        2,
        "--prompt-id",
        "fairy-1",
        "--export-json",
        out,
    )
    row = json.loads(out.read_text())[0]
    assert row["batch_prompt_ids"] == ["fairy-1"] * 3 and row["sd_token_ids"][0] == row["sd_token_ids"][2]
    assert row["batch_prompts"] == 1


def test_sweep_over_batch_sizes_reports_the_crossover_and_plots_it(env, tmp_path):
    out = tmp_path / "b.json"
    result = invoke("sweep", *env, "--batch", "1,2", "--K", 2, "--repeats", 1, "-n", 6, "-o", out)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())  # distinct prompts by default: the built-in suite, cycled
    assert [r["batch"] for r in rows] == [1, 2] and all(r["prompt_id"] == "all" for r in rows)
    assert rows[1]["batch_prompt_ids"] == ["narrative-1", "dialogue-1"] and rows[1]["batch_prompts"] == 2
    assert 0 <= rows[1]["idle_fraction"] < 1 and 0 <= rows[1]["repetition"] <= 1
    assert (
        "the measured speedup" in result.output and "the refined theory from the step times" in result.output
    )
    assert "idle" in result.output and "tok/batch-round" in result.output
    pytest.importorskip("matplotlib")
    assert invoke("plot", out, "-o", tmp_path / "b.png").exit_code == 0
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_a_row_is_made_of_fields_alone():
    from specbench.results.schema import FIELDS, as_row

    names = [f.name for f in FIELDS]
    row = as_row({names[3]: 1, names[0]: "x"})
    assert list(row) == [names[0], names[3]]  # in FIELDS' order, fields without a value left out
    with pytest.raises(ValueError, match="not_a_field"):
        as_row({names[0]: "x", "not_a_field": 2})


def test_run_with_a_tree_decodes_the_greedy_tokens_and_records_the_tree(env, tmp_path):
    out = tmp_path / "t.json"
    result = invoke("run", *env, "--tree", "2,2,1", "--repeats", 1, "-n", 10, "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "a tree of 11 nodes" in result.output and "t_verify(11)" in result.output
    row = json.loads(out.read_text())[0]
    assert row["K"] == 3 and row["tree_nodes"] == 11 and row["identical"] is True
    assert row["draft"].endswith("tree 2,2,1") and len(row["accepted_hist"]) == 4


def test_traversal_and_gbv_run_where_they_apply_and_are_refused_elsewhere(env, tmp_path):
    out = tmp_path / "v.json"
    for method, extra in (("traversal", ["--tree", "2,1"]), ("gbv", ["--drafts", "2", "--K", "2"])):
        result = invoke(
            "run", *env, *extra, "--verify", method, "-t", "1", "--repeats", 1, "-n", 8, "--export-json", out
        )
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text())[0]["verify"] == method
        out.unlink()
    for extra, words in (
        (["--verify", "traversal"], "traversal judges a token tree (--tree), not one draft sequence"),
        (["--verify", "gbv"], "gbv judges k drafts (--drafts 2 or more), not one draft sequence"),
        (["--verify", "block", "--tree", "2,1"], "block judges one draft sequence, not a token tree"),
        (["--verify", "gbv", "--drafts", "2", "--dynamic-K"], "--dynamic-K"),
    ):
        assert_one_line_error(invoke("run", *env, *extra, "--no-save"), words)
    result = invoke("sweep", *env, "--verify", "token,gbv", "--drafts", "1,2", "--dry-run")
    assert_one_line_error(result, "--verify", "gbv judges k drafts", "not one draft sequence")


def test_sweep_takes_a_tree_for_the_drafters_that_grow_one(env, tmp_path):
    result = invoke(
        "sweep",
        *env,
        "--drafter",
        "model,layerskip",
        "--tree",
        "2,1",
        "--prompts",
        "seed-turing",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output
    assert "tree 2,1 K=2" in result.output and "2 configurations" in result.output
    result = invoke("sweep", *env, "--drafter", "model,lookup", "--tree", "2,1", "--dry-run")
    assert_one_line_error(result, "--tree", "the lookup drafter proposes no trees")
    result = invoke("sweep", *env, "--tree", "dynamic:3,2,5", "--verify", "traversal", "--dry-run")
    assert_one_line_error(result, "--verify", "traversal judges a fixed tree")
    result = invoke("run", *env, "--tree", "dynamic:2,2,9", "--no-save")
    assert_one_line_error(result, "--tree", "9 nodes are more than the 6 candidates it grows")


@pytest.mark.parametrize(
    "command, export",
    [
        (["run", "--K", 1, "--repeats", 1, "-n", 5], "--export-json"),
        (["sweep", "--K", 1, "--repeats", 1, "-n", 5], "--export-json"),
        (["roofline", "--K", 1, "--iters", 2, "--context", 16], "--export-json"),
        (["roofline", "--K", 1, "--iters", 2, "--context", 16], "--export-csv"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_an_export_to_standard_output_is_one_document_a_reader_parses(env, command, export):
    # roofline measures both of the test's models (a document each, once); the others decode with them
    models = ["--model", env[1], "--model", env[3]] if command[0] == "roofline" else env
    result = CliRunner().invoke(cli, [str(a) for a in [*command, *models, export, "-"]])
    assert result.exit_code == 0, result.output
    if export == "--export-json":
        rows = json.loads(result.stdout)
    else:
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        assert not any(r[k] == k for r in rows for k in r)  # one header, not one per network
    assert len(rows) >= 1 and all(isinstance(r, dict) for r in rows)
