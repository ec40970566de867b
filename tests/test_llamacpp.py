"""`--peer llamacpp` (measure/llamacpp.py): refused in one line without a build, with another
version's, with a folder that is not one, at T > 0, and when a conversion fails; its programs'
output read into a row (through stand-ins for llama.cpp's programs that print what they print);
and, in the slow tier where a build is given (SPECBENCH_LLAMACPP), the real llama.cpp on the
bundled pair at float32 and Q8_0 with the same greedy tokens as specbench's, and gguf-py's Q8_0
blocks equal to specbench's."""

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from specbench.measure import llamacpp

from conftest import assert_one_line_error, invoke

BUILT = os.environ.get(llamacpp.VARIABLE)
BASE = ("run", "-n", "8", "--K", "3", "--repeats", "1", "--no-save")
ARGS = (*BASE, "--peer", "llamacpp")


@pytest.fixture
def no_build(monkeypatch):
    """No build given, and none left behind: --llamacpp sets the variable in this process."""
    monkeypatch.setenv(llamacpp.VARIABLE, "")
    monkeypatch.delenv(llamacpp.VARIABLE)


def script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def fake_build(root: Path, ids: list[int], text: str, convert_fails: bool = False) -> Path:
    """A folder shaped as build_llamacpp.sh leaves it, whose programs print what llama.cpp's print:
    specbench-ar the ids and its timers, speculative-simple the prompt and `text` on stdout and its
    timers on stderr (45 tokens decoded for -n 40, as whole rounds), the converter an empty file."""
    (root / "VERSION").parent.mkdir(parents=True, exist_ok=True)
    (root / "VERSION").write_text(llamacpp.VERSION + "\n")
    script(
        root / "bin" / "specbench-ar",
        f"print(' '.join(map(str, {ids})))\nprint('prompt_us 1000')\nprint('decode_us 7000')",
    )
    script(
        root / "bin" / llamacpp.PROGRAM,
        "prompt = open(sys.argv[sys.argv.index('-f') + 1]).read()\n"
        f"print('\\n\\n' + prompt + {text!r} + '\\n\\n')\n"
        "n = int(sys.argv[sys.argv.index('-n') + 1])\n"
        "sys.stderr.write('encoded   19 tokens in    0.002 seconds, speed: 1 t/s\\n')\n"
        "sys.stderr.write(f'decoded {n + 1:4d} tokens in    0.009 seconds, speed: 1 t/s\\n')",
    )
    fail = "sys.stderr.write('ValueError: no tokenizer\\n'); sys.exit(1)" if convert_fails else ""
    script(
        root / "src" / "convert_hf_to_gguf.py",
        f"{fail}\nopen(sys.argv[sys.argv.index('--outfile') + 1], 'w')",
    )
    return root


def test_llamacpp_is_refused_in_one_line_without_a_build(tmp_path, no_build):
    assert_one_line_error(invoke(*ARGS, "--dry-run"), "--peer", "build_llamacpp.sh", "--llamacpp DIR")
    assert_one_line_error(invoke(*ARGS, "--llamacpp", tmp_path, "--dry-run"), "is not a llama.cpp build")
    (tmp_path / "VERSION").write_text("b9999\n")
    assert_one_line_error(
        invoke(*ARGS, "--llamacpp", tmp_path, "--dry-run"), "holds llama.cpp b9999", "b11434"
    )
    build = fake_build(tmp_path / "built", [1], "x")
    assert_one_line_error(invoke(*ARGS, "--llamacpp", build, "-t", "1", "--dry-run"), "T = 0 only")
    failing = fake_build(tmp_path / "failing", [1], "x", convert_fails=True)
    assert_one_line_error(
        invoke(*ARGS, "--llamacpp", failing), "could not convert", "ValueError: no tokenizer"
    )


def test_its_programs_output_becomes_a_row(tmp_path, no_build):
    out = tmp_path / "rows.json"
    result = invoke(*BASE, "--export-json", out)  # specbench's own tokens first, to give the stand-ins
    assert result.exit_code == 0, result.output
    from specbench.model.checkpoints import tokenizer, weights

    ids = json.loads(out.read_text())[0]["ar_token_ids"]
    text = tokenizer.for_model(weights.load_model("tiny-target", decoding=False)).decode(ids)
    build = fake_build(tmp_path / "build", ids, text)
    result = invoke(*ARGS, "--llamacpp", build, "--export-json", out)
    assert result.exit_code == 0, result.output
    ours, peer = json.loads(out.read_text())
    assert peer["implementation"] == "llamacpp" and peer["implementation_version"].startswith(
        "b11434 (f32/f32"
    )
    assert peer["ar_token_ids"] == peer["sd_token_ids"] == ours["ar_token_ids"] and peer["same_as_specbench"]
    assert peer["ar_mean_s"] == pytest.approx(0.008)  # its own timers: 1 ms prompt + 7 ms decode
    assert peer["sd_mean_s"] == pytest.approx(0.002 + 0.009 * 8 / 9)  # 9 decoded, scaled to N = 8


needs_build = pytest.mark.skipif(not BUILT, reason=f"no llama.cpp build given ({llamacpp.VARIABLE})")


@pytest.mark.slow
@needs_build
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_llamacpp_on_the_bundled_pair_gives_specbench_s_tokens(tmp_path, dtype):
    out = tmp_path / "rows.json"
    result = invoke(*ARGS, "-n", "24", "--draft-vocab", "full", "--dtype", dtype, "--export-json", out)
    assert result.exit_code == 0, result.output
    ours, peer = json.loads(out.read_text())
    assert peer["same_as_specbench"] is True, peer["first_difference"]
    kind = "q8_0/q8_0" if dtype == "int8" else "f32/f32"
    assert peer["implementation_version"].startswith(f"b11434 ({kind} draft/target, f32 KV cache")
    assert ours["target_weights"] == ("q8_0" if dtype == "int8" else "float32")


@pytest.mark.slow
@needs_build
def test_gguf_py_s_q8_0_blocks_are_specbench_s():
    sys.path.insert(0, str(Path(BUILT) / "src" / "gguf-py"))
    from gguf import GGMLQuantizationType, quants

    from specbench.model.kernels import q8_0

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((96, 40)) * rng.uniform(0, 3, (96, 1))).astype(np.float32)
    blocks = quants.quantize(w.T.copy(), GGMLQuantizationType.Q8_0).reshape(
        40, 3, 34
    )  # [n_out, block, 2 + 32]
    q = q8_0.quantize(w)
    np.testing.assert_array_equal(blocks[..., 2:].copy().view(np.int8).reshape(40, 96).T, q.codes)
    np.testing.assert_array_equal(
        blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32).T, q.scales
    )


def test_the_gguf_copies_go_with_the_peer(tmp_path):
    build = fake_build(tmp_path / "build", [1], "x")
    folder = str(Path(__file__).resolve().parent.parent / "gpt2_weights" / "tiny-draft")
    peer = llamacpp.LlamaCppPeer(build, (folder, folder), ("f32", "q8_0"), (str.split, " ".join))
    assert sorted(p.name for p in peer.scratch.iterdir()) == ["draft-f32.gguf", "target-q8_0.gguf"]
    peer.close()  # also registered to run at exit
    assert not peer.scratch.exists()
