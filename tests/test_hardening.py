"""Bad input, table-driven and fuzzed: one line naming the flag, exit code 2, nothing written.

The table holds one sample of every class of fault a new user's trial found; the fuzz test
draws flag combinations and values from each option's domain and beyond it, through --dry-run.
"""

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.cli.main import cli
from specbench.model.checkpoints import tokenizer
from specbench.results import export

from conftest import assert_one_line_error, invoke

BUNDLED = Path(__file__).resolve().parent.parent / "gpt2_weights"
ROWS = Path(__file__).resolve().parent.parent / "results" / "recorded" / "cpu-sweep-bundled-prompts.json"
DATA = Path(__file__).resolve().parent / "data"  # prompt files with a BOM, CRLF line ends, NULs; a JSON list

# (command line, the flag the one-line error must name, a fragment of what it says)
CASES = [
    # values checked at the boundary
    (["run", "-t", "nan"], "--temperature", "finite"),
    (["run", "-t", "inf"], "--temperature", "finite"),
    (["run", "-t", "1e-40"], "--temperature", "overflow"),
    (["trace", "--top-p", "nan"], "--top-p", "finite"),
    (["run", "--seed", str(2**63)], "--seed", "range"),
    (["theory", "--K", "4", "--t-draft", "nan", "--t-target", "1", "--alpha", "0.5"], "--t-draft", "finite"),
    (["theory", "--K", "4", "--t-draft", "1", "--t-target", "inf", "--r", "0.5"], "--t-target", "finite"),
    (["run", "--prompt", "caf\udce9"], "--prompt", "UTF-8"),
    (["run", "-n", "1"], "--n-tokens", "range"),
    # unbounded work
    (
        ["theory", "--K", "1-100000000", "--t-draft", "1", "--t-target", "9", "--alpha", "0.5"],
        "--K",
        "at most",
    ),
    (["sweep", "--K", "1-100000000"], "--K", "at most"),
    (["sweep", "--batch", "1-1000000"], "--batch", "a range must be at most 4096"),
    # token trees
    (["run", "--tree", "2,0"], "--tree", "at least one child"),
    (["run", "--tree", "8,8"], "--tree", "more than 64 nodes"),
    (["run", "--tree", "2,x"], "--tree", "comma list"),
    (["run", "--tree", "2,2", "--drafter", "lookup"], "--tree", "proposes no trees"),
    (["run", "--tree", "2,2", "--K", "5"], "--K", "depth 2"),
    (["run", "--tree", "2,2", "--drafts", "2"], "--drafts", "own rule"),
    (["run", "--tree", "2,2", "--batch", "2"], "--tree", "one sequence"),
    (["run", "--drafter", "lookup", "--ngram", "200"], "--ngram", "<= 16"),
    (["sweep", "--tree", "2,2,1", "--drafts", "1,2"], "--drafts", "own rule"),
    (["run", "--drafter", "eagle", "--eagle-head", "/nonexistent"], "--eagle-head", "does not exist"),
    (["run", "--tree", "2,2,1", "--prompt", "the " * 120], "--tree", "use a smaller tree"),
    # the flag at fault, with a limit that can be met
    (["run", "--K", "120"], "--K", "K can be at most"),
    (["run", "--prompt", "the " * 200], "--prompt", "at most"),
    (["run", "-n", "500"], "--n-tokens", "at most"),
    # flags that would change nothing, or conflict
    (["run", "--top-k", "5"], "--top-k", "temperature 0"),
    (["sweep", "--top-p", "0.9", "-t", "0"], "--top-p", "temperature 0"),
    (["run", "--prompt", "hi", "--prompt-id", "fairy-1"], "--prompt/--prompt-id", "one of them"),
    (["run", "--draft-layers", "1"], "--draft-layers", "layerskip"),
    (["run", "--ngram", "2"], "--ngram", "lookup"),
    (["run", "--draft-confidence", "0.5"], "--draft-confidence", "--dynamic-K"),
    (["run", "--drafter", "lookup", "--draft-vocab", "100"], "--draft-vocab", "network drafter"),
    (["run", "--draft-vocab", "0"], "--draft-vocab", "1..32768"),
    (["run", "--draft-vocab", "most"], "--draft-vocab", "not auto, full or a number"),
    (["run", "--export-csv", "-", "--export-json", "-"], "--export-*", "standard output"),
    (["sweep", "--K", "2,2"], "--K", "listed twice"),
    (["sweep", "--drafter", "model,model"], "--drafter", "listed twice"),
    (["sweep", "-t", "0,0.5,0.5"], "--temperature", "listed twice"),
    (["sweep", "--prompts", "fairy-1,fairy-1"], "--prompts", "listed twice"),
    (
        ["theory", "--K", "1-4", "--t-draft", "1", "--t-target", "9", "--alpha", "0.5", "--t-verify", "12"],
        "--t-verify",
        "one K",
    ),
    # every count has a bound that can be met, and a number that is not one is said so
    (["roofline", "--iters", "1000000000000"], "--iters", "range"),
    (["roofline", "--iters", "1e12"], "--iters", "not a whole number"),
    (["run", "--warmup", "1000000000"], "--warmup", "range"),
    (["run", "--repeats", "100000"], "--repeats", "range"),
    (["run", "--K", "2,2"], "--K", "2 is listed twice"),
    (
        ["run", "--prompt", "the " * 600],
        "--prompt",
        "with n-tokens 40 and K 4, a context of 128 allows at most 84",
    ),
    (["report", "-o", "a/missing/deep/rep"], "--output", "a/missing/deep does not exist"),
    (["roofline", "--kernels", "fast"], "--kernels", "'fast'"),
    # click's own checks in the same form
    (["run", "--K", "0"], "--K", "range"),
    (["run", "--bogus"], "--bogus", "no such option"),
    (["theory", "--K", "4"], "--t-draft", "required"),
]


@pytest.mark.parametrize("args, flag, fragment", CASES, ids=[" ".join(c[0])[:40] for c in CASES])
def test_bad_input_names_its_flag(env, tmp_path, args, flag, fragment):
    if args[0] in ("run", "sweep") and not any(a in args for a in ("--draft", "--drafter")):
        args = args[:1] + env + args[1:]
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(*args, *(["--dry-run"] if args[0] in ("run", "sweep") else []))
    assert_one_line_error(result, f"error: {flag}: ", fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_an_existing_sweep_file_is_never_replaced_unasked(env, tmp_path):
    out = tmp_path / "s.json"
    out.write_text(ROWS.read_text())
    before = out.read_bytes()
    assert_one_line_error(invoke("sweep", *env, "-o", out, "--K", 1), "--output", "--resume", "--force")
    assert_one_line_error(invoke("sweep", *env, "-o", out, "--resume", "--force"), "--force")
    assert invoke("sweep", *env, "-o", out, "--K", 1, "--force", "--dry-run").exit_code == 0
    assert out.read_bytes() == before


def test_resume_refuses_a_file_of_another_draft(env, tmp_path):
    out = tmp_path / "s.json"
    rows = json.loads(ROWS.read_text())[:2]  # rows of the bundled pair, not of the test models
    out.write_text(json.dumps(rows))
    r = rows[0]  # the same target and settings as the file's rows, another draft
    args = ["sweep", "--draft", env[1], "--target", "tiny-target", "-o", out, "--resume", "--K", r["K"]]
    args += ["--kernels", "xla"]  # as the file's rows were measured (before the CPU kernel)
    args += ["-n", r["n_tokens"], "--repeats", r["repeats"], "--prompts", r["prompt_id"], "--dry-run"]
    assert_one_line_error(invoke(*args), "--resume", "another sweep", "draft tiny-draft there")


def test_weights_come_from_a_folder_that_exists_and_never_silently_at_random(env, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "missing"))
    assert_one_line_error(invoke("run", "--dry-run"), "SPECBENCH_WEIGHTS_DIR", "does not exist")
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "a-file"))
    assert_one_line_error(invoke("models", "list"), "SPECBENCH_WEIGHTS_DIR", "is a file")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "empty"))
    assert_one_line_error(invoke("run", "--dry-run"), "--target", "bundled pair is not in", "random-target")
    result = invoke("run", "--draft", "random-draft", "--target", "random-target", "--dry-run", "-n", 8)
    assert result.exit_code == 0, result.output  # random weights run when named


def test_an_unusable_model_folder_is_listed_with_its_reason_and_named_with_the_same(env, tmp_path):
    for name, config in (("broken", "{not json"), ("half", '{"n_layer": 2}')):
        folder = tmp_path / "gpt2_weights" / name
        folder.mkdir()
        (folder / "config.json").write_text(config)
        (folder / "model.safetensors").write_text("")
    listed = invoke("models", "list")
    assert listed.exit_code == 0, listed.output
    text = " ".join(listed.output.split())
    assert "broken cannot be used:" in text and "broken/config.json is not JSON" in text
    assert "half cannot be used:" in text and "half/config.json is not a GPT-2 config" in text
    named = invoke("run", "--draft", "half", "--target", "half", "--dry-run")
    assert_one_line_error(named, "--target", "half/config.json is not a GPT-2 config")  # named first


def test_a_weights_folder_that_cannot_be_read_is_one_line(env, tmp_path, monkeypatch):
    # as an ordinary user without read permission on SPECBENCH_WEIGHTS_DIR: the permission error
    # itself, raised where the OS would raise it (root, which CI runs as, is never refused)
    import pathlib

    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(locked))
    real = pathlib.Path.is_file

    def refused(path):
        if str(path).startswith(str(locked)):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(pathlib.Path, "is_file", refused)
    monkeypatch.setattr(
        pathlib.Path, "iterdir", lambda path: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
    )
    for args in (["models", "list"], ["run", "--dry-run"]):
        assert_one_line_error(invoke(*args), "SPECBENCH_WEIGHTS_DIR", "Permission denied")


def test_settings_read_from_the_environment_blame_the_variable(env, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path / "a-file"))
    assert_one_line_error(invoke("run", *env, "--dry-run"), "SPECBENCH_RESULTS_DIR", "is a file")
    monkeypatch.delenv("SPECBENCH_RESULTS_DIR")
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "missing"))
    assert_one_line_error(invoke("models", "download", "gpt2"), "SPECBENCH_WEIGHTS_DIR", "does not exist")


def test_a_backend_that_cannot_start_is_one_line(env, monkeypatch):
    from specbench.measure import device

    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    monkeypatch.setattr(device.jax, "devices", lambda: (_ for _ in ()).throw(AssertionError()))
    for args in (["run", *env, "--dry-run"], ["roofline"], ["report", "--quick", "--dry-run"]):
        assert_one_line_error(invoke(*args), "JAX_PLATFORMS", "unset JAX_PLATFORMS")


def test_a_read_only_results_folder_gives_each_command_its_own_advice(env, monkeypatch):
    from specbench.errors import ExportError
    from specbench.results import export as exports

    def refuse(path):
        raise ExportError(f"{path} is not writable")

    Path("results").mkdir()  # SPECBENCH_RESULTS_DIR (env), there but not writable
    monkeypatch.setattr(exports, "check_writable", refuse)
    assert_one_line_error(invoke("run", *env, "--dry-run"), "--save", "pass --no-save")
    result = invoke("sweep", *env, "--dry-run")
    assert_one_line_error(result, "--output", "name a writable file with --output")
    assert "--no-save" not in result.output


def test_an_option_without_its_value_is_said_in_specbench_words(env):
    assert_one_line_error(invoke("run", *env, "--K"), "--K", "needs a value")


def test_help_shows_no_empty_range():
    for command in ("run", "sweep", "trace"):
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "None" not in result.output, result.output


def test_the_tokenizer_writes_no_cache_and_files_are_readable_by_others(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tokenizer.get_encoding.cache_clear()
    assert tokenizer.encode("hello world") == [31373, 995]
    assert not (tmp_path / "data-gym-cache").exists() and "TIKTOKEN_CACHE_DIR" not in os.environ
    old = os.umask(0o022)
    try:
        export.write_text(str(tmp_path / "rows.json"), "[]\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "rows.json").stat().st_mode) == 0o644


def test_saved_weights_are_readable_by_others_as_every_other_file_is(tmp_path):
    import numpy as np

    from specbench.model.checkpoints import eagle_files, hf_layout
    from specbench.model.nets import eagle
    from specbench.model.nets.gpt2 import GPT2Config

    old = os.umask(0o022)
    try:
        tensors = {"a": np.zeros((4, 4), np.float32), "b": np.ones(8, np.float32)}
        hf_layout.write(tmp_path / "one", {"model_type": "gpt2"}, tensors)
        hf_layout.write(tmp_path / "shards", {"model_type": "gpt2"}, tensors, max_shard_bytes=64)
        config = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=8, n_vocab=16)
        eagle_files.save(tmp_path / "head", eagle.init_params(config), config, "t")
    finally:
        os.umask(old)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len([p for p in written if p.suffix == ".safetensors"]) == 4
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == {p.name: 0o644 for p in written}


@pytest.mark.parametrize("bad, fragment", [("null", "not a number"), ('"fast"', "not a number")])
def test_plot_refuses_rows_whose_values_are_not_numbers(env, tmp_path, bad, fragment):
    pytest.importorskip("matplotlib")
    rows = json.loads(ROWS.read_text())
    rows[1]["speedup"] = json.loads(bad)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert_one_line_error(invoke("plot", tmp_path / "rows.json"), "FILE", fragment)
    assert not (tmp_path / "rows.png").exists()


def test_plot_writes_here_and_replaces_nothing_unasked(env, tmp_path):
    pytest.importorskip("matplotlib")
    assert invoke("plot", ROWS).exit_code == 0
    assert (tmp_path / f"{ROWS.stem}.png").exists()  # in the working directory, not beside the rows
    assert_one_line_error(invoke("plot", ROWS), "--output", "--force")
    assert invoke("plot", ROWS, "--force").exit_code == 0


# ---------------------------------------------------------------------------------------------
# Fuzzing: every flag, values from its domain and far beyond it

ODD = ["", "nan", "inf", "-inf", "-1", "0", "1e-40", "1e309", str(2**63), "x", "1,,2", "1-", "é", "\udcff"]


def domain(valid, beyond=()):
    """Values from the flag's domain three times in four, else the odd ones and `beyond`."""
    return st.one_of(valid, valid, valid, st.sampled_from(ODD + list(beyond)))


values = {
    "--K": domain(st.sampled_from(["1", "2", "4", "1-3", "2,8"]), ["300", "1-100000000", "2,2"]),
    "--temperature": domain(st.sampled_from(["0", "0.7", "1", "0,1"]), [str(x) for x in (-0.5, 0.001, 1e4)]),
    "--top-p": domain(st.floats(0.05, 1).map(str), ["1.5", "0.9,0.9"]),
    "--top-k": domain(st.integers(1, 200).map(str), ["-3", "60000"]),
    "--n-tokens": domain(st.integers(2, 40).map(str), ["1", "600", "100000"]),
    "--seed": domain(st.integers(0, 2**32 - 1).map(str), [str(2**64), "-5"]),
    "--repeats": domain(st.sampled_from(["1", "2"])),
    "--batch": domain(st.sampled_from(["1", "2", "3", "1,2"]), [str(10**10), "1,1"]),
    "--drafter": domain(
        st.sampled_from(["model", "lookup", "layerskip", "model,lookup"]), ["oracle", "lookup,lookup"]
    ),
    "--ngram": domain(st.integers(1, 16).map(str), ["17", "300"]),
    "--draft-layers": domain(st.sampled_from(["1"]), ["2", "5"]),
    "--draft-confidence": domain(st.floats(0.01, 0.99).map(str), ["1.5"]),
    "--draft-vocab": domain(st.sampled_from(["auto", "full", "16", "40"]), ["0", "40000", "x"]),
    "--prompt": domain(st.text(min_size=1, max_size=30), ["caf\udce9", "the " * 300]),
    "--prompt-id": domain(st.sampled_from(["fairy-1", "list-1"]), ["all", "narrative", "nope"]),
    "--prompts": domain(st.sampled_from(["fairy", "fairy-1,list-1", "list-1"]), ["nope", "fairy-1,fairy-1"]),
    "--dtype": domain(st.sampled_from(["float32", "bfloat16"]), ["float16"]),
    "--export-csv": domain(st.sampled_from(["-", "x.csv"]), ["x.json", "/nonexistent/x.csv", "."]),
    "--export-json": domain(st.sampled_from(["-", "x.json"]), ["x.csv", "/proc/x.json"]),
    "--output": domain(st.sampled_from(["s.json"]), ["s.csv", "/nonexistent/s.json", "."]),
}
values |= {
    "--kernels": domain(st.sampled_from(["auto", "cpu", "xla", "cpu,xla"]), ["fast", "cpu,cpu"]),
    "--iters": domain(st.sampled_from(["1", "5"]), ["0", "1e12", str(10**12)]),
    "--context": domain(st.sampled_from(["16", "64", "128"]), ["4", "100000"]),
    "--model": domain(st.sampled_from(["tiny-draft", "random-draft", "124M"]), ["nope", "/nonexistent"]),
    "--t-draft": domain(st.floats(0.01, 5).map(str), ["0"]),
    "--t-target": domain(st.floats(0.1, 50).map(str), ["0", "-2"]),
    "--r": domain(st.floats(0.2, 1).map(str), ["1.5", "0.01"]),
    "--alpha": domain(st.floats(0, 1).map(str), ["2"]),
    "--t-verify": domain(st.floats(0.1, 50).map(str), ["-1"]),
    "--warmup": domain(st.sampled_from(["1", "2"]), [str(10**9)]),
    "--tree": domain(st.sampled_from(["2", "2,1", "3,2,1"]), ["0", "9,9", "2,,1", "dynamic:4,8,64"]),
    "--verify": domain(st.sampled_from(["token", "block", "traversal", "gbv"]), ["nope", "token,block"]),
    "--drafts": domain(st.sampled_from(["1", "2"]), ["9", "1,2"]),
    "--acceptance": domain(st.sampled_from(["0.5", "1"]), ["1.5"]),
    "--eagle-head": domain(
        st.sampled_from([str(BUNDLED / "tiny-target-eagle")]), ["/nonexistent", str(BUNDLED / "tiny-target")]
    ),
}
WORKLOAD = BUNDLED.parent / "docs" / "workloads" / "victorian-40.jsonl"
values |= {  # --prompts-file and its choosers (a config.json is JSON with no prompt: refused by line)
    "--prompts-file": domain(
        st.sampled_from([str(WORKLOAD), str(DATA / "prompts-bom.jsonl"), str(DATA / "prompts-crlf.txt")]),
        ["/nonexistent.jsonl", str(BUNDLED / "tiny-target" / "config.json"), str(DATA / "prompts-nul.txt")]
        + ["/dev/zero", ""],
    ),
    "--per-category": domain(st.sampled_from(["1", "2"]), ["0"]),
    "--sample": domain(st.sampled_from(["1", "3"]), ["0", "-2"]),
    "--limit": domain(st.sampled_from(["1", "4"]), ["0"]),
    "--queue": domain(st.sampled_from(["2", "5"]), ["0", "1000000000000", "65537"]),
    "--mesh": domain(st.sampled_from(["tp=1"]), ["tp=0", "dp=2", "tp=2"]),  # the tests see one device
    "--coordinator": domain(  # a dry run joins nothing
        st.sampled_from(["127.0.0.1:9"]), ["127.0.0.1:abc", "127.0.0.1:99999", "host", ":1"]
    ),
    "--processes": domain(st.sampled_from(["1", "2"]), ["0", "1,2"]),
    "--process-id": domain(st.sampled_from(["0", "1"]), ["-1"]),
    "--join-timeout": domain(st.sampled_from(["5", "60"]), ["0", "1e9"]),
    "--draft-device": domain(st.sampled_from(["0", "1"]), ["abc"]),
}
ROOFLINE = ROWS.parent / "cpu-roofline-bundled-kernels.json"
values |= {  # predict's: files it reads, and a device's three numbers
    "--run": domain(st.sampled_from([str(ROWS)]), [str(DATA / "numbers.json"), "/nonexistent.json"]),
    "--roofline": domain(st.sampled_from([str(ROOFLINE)]), [str(DATA / "numbers.json"), str(ROWS)]),
    "--row": domain(st.sampled_from(["0", "1"]), ["100000"]),
    "--target-model": domain(st.sampled_from(["tiny-target"]), ["nope"]),
    "--draft-model": domain(st.sampled_from(["tiny-draft"]), ["nope"]),
    "--device": domain(st.sampled_from(["3350,989000,20", "100,100,0"]), ["a,b,c", "1,2", "0,1,1", "1,1,-1"]),
    "--comm-us": domain(st.sampled_from(["0", "5"]), ["-1"]),
    "--overhead-us": domain(st.sampled_from(["0", "5"]), ["-1"]),
}
ENVIRONMENT = {  # the variables that choose how specbench computes (specbench.environment)
    "SPECBENCH_SAMPLER": domain(st.sampled_from(["auto", "cdf", "race"]), ["bogus"]),
    "SPECBENCH_VERDICT": domain(st.sampled_from(["auto", "lazy", "all-rows"]), ["bogus"]),
    "SPECBENCH_XLA_LOOPS": domain(st.sampled_from(["default"]), ["bogus"]),
    "SPECBENCH_PALLAS_LAYERS": domain(st.sampled_from(["unrolled", "scan"]), ["bogus"]),
    "SPECBENCH_PALLAS_TILES": domain(st.sampled_from(["128,64,4,3"]), ["garbage", "100,64,4,3"]),
}
flags = [
    "--dynamic-K",
    "--host-loop",
    "--no-save",
    "--resume",
    "--force",
    "--random-init",
    "--quick",
    "--refill",
]
DECODE = {"--K", "--temperature", "--top-p", "--top-k", "--n-tokens", "--seed", "--dtype", "--kernels"}
DECODE |= {"--mesh", "--random-init"}  # the pair's placement, and random weights of registry names
DRAFTER = {"--drafter", "--ngram", "--draft-layers", "--draft-confidence", "--dynamic-K", "--draft-vocab"}
DRAFTER |= {"--verify", "--drafts", "--tree", "--acceptance", "--eagle-head"}
EXPORTS = {"--export-csv", "--export-json"}
PROMPTS_FILE = {"--prompts-file", "--per-category", "--sample", "--limit"}
# the flags each command takes (values or on/off), drawn from `values` and `flags`
COMMANDS = {
    "run": DECODE
    | DRAFTER
    | EXPORTS
    | PROMPTS_FILE
    | {"--refill", "--queue", "--itl"}
    | {"--prompt", "--prompt-id", "--repeats", "--warmup", "--batch", "--tree"}
    | {"--host-loop", "--no-save"}
    | {"--coordinator", "--processes", "--process-id", "--join-timeout", "--draft-device"},
    "sweep": DECODE
    | DRAFTER
    | EXPORTS
    | PROMPTS_FILE
    | {"--refill", "--queue", "--itl"}
    | {"--prompts", "--output", "--repeats", "--warmup", "--batch"}
    | {"--host-loop", "--resume", "--force"},
    "trace": DECODE | DRAFTER | PROMPTS_FILE | {"--prompt", "--prompt-id", "--tree"},
    "roofline": EXPORTS
    | {"--model", "--random-init", "--dtype", "--K", "--context", "--iters", "--kernels", "--mesh"},
    "report": PROMPTS_FILE
    | {"--dtype", "--kernels", "--output", "--quick", "--resume", "--force", "--draft-vocab"}
    | {"--mesh", "--random-init"},
    "theory": {"--K", "--t-draft", "--t-target", "--r", "--alpha", "--t-verify"},
    "predict": {"--run", "--roofline", "--row", "--alpha", "--target-model", "--draft-model", "--kernels"}
    | {"--device", "--comm-us", "--overhead-us", "--K"},
    "prompts": PROMPTS_FILE,
}
DRY = {"run", "sweep", "trace", "roofline", "report"}  # theory, predict and prompts only compute or read
MODELS = {"run", "sweep", "trace", "report"}  # take the test's --draft/--target


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(COMMANDS)))
    takes = COMMANDS[command]
    chosen = draw(st.lists(st.sampled_from(sorted(takes & set(values))), max_size=5, unique=True))
    args = [command]
    for name in chosen:
        args += [name, draw(values[name])]
    switches = sorted(takes & set(flags))
    args += draw(st.lists(st.sampled_from(switches), max_size=2, unique=True)) if switches else []
    names = draw(st.lists(st.sampled_from(sorted(ENVIRONMENT)), max_size=2, unique=True))
    return args, {name: draw(ENVIRONMENT[name]) for name in names}


EXAMPLES = int(os.environ.get("SPECBENCH_FUZZ_EXAMPLES", "60"))  # CI's fixed budget; more locally


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=command_lines())
def test_fuzzed_command_lines_end_cleanly_and_write_nothing(env, tmp_path, drawn):
    args, variables = drawn
    if args[0] in MODELS:
        args = args[:1] + env + args[1:]
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    line = [str(a) for a in args] + (["--dry-run"] if args[0] in DRY else [])
    result = CliRunner().invoke(cli, line, env=variables)
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    ), (args, result.output, result.exception)
    assert result.exit_code in (0, 2), (args, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
        named = lines[0][len("error: ") :].split(":")[0]
        variables = ("SPECBENCH_WEIGHTS_DIR", "SPECBENCH_RESULTS_DIR", *ENVIRONMENT)
        assert named.startswith("--") or named.split("=")[0] in variables, lines[0]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before, args


def test_a_slower_speedup_carries_its_spread_through_the_inversion():
    from specbench.cli.views.render import verdict

    assert verdict({"speedup": 0.85, "speedup_std": 0.04, "repeats": 5}) == "1.18 ± 0.06 times slower"
    assert verdict({"speedup": 1.6, "speedup_std": 0.1, "repeats": 5}) == "1.60 ± 0.10 times faster"
    assert verdict({"speedup": 0.5, "speedup_std": 0.0, "repeats": 1}) == "2.00 times slower"


def test_a_drafter_sweep_plots_a_series_per_drafter():
    from specbench.results import schema as results

    rows = json.loads((ROWS.parent / "history" / "cpu-sweep-drafters-bundled.json").read_text())
    assert {"draft", "drafter"} <= set(results.varying(rows, exclude=("K",)))


# ---------------------------------------------------------------------------------------------
# report: a dry run, a report.json of the wrong shape, a finished report


RECORDED_REPORT = ROWS.parent / "report-bundled-cpu-quick-suite"


@pytest.mark.parametrize("state", ["[]", '{"settings": 5}', '{"settings": {}, "sections": 3}'])
def test_resuming_a_report_of_the_wrong_shape_is_one_line(env, tmp_path, state):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.json").write_text(state)
    result = invoke("report", *env, "--quick", "-o", tmp_path / "rep", "--resume")
    assert_one_line_error(result, "--resume", "is not a specbench report")


def test_a_report_dry_run_measures_and_writes_nothing(env, tmp_path):
    result = invoke("report", *env, "--quick", "-o", tmp_path / "rep", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "nothing was compiled or written" in result.output and not (tmp_path / "rep").exists()


def test_resuming_a_finished_report_leaves_it_as_it_is(env, tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("SPECBENCH_WEIGHTS_DIR")  # the recorded report's pair: the bundled one
    copy = tmp_path / "rep"
    shutil.copytree(RECORDED_REPORT, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    result = invoke("report", "-o", copy, "--resume", "--quick", "--draft-vocab", "full")
    assert_one_line_error(result, "--resume", "draft_vocab 'auto' there, 'full' now")
    result = invoke("report", "-o", copy, "--resume", "--quick")
    assert result.exit_code == 0, result.output
    assert "is complete: nothing is left to measure" in result.output
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


@pytest.mark.parametrize("change", ["null", "missing"])
def test_plot_budget_checks_every_field_it_draws(env, tmp_path, change):
    pytest.importorskip("matplotlib")
    rows = json.loads((ROWS.parent / "cpu-sweep-bundled-budget-categories.json").read_text())
    if change == "null":
        rows[0]["t_ar_token_s"] = None
    else:
        del rows[1]["t_overhead_s"]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    field = "row 1 has t_ar_token_s = None" if change == "null" else "row 2 has no t_overhead_s"
    assert_one_line_error(invoke("plot", tmp_path / "rows.json", "--budget"), "--budget", field)
    assert not (tmp_path / "rows.png").exists()


@pytest.mark.parametrize(
    "variable, value, fragment",
    [
        ("SPECBENCH_PALLAS_TILES", "garbage", "four whole numbers"),
        ("SPECBENCH_SAMPLER", "bogus", "auto, cdf, race"),
        ("SPECBENCH_VERDICT", "bogus", "auto, lazy, all-rows"),
        ("SPECBENCH_XLA_LOOPS", "bogus", "command-buffers, default"),
        ("SPECBENCH_PALLAS_LAYERS", "bogus", "unrolled, scan"),
    ],
)
def test_an_environment_choice_is_checked_as_a_flag_is(env, monkeypatch, variable, value, fragment):
    monkeypatch.setenv(variable, value)
    assert_one_line_error(invoke("run", *env, "--dry-run"), variable, fragment)
    assert_one_line_error(invoke("report", *env, "--quick", "--dry-run"), variable, fragment)


def test_a_tiling_that_cannot_tile_is_refused_by_its_variable(monkeypatch):
    from specbench.environment import EnvironmentSettingError
    from specbench.model.kernels import pallas_tiles

    monkeypatch.setenv("SPECBENCH_PALLAS_TILES", "100,64,4,3")
    with pytest.raises(EnvironmentSettingError, match="SPECBENCH_PALLAS_TILES: .*power of two"):
        pallas_tiles.tiles()
    monkeypatch.setenv("SPECBENCH_PALLAS_TILES", "256,32,4,2")
    assert pallas_tiles.tiles() == pallas_tiles.Tiles(256, 32, 4, 2)


def test_a_dynamic_tree_that_grows_more_candidates_than_the_cache_of_its_nodes_runs():
    # the bundled pair (a context of 512): 201 candidates drafted a round and 64 nodes verified,
    # so the cache is planned for the candidates; one planned for the nodes (128) overran
    result = invoke("trace", "--tree", "dynamic:4,8,64", "-n", "8")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_an_eagle_heads_own_files_are_blamed_on_it_and_another_targets_head_is_warned_of(tmp_path):
    import shutil

    head = tmp_path / "head"
    shutil.copytree(BUNDLED / "tiny-target-eagle", head)
    (head / "drafting.json").write_text('{"vocab": "x"}')
    assert_one_line_error(
        invoke("run", "--drafter", "eagle", "--eagle-head", head, "--dry-run"),
        "--eagle-head",
        "drafting.json",
    )
    result = invoke(
        "run",
        "--drafter",
        "eagle",
        "--eagle-head",
        BUNDLED / "tiny-target-eagle",
        "--target",
        "random-target",
        "--dry-run",  # the warning comes with the checks; a dry run writes nothing into the checkout
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("warning: --eagle-head:") and "trained on tiny-target's" in result.output
