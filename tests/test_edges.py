"""Honest at the edges: a looping text said as such, a row's commit that is the code's own, a
damaged report or a full disk said in one line with what was kept, and the training commands'
bad input, table-driven and fuzzed."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.measure import device
from specbench.results import export, repetition

from conftest import assert_one_line_error, invoke

# ---------------------------------------------------------------------------------------------
# Repetition


def test_repetition_counts_the_tokens_that_repeat_a_4_gram_and_finds_the_loop_a_text_ends_in():
    varied = list(range(40))
    assert repetition.repeated_share(varied) == 0 and repetition.tail_cycle(varied) is None
    door = [11, 290, 262, 3420]  # ", and the door"
    looping = [7, 8] + door * 9 + [11, 290]
    # the loop's first period and the 3 tokens after it start no repeat; every later token does
    assert repetition.repeated_share(looping) == pytest.approx((len(looping) - 2 - 4 - 3) / len(looping))
    assert repetition.tail_cycle(looping) == (4, 2)  # a 4-token cycle from token 3 on
    assert repetition.tail_cycle([1, 2, 3, 4] + varied[:20] + [5, 5]) is None  # too short a tail
    row = {"temperature": 0, **repetition.describe([looping])}
    line = repetition.warning(row)
    assert line.startswith("the greedy text repeats a 4-token cycle from token 3 on")
    assert "`specbench sweep --prompts all` measures the suite" in line
    assert repetition.warning({"temperature": 0, **repetition.describe([varied])}) is None
    batch = repetition.describe([looping, varied])  # a batch: the mean, and no one loop
    assert batch["repetition"] == pytest.approx(repetition.repeated_share(looping) / 2)
    assert batch["repeat_cycle"] is None


# ---------------------------------------------------------------------------------------------
# The row's commit


def git(*args, cwd):
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(not device.git(["--version"], Path(".")), reason="git is not installed")
def test_the_row_records_specbenchs_own_commit_marked_dirty_and_never_an_enclosing_ones(tmp_path):
    outer = tmp_path / "their-project"
    copy = outer / "vendor" / "specbench-copy"  # a copy without .git, inside someone else's repository
    (copy / "specbench").mkdir(parents=True)
    (copy / "specbench" / "a.py").write_text("x = 1\n")
    git("init", "-q", cwd=outer)
    git("add", ".", cwd=outer)
    git("commit", "-qm", "theirs", cwd=outer)
    assert device.git_commit(copy) == ""
    own = tmp_path / "own"
    (own / "specbench").mkdir(parents=True)
    (own / "specbench" / "a.py").write_text("x = 1\n")
    git("init", "-q", cwd=own)
    git("add", ".", cwd=own)
    git("commit", "-qm", "ours", cwd=own)
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=own, capture_output=True, text=True)
    assert device.git_commit(own) == head.stdout.strip()
    (own / "specbench" / "a.py").write_text("x = 2\n")
    device.git_commit.cache_clear()
    assert device.git_commit(own) == head.stdout.strip() + "-dirty"
    device.git_commit.cache_clear()


# ---------------------------------------------------------------------------------------------
# Damaged reports


def damaged_report(directory: Path, sections: dict, rows: list[dict]) -> None:
    directory.mkdir()
    (directory / "report.json").write_text(json.dumps({"settings": {}, "sections": sections}))
    (directory / "rows.json").write_text(json.dumps(rows))


GOOD_ROW = {"report_job": "j", "K": 4, "temperature": 0, "prompt_id": "p", "speedup": 2.0, "alpha": 0.9}
GOOD_ROW |= {"ar_mean_s": 0.2, "sd_mean_s": 0.1}


@pytest.mark.parametrize(
    "sections, rows, fragment",
    [
        ({"K": 5}, [], "section 'K'"),
        ({"roofline": {"rows": 3}}, [], "roofline rows"),
        ({"exactness": {"selftest": []}}, [], "self-test"),
        (
            {},
            [{k: v for k, v in GOOD_ROW.items() if k != "temperature"}],
            "row 1 of rows.json has no temperature",
        ),
        (
            {},
            [GOOD_ROW, {**GOOD_ROW, "speedup": "fast"}],
            "row 2 of rows.json has a speedup of the wrong type",
        ),
    ],
)
def test_a_damaged_report_is_refused_before_any_work(env, tmp_path, monkeypatch, sections, rows, fragment):
    from specbench.cli.commands import report

    monkeypatch.setattr(report, "load_pair", lambda *a, **k: pytest.fail("the pair was loaded"))
    damaged_report(tmp_path / "rep", sections, rows)
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()}
    result = invoke("report", *env, "--quick", "-o", tmp_path / "rep", "--resume")
    assert_one_line_error(result, "--resume", "is damaged", fragment, "--force starts it over")
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()} == before


# ---------------------------------------------------------------------------------------------
# A full disk: one line naming the file, and what was kept


def full_disk_for(monkeypatch, name: str, after: int = 0) -> None:
    """os.replace into a file called `name` fails as on a full disk, after `after` successes."""
    real, calls = os.replace, []

    def replace(src, dst):
        if Path(dst).name == name:
            calls.append(dst)
            if len(calls) > after:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(export.os, "replace", replace)


def test_a_full_disk_during_run_says_which_file_and_keeps_the_result_on_screen(env, tmp_path, monkeypatch):
    full_disk_for(monkeypatch, "out.csv")
    out = tmp_path / "out.csv"
    result = invoke(
        "run", *env, "--repeats", 1, "-n", 5, "--export-csv", out, "--export-json", tmp_path / "o.json"
    )
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(
        f"error: {out} could not be written (No space left on device); the result is printed"
    )
    assert "o.json" in last and "run-" in last  # what was written anyway: the other export, the saved row
    assert "times faster" in result.output or "times slower" in result.output
    assert "Traceback" not in result.output and not out.exists() and not list(tmp_path.glob(".out.csv.*"))


def test_a_full_disk_during_a_sweep_keeps_the_rows_written_before(env, tmp_path, monkeypatch):
    full_disk_for(monkeypatch, "s.json", after=1)
    out = tmp_path / "s.json"
    result = invoke("sweep", *env, "--K", "1,2", "--repeats", 1, "-n", 5, "-o", out)
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(
        f"error: {out} could not be written (No space left on device); 1 row kept in {out}"
    )
    assert f"--resume --output {out}" in last and "Traceback" not in result.output
    assert [r["K"] for r in json.loads(out.read_text())] == [1]


# ---------------------------------------------------------------------------------------------
# The training commands


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Folders of .txt documents: none, one, one that is not UTF-8, and a small valid corpus."""
    root = tmp_path_factory.mktemp("corpora")
    for name in ("empty", "one", "latin1", "ok"):
        (root / name).mkdir()
    (root / "one" / "a.txt").write_text("One document alone.")
    (root / "latin1" / "a.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "latin1" / "b.txt").write_text("fine")
    for i in range(3):
        (root / "ok" / f"{i}.txt").write_text(
            " ".join(f"Sentence number {j} of document {i}." for j in range(60))
        )
    (root / "a-file").write_text("")
    return root


def train(*args):
    from click.testing import CliRunner

    from specbench.train.commands import main

    return CliRunner().invoke(main, [str(a) for a in args])


TRAIN_CASES = [
    (["prepare", "--corpus", "{r}/empty", "--out", "{t}/d"], "--corpus", "no .txt files"),
    (["prepare", "--corpus", "{r}/one", "--out", "{t}/d"], "--corpus", "one .txt file"),
    (["prepare", "--corpus", "{r}/latin1", "--out", "{t}/d"], "--corpus", "a.txt is not UTF-8"),
    (["prepare", "--corpus", "{r}/ok", "--out", "{r}/a-file"], "--out", "is a file"),
    (
        ["prepare", "--corpus", "{r}/ok", "--out", "{t}/d", "--val-fraction", "nan"],
        "--val-fraction",
        "finite",
    ),
    (["target", "--data", "{r}/empty", "--out", "{t}/m"], "--data", "holds no train.bin"),
    (
        ["target", "--data", "{r}/empty", "--out", "{t}/m", "--n-embd", 10, "--n-head", 3],
        "--n-head",
        "divide",
    ),
    (["target", "--data", "{r}/empty", "--out", "{t}/m", "--lr", "nan"], "--lr", "finite"),
    (["target", "--data", "{r}/empty", "--out", "{t}/m", "--ctx", 64, "--n-ctx", 32], "--ctx", "--n-ctx 32"),
    (
        ["target", "--data", "{r}/empty", "--out", "{t}/m", "--checkpoint-every", "nan"],
        "--checkpoint-every",
        "finite",
    ),
    (["target", "--data", "{r}/empty", "--out", "{r}/a-file"], "--out", "is a file"),
    (["target", "--data", "{r}/empty", "--out", "{t}/m", "--steps", "1e3"], "--steps", "whole number"),
    (["draft", "--data", "{r}/empty", "--out", "{t}/m", "--teacher", "{r}", "--kd", "nan"], "--kd", "finite"),
]


@pytest.mark.parametrize(
    "args, flag, fragment", TRAIN_CASES, ids=[" ".join(map(str, c[0][:1] + c[0][-2:])) for c in TRAIN_CASES]
)
def test_training_bad_input_is_one_line_and_writes_nothing(corpora, tmp_path, args, flag, fragment):
    result = train(*[str(a).format(r=corpora, t=tmp_path) for a in args])
    assert_one_line_error(result, flag, fragment)
    assert not list(tmp_path.iterdir())


def test_a_training_run_said_too_small_for_its_window(corpora, tmp_path):
    assert train("prepare", "--corpus", corpora / "ok", "--out", tmp_path / "d").exit_code == 0
    result = train(
        "target", "--data", tmp_path / "d", "--out", tmp_path / "m", "--ctx", 1000, "--n-ctx", 1024
    )
    assert_one_line_error(result, "--ctx", "fewer than a window of 1000")
    assert not (tmp_path / "m").exists()


@pytest.fixture(scope="module")
def prepared(corpora, tmp_path_factory):
    """The small corpus tokenised both ways: GPT-2's tokenizer (prepare) and a 300-token BPE of
    its own (t5-prepare), whose vocabulary no bundled T5 shares."""
    root = tmp_path_factory.mktemp("prepared")
    assert train("prepare", "--corpus", corpora / "ok", "--out", root / "gpt2").exit_code == 0
    assert (
        train("t5-prepare", "--corpus", corpora / "ok", "--out", root / "t5", "--vocab", 300).exit_code == 0
    )
    return root


BUNDLED = Path(__file__).resolve().parent.parent / "gpt2_weights"
DATA_CASES = [  # a model and data or a teacher that do not go together: blamed on the flag at fault
    (["eagle", "--target", BUNDLED / "tiny-t5-target", "--data", "{p}/gpt2"], "--target", "is a T5"),
    (["eagle", "--data", "{p}/t5"], "--data", "its own tokenizer.json"),
    (["target", "--data", "{p}/t5"], "--data", "its own tokenizer.json"),
    (["draft", "--data", "{p}/gpt2", "--teacher", BUNDLED / "tiny-t5-target"], "--teacher", "is a T5"),
    (["t5-target", "--data", "{p}/gpt2"], "--data", "GPT-2's tokenizer"),
    (["t5-target", "--data", "{p}/t5", "--source", 100000], "--source", "fewer than a window of 100032"),
    (["t5-draft", "--data", "{p}/t5", "--teacher", BUNDLED / "tiny-target"], "--teacher", "is a GPT-2 model"),
    (
        ["t5-draft", "--data", "{p}/t5", "--teacher", BUNDLED / "tiny-t5-target"],
        "--teacher",
        "predicts 4,096",
    ),
]


@pytest.mark.parametrize(
    "args, flag, fragment", DATA_CASES, ids=[" ".join(map(str, c[0][:2])) for c in DATA_CASES]
)
def test_training_refuses_data_or_a_teacher_made_for_another_model(prepared, tmp_path, args, flag, fragment):
    result = train(*[str(a).format(p=prepared) for a in args], "--out", tmp_path / "m", "--steps", 1)
    assert_one_line_error(result, flag, fragment)
    assert not list(tmp_path.iterdir())


def test_ctrl_c_says_whether_a_checkpoint_is_kept(corpora, tmp_path, monkeypatch):
    from specbench.train import options as train_main

    assert train("prepare", "--corpus", corpora / "ok", "--out", tmp_path / "d").exit_code == 0
    small = ["--data", tmp_path / "d", "--out", tmp_path / "m", "--ctx", 8, "--n-ctx", 16, "--n-embd", 8]
    small += ["--n-head", 1, "--n-layer", 1, "--checkpoint-dir", tmp_path / "ck"]

    def interrupted(*a, on_checkpoint=None, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_main, "train", interrupted)
    result = train("target", *small)
    assert result.exit_code == 130 and "before the first checkpoint: nothing is kept" in result.output

    def after_a_checkpoint(*a, on_checkpoint=None, **k):
        on_checkpoint(7)
        raise KeyboardInterrupt

    monkeypatch.setattr(train_main, "train", after_a_checkpoint)
    result = train("target", *small)
    assert result.exit_code == 130 and f"{tmp_path / 'ck' / 'm.npz'} (step 7) is kept" in result.output


def beyond(valid, *bad):
    return st.one_of(valid, st.sampled_from(bad))


TRAIN_FLAGS = {
    "--n-layer": beyond(st.integers(1, 3), "0", "-1", "1.5", "nan"),
    "--n-embd": beyond(st.integers(8, 64), "7", "1e9", "x"),
    "--n-head": beyond(st.integers(1, 8), "0", "inf"),
    "--n-ctx": beyond(st.integers(16, 64), "15", ""),
    "--ctx": beyond(st.integers(8, 128), "7", "nan"),
    "--steps": beyond(st.integers(1, 5), "0", "1e3"),
    "--batch": beyond(st.integers(1, 4), "0", "2,2"),
    "--lr": beyond(st.floats(1e-5, 1e-1), "0", "nan", "-inf", "fast"),
    "--warmup": beyond(st.integers(0, 5), "-1", "nan"),
    "--seed": beyond(st.integers(0, 2**32 - 1), "-1", str(2**64)),
    "--checkpoint-every": beyond(st.floats(1, 1e4), "0.5", "nan", "inf"),
    "--head-vocab": beyond(st.integers(0, 50257), "50258", "-1"),
    "--head-extra": beyond(st.integers(1, 50257), "0", "nan"),
}


LOOP = ["--ctx", "--steps", "--batch", "--lr", "--warmup", "--seed", "--checkpoint-every"]
TRAIN_FLAGS |= {
    "--vocab": beyond(st.integers(0, 50257), "50258", "x"),
    "--cls-weight": beyond(st.floats(0, 2), "-1", "nan"),
    "--noise": beyond(st.floats(0, 1), "-0.1", "inf"),
    "--encoder-layers": beyond(st.integers(1, 3), "0", "x"),
    "--decoder-layers": beyond(st.integers(1, 3), "0"),
    "--d-model": beyond(st.integers(8, 64), "7", "x"),
    "--d-ff": beyond(st.integers(8, 64), "0", "nan"),
    "--source": beyond(st.integers(1, 64), "0", "x"),
    "--kd": beyond(st.floats(0, 1), "1.5", "nan"),
}
TRAIN_COMMANDS = {  # what each command takes besides --data, --out and --checkpoint-dir
    "target": LOOP + ["--n-layer", "--n-embd", "--n-head", "--n-ctx", "--head-vocab", "--head-extra"],
    "eagle": LOOP + ["--vocab", "--cls-weight", "--noise"],
    "t5-target": LOOP
    + ["--encoder-layers", "--decoder-layers", "--d-model", "--n-head", "--d-ff", "--source"],
    "t5-draft": LOOP + ["--d-model", "--n-head", "--source", "--kd"],
}
T5_TEACHER = Path(__file__).resolve().parent.parent / "gpt2_weights" / "tiny-t5-target"


@st.composite
def train_lines(draw):
    command = draw(st.sampled_from(sorted(TRAIN_COMMANDS)))
    flags = draw(st.lists(st.sampled_from(TRAIN_COMMANDS[command]), max_size=5, unique=True))
    args = [command] + (["--teacher", str(T5_TEACHER)] if command == "t5-draft" else [])
    for flag in flags:
        args += [flag, str(draw(TRAIN_FLAGS[flag]))]
    return args


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=train_lines())
def test_fuzzed_training_command_lines_end_in_one_line_and_write_nothing(corpora, tmp_path, args):
    # GPT-2's, EAGLE's and T5's training over an empty --data folder: whatever the flags, the run
    # ends before any training, in one line
    out = tmp_path / "fuzz"
    command, *rest = args
    result = train(
        command, "--data", corpora / "empty", "--out", out / "m", "--checkpoint-dir", out / "ck", *rest
    )
    assert result.exit_code == 2, (args, result.output)
    assert_one_line_error(result)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Small things


def test_a_refused_report_makes_no_matplotlib_folder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
    }
    env |= {"HOME": str(home), "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "specbench", "report", "-o", tmp_path / "none", "--resume"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--resume" in done.stderr, done.stderr
    assert not list(home.iterdir())


def test_a_weights_folder_that_is_a_file_is_blamed_on_the_variable_by_roofline(env, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "a-file"))
    assert_one_line_error(invoke("roofline"), "SPECBENCH_WEIGHTS_DIR", "is a file")


def test_sigterm_ends_a_training_run_like_ctrl_c_with_143_and_what_it_keeps(prepared, tmp_path):
    import signal
    import time

    command = [sys.executable, "-m", "specbench.train", "target", "--data", str(prepared / "gpt2")]
    command += ["--out", str(tmp_path / "m"), "--checkpoint-dir", str(tmp_path / "ck"), "--steps", "100000"]
    command += ["--ctx", "8", "--n-ctx", "16", "--n-embd", "8", "--n-head", "1", "--n-layer", "1"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # importing, loading or training: the signal is answered the same in each
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
