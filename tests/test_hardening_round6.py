"""Hardening round 6: refilled batches of one slot and of T5, prompt files read with bounds, a
bounded queue, predict's inputs, strict JSON everywhere, and a run over several processes that
ends in one line naming the process, whatever happens to it."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specbench import prompt_files
from specbench.cli.asked.console import BadInput
from specbench.cli.commands import distributed, processes
from specbench.results import export

from conftest import assert_one_line_error, invoke

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "results" / "recorded"
JOIN = ["--processes", "2", "--process-id", "1"]
ROOFLINE = RECORDED / "cpu-roofline-bundled-kernels.json"


def strict_loads(text: str):
    """json.loads that refuses NaN and the infinities, as JavaScript's JSON.parse does."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "args, flag, fragment",
    [
        (["--run", "LIST", "--roofline", ROOFLINE], "--run", "no specbench row"),
        (["--alpha", "0.5", "--roofline", "LIST", "--target-model", "m"], "--roofline", "no roofline rows"),
        (["--alpha", "0.5", "--roofline", ROOFLINE, "--device", "a,b,c"], "--device", "is not a number"),
        (["--alpha", "0.5", "--roofline", ROOFLINE, "--device", "0,1,1"], "--device", "above 0"),
        (
            ["--alpha", "0.5", "--roofline", ROOFLINE, "--target-model", "tiny-target", "--kernels", "bogus"],
            "--kernels",
            "'bogus'",
        ),
    ],
)
def test_predict_refuses_what_it_cannot_read_in_one_line(tmp_path, args, flag, fragment):
    numbers = tmp_path / "list.json"
    numbers.write_text("[1, 2, 3]")
    args = [numbers if a == "LIST" else a for a in args]
    assert_one_line_error(invoke("predict", *args), flag, fragment)


def test_a_device_s_three_numbers_may_repeat():
    result = invoke(
        "predict", "--alpha", "0.5", "--roofline", ROOFLINE, "--target-model", "tiny-target",
        "--draft-model", "tiny-draft", "--device", "100,100,0", "--K", "1-2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_prompt_files_drop_a_byte_order_mark_and_read_crlf_line_ends(tmp_path):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(
        b'\xef\xbb\xbf{"prompt": "Once upon a time", "id": "a"}\r\n{"prompt": "The door", "id": "b"}\r\n'
    )
    suite = prompt_files.read(bom)
    assert [(p.id, p.text) for p in suite.prompts] == [("a", "Once upon a time"), ("b", "The door")]
    text = tmp_path / "crlf.txt"
    text.write_bytes(b"\xef\xbb\xbfOne line\r\nanother\r\n")
    assert [p.text for p in prompt_files.read(text).prompts] == ["One line", "another"]


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: str(d / "nul.txt"), "NUL bytes"),
        (lambda d: "", "name a prompt file"),
        (lambda d: str(d), "is a folder"),
        (lambda d: "/dev/zero", "not a regular file"),
        (lambda d: str(d / "fifo"), "not a regular file"),
        (lambda d: str(d / "big.txt"), "over 16 MiB"),
    ],
)
def test_prompt_files_that_are_not_text_files_are_refused(tmp_path, make, fragment):
    (tmp_path / "nul.txt").write_bytes(b"\0" * 4096)
    os.mkfifo(tmp_path / "fifo")
    with open(tmp_path / "big.txt", "wb") as fh:
        fh.truncate(prompt_files.MAX_BYTES + 1)  # sparse: nothing is written to disk
    assert_one_line_error(invoke("prompts", "--prompts-file", make(tmp_path)), "--prompts-file", fragment)


def test_the_prompts_command_cuts_a_long_prompt(tmp_path):
    long = tmp_path / "long.txt"
    long.write_text("word " * 20_000 + "\n")
    result = invoke("prompts", "--prompts-file", long)
    flat = " ".join(result.output.split())
    assert result.exit_code == 0 and "99,999 characters" in flat.replace("│", "").replace("  ", " ")
    assert len(result.output) < 10_000


@pytest.mark.parametrize(
    "args, flag, fragment",
    [
        (["run", "--batch", "2", "--refill", "--queue", "1000000000000"], "--queue", "65536"),
        (["run", "--draft-device", "abc"], "--draft-device", "whole number"),
        (["run", "--drafter", "dial", "--acceptance", "0.5", "-b", "2"], "--batch", "the dial decodes one"),
        (["run", "--mesh", "tp=1", "--coordinator", "127.0.0.1:abc", *JOIN], "--coordinator", "1..65535"),
        (["run", "--mesh", "tp=1", "--coordinator", "127.0.0.1:99999", *JOIN], "--coordinator", "1..65535"),
    ],
)  # fmt: skip
def test_refusals_of_round_six(env, args, flag, fragment):
    assert_one_line_error(invoke(*args, "--dry-run"), flag, fragment)


def test_a_folder_of_an_unsupported_model_type_is_refused_naming_it_and_the_target(env, tmp_path):
    folder = tmp_path / "gemma3-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "hidden_size": 64}))
    result = invoke("run", "--target", folder, "--draft", folder, "--dry-run")
    assert_one_line_error(
        result, "--target", "'gemma3'", "gpt2, llama, qwen2, qwen3, mistral, mimo, t5", str(folder)
    )


def test_a_truncated_tokenizer_names_the_model_flags(env, tmp_path):
    folder = tmp_path / "t5"
    source = ROOT / "gpt2_weights" / "tiny-t5-target"
    folder.mkdir()
    for f in source.iterdir():
        (folder / f.name).symlink_to(f)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").write_text((source / "tokenizer.json").read_text()[:1000])
    result = invoke(
        "run", "--target", folder, "--draft", ROOT / "gpt2_weights" / "tiny-t5-draft", "--dry-run"
    )
    assert_one_line_error(result, "--draft/--target", "cannot read the tokenizer")


def test_a_dry_run_of_process_1_checks_the_flags_and_joins_nothing(env):
    joined = ["--coordinator", "127.0.0.1:9", "--processes", "2", "--process-id", "1"]
    result = invoke("run", "--mesh", "tp=2", *joined, "--dry-run")
    assert result.exit_code == 0, result.output


def test_strict_json_writes_null_for_what_does_not_exist():
    rows = [{"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (math.nan,), "e": 2.5}]
    assert strict_loads(export.to_json(rows)) == [
        {"a": None, "b": [1.0, None, {"c": None}], "d": [None], "e": 2.5}
    ]
    assert "nan" not in export.to_csv([{"K": 4, "alpha": math.nan}]).lower()


def test_every_recorded_json_file_is_strict_json():
    import lzma

    files = [p for p in RECORDED.rglob("*") if p.name.endswith((".json", ".json.xz"))]
    assert len(files) > 50
    for p in files:
        raw = p.read_bytes()
        strict_loads((lzma.decompress(raw) if p.name.endswith(".xz") else raw).decode())


def test_a_refilled_queue_on_one_slot_is_measured_saved_and_strict_json(env, tmp_path):
    out = tmp_path / "out.json"
    result = invoke(
        "run", *env, "--refill", "-n", "4", "--repeats", "1", "--queue", "2", "--export-json", out
    )
    assert result.exit_code == 0, result.output
    (row,) = strict_loads(out.read_text())
    assert row["queue"] == 2 and row["batch"] == 1 and len(row["sd_text"]) == 2
    assert "all 2 pairs of generations are identical" in result.output


# ---------------------------------------------------------------------------------------------
# several processes: checked before joining, watched while joined


def test_the_coordinator_address_is_checked_before_anything_joins():
    assert distributed.address("127.0.0.1:29500") == ("127.0.0.1", 29500)
    assert distributed.address("[::1]:8") == ("::1", 8)
    for bad in ("127.0.0.1", ":80", "host:0", "host:65536", "host:x"):
        with pytest.raises(BadInput, match="HOST:PORT"):
            distributed.address(bad)


def test_process_0_refuses_a_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(BadInput, match="is in use"):
            distributed.check_free("127.0.0.1", s.getsockname()[1])


def test_a_partner_that_never_comes_ends_in_one_line_within_the_join_timeout(model_dirs, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = [sys.executable, "-m", "specbench", "run", "--target", str(model_dirs / "t"), "--draft"]
    line += [str(model_dirs / "d"), "--mesh", "tp=2", "--no-save", "--coordinator", f"127.0.0.1:{port}"]
    line += ["--processes", "2", "--process-id", "1", "--join-timeout", "3"]
    done = subprocess.run(line, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip() and not x.startswith("[progress]")]
    assert lines == [
        f"error: --processes: process 1 of 2: waited 3 s (--join-timeout) at 127.0.0.1:{port} for "
        "process 0 (the coordinator), which did not come"
    ], done.stderr
    assert done.stdout == ""


def test_a_child_that_lost_its_partner_is_named_in_one_reason():
    recorded = [  # what a process's child wrote when process 0 was interrupted mid-run (jaxlib 0.10.2)
        "E1128 20:05:46.944164 4130 coordination_service_agent.cc:289] Polled an error\n",
        "F1128 20:05:46.944193 4130 client.h:80] Terminating process because the JAX distributed service "
        "detected fatal errors. This most likely indicates that another task died\n",
        "jax.errors.JaxRuntimeError: UNKNOWN: Gloo all-reduce failed: Read error: Connection reset by peer\n",
    ]
    assert "another process of the run has gone" in processes.reason_of(recorded, -6)
    assert "port is in use" in processes.reason_of(["E0 Failed to start RPC server\n"], -6)
    assert processes.reason_of(
        ["Traceback (most recent call last):\n", "  File x\n", "ValueError: v\n"], 1
    ) == ("it ended by exit code 1 (ValueError: v)")
    assert processes.FAILURE.match(recorded[0]) and not processes.FAILURE.match("W1128 a warning\n")


def test_gloo_s_lines_never_reach_standard_output(capfdbinary):
    import io

    processes.pass_stdout(io.BytesIO(b"[Gloo] Rank 0 is connected to 1 peer ranks.\n| table |\n"))
    assert capfdbinary.readouterr().out == b"| table |\n"


@pytest.mark.slow
def test_a_refilled_t5_queue_decodes_each_request_as_autoregressive_decoding_does(env, tmp_path):
    """T5's decoder starts every request from its one start token (refill.serve's ends)."""
    pair = [
        "--target",
        ROOT / "gpt2_weights" / "tiny-t5-target",
        "--draft",
        ROOT / "gpt2_weights" / "tiny-t5-draft",
    ]
    out = tmp_path / "t5.json"
    result = invoke("run", *pair, "-b", "2", "--refill", "-n", "6", "--repeats", "1", "--export-json", out)
    assert result.exit_code == 0, result.output
    (row,) = strict_loads(out.read_text())
    assert row["queue"] == 8 and row["identical"] is True and len(row["sd_token_ids"]) == 8
    assert "all 8 pairs of generations are identical" in result.output
