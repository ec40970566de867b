"""llama.cpp as a peer (`--peer llamacpp`): its own speculative loop, `llama-speculative-simple`,
on the same models converted to GGUF, timed by its own timers in the same run as specbench's.

The build is the one scripts/build_llamacpp.sh makes (llama.cpp VERSION, pinned), found through
--llamacpp DIR or SPECBENCH_LLAMACPP. At the peer's start both models' folders are converted with
llama.cpp's own convert_hf_to_gguf.py into the peer's scratch folder: f32, or Q8_0 for a model
decoded in int8 (the same bytes specbench's kernel reads, kernels/q8_0.py), bf16 for bfloat16.

What is pinned, and recorded in the row's implementation_version:
- K constant: --spec-draft-n-max K, --spec-draft-n-min 0, --spec-draft-p-min 0;
- the draft's head over the full vocabulary (llama.cpp has no FR-Spec head; specbench's row says
  its own draft_vocab);
- the threads: JAX's CPU devices' cores (os.sched_getaffinity), for both models;
- the KV cache in f32, as specbench's;
- T = 0 only. llama.cpp's loop (common_sampler_sample_and_accept_n) keeps a draft where the
  target's sampler draws the same token: every token is a draw of the target, so it is exact in
  distribution, but it accepts with probability sum p q rather than speculative sampling's
  sum min(p, q): not the algorithm specbench measures, so T > 0 is refused.

AR is `specbench-ar` (scripts/llamacpp/specbench_ar.cpp, built with it): the prompt's ids in, one
llama_process call a token, greedy, the new ids out, timed around the library's calls. SD's times
are speculative-simple's own "encoded" (the prompt) plus "decoded" (the loop) timers; neither
counts process start or model load. The loop runs whole rounds and may return more than N tokens:
its decode time is scaled to N tokens (per token, as it ran), and its tokens are cut to N. It prints
text, not ids: its ids are that text encoded again with the pair's tokenizer, and a text that does
not encode back to the same tokens shows as a difference from specbench's.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from specbench.measure.peers import PeerError
from specbench.model.checkpoints import hf_layout, tokenizer
from specbench.model.nets import quantized

VERSION = "b11434"
VARIABLE = "SPECBENCH_LLAMACPP"
HOW = f"build it with `bash scripts/build_llamacpp.sh DIR` and pass --llamacpp DIR (or {VARIABLE}=DIR)"
PROGRAM = "llama-speculative-simple"
AR_PROGRAM = "specbench-ar"
TIMERS = re.compile(r"(encoded|decoded)\s+(\d+) tokens in\s+([\d.]+) seconds")


class LlamaCppError(PeerError):
    """The llama.cpp peer cannot run: no build, another version, a failed conversion or run."""

    def __init__(self, message: str):
        super().__init__(message, "peer")


def build_folder(given: str | None) -> Path:
    """The llama.cpp build to run: `given` (--llamacpp) or $SPECBENCH_LLAMACPP, checked to hold
    VERSION's program and converter; LlamaCppError naming what is missing and how to get it."""
    text = given or os.environ.get(VARIABLE, "")
    if not text:
        raise LlamaCppError(f"llamacpp needs a llama.cpp build: {HOW}")
    folder = Path(text).expanduser()
    version_file = folder / "VERSION"
    if not version_file.is_file():
        raise LlamaCppError(f"{folder} is not a llama.cpp build of scripts/build_llamacpp.sh: {HOW}")
    built = version_file.read_text().strip()
    if built != VERSION:
        raise LlamaCppError(f"{folder} holds llama.cpp {built}; specbench runs {VERSION}: {HOW}")
    for needed in (
        folder / "bin" / PROGRAM,
        folder / "bin" / AR_PROGRAM,
        folder / "src" / "convert_hf_to_gguf.py",
    ):
        if not needed.exists():
            raise LlamaCppError(f"{folder} lacks {needed.relative_to(folder)}: {HOW}")
    return folder


def convert(build: Path, model_dir: str, out: Path, outtype: str) -> Path:
    """model_dir converted to GGUF at `out` by llama.cpp's convert_hf_to_gguf.py (outtype f32 or
    q8_0); LlamaCppError with its last line where it fails."""
    command = [sys.executable, str(build / "src" / "convert_hf_to_gguf.py"), model_dir]
    command += ["--outtype", outtype, "--outfile", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)  # it puts its own gguf-py on its path
    if done.returncode != 0 or not out.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LlamaCppError(f"llamacpp could not convert {model_dir} to GGUF {outtype}: {last}")
    return out


def threads() -> int:
    """The cores this process may run on: what specbench's XLA uses, given to llama.cpp too."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LlamaCppPeer:
    """llama.cpp's speculative-simple on GGUF copies of the pair; autoregressive() and
    speculative() return (token ids, None, seconds) as the other peers' do."""

    name = "llamacpp"
    pid = None  # no process lives between calls: each call runs the program once

    def __init__(self, build: Path, dirs: tuple[str, str], outtypes: tuple[str, str], text):
        """dirs, outtypes: the draft's and the target's folders and GGUF types; text: (encode,
        decode) of the pair's tokenizer."""
        self.build, (self.encode, self.decode) = build, text
        self.scratch = Path(tempfile.mkdtemp(prefix="specbench-llamacpp-"))
        atexit.register(self.close)  # the GGUF copies go with the run, as the other peers' scratch
        try:
            self.draft, self.target = (
                convert(build, d, self.scratch / f"{role}-{t}.gguf", t)
                for d, t, role in zip(dirs, outtypes, ("draft", "target"))
            )
        except LlamaCppError:
            self.close()
            raise
        self.threads = threads()
        self.version = (
            f"{VERSION} ({'/'.join(outtypes)} draft/target, f32 KV cache, {self.threads} threads, "
            "p-min 0, n-min 0, full-vocabulary draft head)"
        )

    def _run(self, command: list[str], program: str) -> subprocess.CompletedProcess:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            raise LlamaCppError(f"llamacpp failed ({program}): {last}")
        return done

    def autoregressive(self, prompt, n_tokens, warp, seed):
        command = [str(self.build / "bin" / AR_PROGRAM), str(self.target), str(self.threads), str(n_tokens)]
        done = self._run(command + [str(int(t)) for t in prompt], AR_PROGRAM)
        ids, *timers = done.stdout.strip().splitlines()
        us = {name: int(value) for name, value in (line.split() for line in timers)}
        return [int(t) for t in ids.split()], None, (us["prompt_us"] + us["decode_us"]) / 1e6

    def speculative(self, prompt, n_tokens, K, warp, seed):
        prompt_text = self.decode(list(prompt))
        (self.scratch / "prompt.txt").write_text(prompt_text)
        command = [
            str(self.build / "bin" / PROGRAM),
            "-m",
            str(self.target),
            "-f",
            str(self.scratch / "prompt.txt"),
        ]
        command += [
            "-n",
            str(n_tokens),
            "--temp",
            "0",
            "--seed",
            str(seed),
            "-c",
            str(len(prompt) + n_tokens + 64),
        ]
        command += ["-t", str(self.threads), "-ctk", "f32", "-ctv", "f32", "--spec-type", "draft-simple"]
        command += ["-md", str(self.draft), "-td", str(self.threads), "-ctkd", "f32", "-ctvd", "f32"]
        command += ["--spec-draft-n-max", str(K), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
        done = self._run(command, PROGRAM)
        timers = {m[0]: (int(m[1]), float(m[2])) for m in TIMERS.findall(done.stderr + done.stdout)}
        if set(timers) != {"encoded", "decoded"}:
            raise LlamaCppError(f"llamacpp's {PROGRAM} printed no timers")
        out = done.stdout.strip("\n")
        generated = out[len(prompt_text) :] if out.startswith(prompt_text) else out
        n_decoded, decoded_s = timers["decoded"]
        seconds = timers["encoded"][1] + decoded_s * n_tokens / max(n_decoded, 1)
        return self.encode(generated)[:n_tokens], None, seconds

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def peer(drafting, target, t5: bool, dynamic: bool, temperatures, start: bool) -> LlamaCppPeer | None:
    """The llamacpp peer for this pair (peers.make_peers; `t5`: the pair is an encoder-decoder, as
    the family record says there), checked for these settings (LlamaCppError otherwise) and,
    unless a dry run (start False: None), its models converted."""
    if any(temperatures):
        raise LlamaCppError("llamacpp runs T = 0 only (measure/llamacpp.py says why): use --temperature 0")
    if dynamic:
        raise LlamaCppError("llamacpp runs a constant K here; leave out --dynamic-K")
    if t5:
        raise LlamaCppError("llamacpp runs decoder-only pairs (GPT-2, the Llama family), not a T5")
    folders = tuple(m.source for m in (drafting, target))
    if not all(hf_layout.is_model_dir(Path(f)) for f in folders):
        raise LlamaCppError("llamacpp converts the models' folders: random weights or layer-skip have none")
    build = build_folder(None)
    if not start:
        return None
    gguf = {"q8_0": "q8_0", "bfloat16": "bf16"}  # each model's weights as the converter names them
    outtypes = tuple(gguf.get(quantized.format_of(m.params), "f32") for m in (drafting, target))
    text = tokenizer.for_model(target)
    return LlamaCppPeer(build, folders, outtypes, (text.encode, text.decode))
