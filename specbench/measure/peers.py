"""Peers: other implementations of the same decoding, timed in the same run as specbench's own.

- `transformers`: Hugging Face's `AutoModelForCausalLM` (GPT-2's, Llama's, Qwen2's) on the same
  weights; AR is `generate`, SD its assisted generation (`assistant_model=`) with the same draft,
  a constant K and no confidence threshold (with --dynamic-K: transformers' own heuristic
  schedule and threshold).
- `numpy`: the papers' algorithm with no cache (reference.py).
- `warfield`: the seed's T5 system (Warfield), greedy draft-and-verify through transformers'
  `T5ForConditionalGeneration` with no cache: the whole decoder recomputed for every token. A T5
  pair (docs/encoder-decoders.md) has it and `transformers` (T5's `generate` and assisted
  generation); a GPT-2 pair has `transformers` and `numpy`.

Each peer runs in a process of its own that lives for the run (PeerProcess; peer_worker.py runs
the peer there). A peer's thread pools (OpenBLAS's, torch's OpenMP) keep spinning after a call
returns; inside specbench's process they slowed its next AR by up to 75% and inflated its speedup.
Apart, they cannot run in specbench's threads, and after each call specbench waits until the
worker's CPU time stops growing, so nothing of the peer runs while specbench times itself. Each
peer decodes one prompt; bench.py alternates it with specbench's AR and SD. Peers draft with a
network: the draft model, or the target's first layers (layer-skip) as a model of their own.
Prompt lookup has no peer here.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from specbench.draft_cost import DraftCost
from specbench.errors import SpecbenchError
from specbench.measure import peer_worker
from specbench.measure.load import process_cpu_seconds
from specbench.model.checkpoints import formats, hf_layout
from specbench.model.nets import layouts, network, quantized, reference
from specbench.model.nets.families import family_of
from specbench.model.nets.network import Model

NAMES = ("transformers", "numpy", "warfield", "llamacpp")
PEERS_EXTRA = peer_worker.PEERS_EXTRA
QUIET_TICKS = 3  # a worker whose CPU time (counted in clock ticks) grew by nothing for 3 ticks is idle
SETTLE_MAX_S = 2.0  # ...and one that never settles is waited for no longer than this


class PeerError(SpecbenchError):
    """A peer that cannot run these settings, or is not installed."""


@dataclasses.dataclass(frozen=True)
class PeerResult:
    name: str
    version: str
    ar_times_s: list[float]
    sd_times_s: list[float]
    ar_tokens: list[int]
    sd_tokens: list[int]
    accepted: list[int] | None  # drafts accepted each round, where the peer tells


def draft_model(drafter, draft: Model | None, target: Model) -> Model:
    """The network a peer drafts with: the draft model, or (layer-skip) the target's first
    drafter.config.n_layer blocks with its final norm and head, as a model of their own."""
    if drafter.kind.draft_cost is DraftCost.ONE_PASS:
        raise PeerError(
            f"peers draft chains; the {drafter.name} drafter drafts in one pass and has no peer", "peer"
        )
    if drafter.spec.draft_model:
        return draft
    if not drafter.spec.network or drafter.spec.features:
        raise PeerError(f"peers draft with a network; the {drafter.name} drafter has no peer", "peer")
    L = drafter.config.n_layer
    first = lambda node: {k: first(v) for k, v in node.items()} if isinstance(node, dict) else node[:L]
    params = layouts.as_loaded(target.params)
    params = {**params, "blocks": first(params["blocks"])}
    return Model(f"{target.name}[:{L}]", drafter.config, params, "random")


class PeerProcess:
    """A peer in a worker process of its own, living for the run (peer_worker.serve). Its
    autoregressive() and speculative() return (tokens, drafts accepted per round or None, seconds
    of the call timed in the worker), once the worker has gone idle."""

    def __init__(self, name: str, spec: dict, scratch: str | None = None):
        """scratch: a folder of weights saved for the worker, removed when it closes."""
        self._scratch = scratch
        # torch's compile caches: made here and removed at close(), after the worker has ended (a
        # worker killed on its way out, or torch writing at exit, would leave its own behind)
        self._caches = tempfile.mkdtemp(prefix="specbench-peer-caches-")
        spec = {**spec, "caches": self._caches}
        atexit.register(self.close)  # before multiprocessing ends the daemon worker at exit
        # a fresh interpreter, not a fork of this one and its XLA threads
        context = multiprocessing.get_context("spawn")
        self.name, self._conn = name, None
        self._conn, child = context.Pipe()
        self._process = context.Process(target=peer_worker.serve, args=(child, name, spec), daemon=True)
        # multiprocessing's resource tracker unblocks SIGINT and SIGTERM in this thread when it
        # starts; specbench's signal thread (__main__.py) needs them blocked here, so they are put back
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, []) if hasattr(signal, "pthread_sigmask") else None
        try:
            self._process.start()
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child.close()
        self.pid = self._process.pid
        status, self.version = self._receive()
        self.remove_scratch()  # the worker has read its weights (or failed): the copy can go now
        if status != "ready":
            self.close()
            raise PeerError(f"{name} could not start: {self.version}", "peer")

    def ended(self) -> str:
        self._process.join(timeout=1)
        return f"its worker process ended (exit code {self._process.exitcode})"

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return "error", self.ended()

    def _call(self, method: str, *args):
        try:
            self._conn.send((method, args))
        except OSError:  # a broken pipe: the worker died since its last call
            raise PeerError(f"{self.name} failed: {self.ended()}", "peer") from None
        reply = self._receive()
        if reply[0] != "ok":
            raise PeerError(f"{self.name} failed: {reply[1]}", "peer")
        self.settle()
        return tuple(reply[1:])

    def settle(self) -> None:
        """Wait until the worker's CPU time stops growing: its thread pools have gone to sleep.
        Without /proc, wait a fixed 0.2 s instead."""
        used, start = process_cpu_seconds(self.pid), time.perf_counter()
        if not Path(f"/proc/{self.pid}").exists():
            time.sleep(0.2)
            return
        quiet, tick = time.perf_counter(), 1 / os.sysconf("SC_CLK_TCK")  # /proc counts whole ticks
        while time.perf_counter() - start < SETTLE_MAX_S:
            time.sleep(tick / 4)
            now = process_cpu_seconds(self.pid)
            if now != used:
                used, quiet = now, time.perf_counter()
            elif time.perf_counter() - quiet >= QUIET_TICKS * tick:
                return

    def autoregressive(self, prompt, n_tokens, warp, seed):
        return self._call("autoregressive", list(map(int, prompt)), n_tokens, astuple(warp), seed)

    def speculative(self, prompt, n_tokens, K, warp, seed):
        return self._call("speculative", list(map(int, prompt)), n_tokens, K, astuple(warp), seed)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self.remove_scratch()
        shutil.rmtree(self._caches, ignore_errors=True)

    def remove_scratch(self) -> None:
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def astuple(warp) -> tuple:
    return warp.temperature, warp.top_k, warp.top_p


def hf_directory(model: Model, scratch: str) -> str:
    """A directory transformers can load `model` from: its own, or (random weights, a layer-skip
    draft) a copy saved in the HF layout under `scratch`."""
    if model.source != "random" and hf_layout.is_model_dir(Path(model.source)):
        return model.source
    formats.format_of(model.config).save(scratch, layouts.as_loaded(model.params), model.config)
    return scratch


def installed(*modules: str) -> bool:
    """Whether every module can be imported here, found without importing it."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


@dataclasses.dataclass(frozen=True)
class PlannedPeer:
    """A peer checked for these settings and not started (a dry run)."""

    name: str
    pid: None = None


def t5_spec(name: str, drafting: Model, target: Model, t5: bool, dynamic: bool, temperatures) -> dict:
    """A T5 peer's settings (warfield, or transformers on a T5 pair), checked: PeerError otherwise."""
    if name == "numpy":
        raise PeerError(
            "numpy runs the papers' GPT-2 algorithm: a T5 pair has warfield and transformers", "peer"
        )
    if not t5:
        raise PeerError("warfield is the seed's T5 system: it needs a T5 pair (--target, --draft)", "peer")
    if not installed("torch", "transformers"):
        raise PeerError(f"{name} needs the peers extra: {PEERS_EXTRA}", "peer")
    if name == "warfield" and any(temperatures):
        raise PeerError("warfield is the seed's greedy algorithm: use --temperature 0", "peer")
    if name == "warfield" and dynamic:
        raise PeerError("warfield runs the seed's constant K; leave out --dynamic-K", "peer")
    folders = [m.source for m in (drafting, target)]
    if not all(Path(f).is_dir() for f in folders):
        raise PeerError(
            f"{name} loads the T5s from their folders: name them with --target and --draft", "peer"
        )
    return {"draft_dir": folders[0], "target_dir": folders[1], "dynamic_K": dynamic, "t5": True}


def make_peers(
    names,
    drafter,
    draft: Model | None,
    target: Model,
    batch: int,
    on_gpu: bool,
    start: bool = True,
    temperatures=(0.0,),
) -> tuple:
    """The peers asked for, checked for these settings (PeerError otherwise), each started in its
    worker process; with start=False (a dry run) checked only, as PlannedPeers, and nothing written."""
    if not names:
        return ()
    if batch != 1:
        raise PeerError("peers decode one sequence at a time: use --batch 1", "peer")
    drafting = draft_model(drafter, draft, target)
    dynamic = drafter.confidence is not None
    dtype = str(network.dtype_of(target.params, target.config))
    t5 = family_of(target.config).encoder_decoder
    formats_ = [quantized.format_of(m.params) for m in (drafting, target) if family_of(m.config).kernels]
    specs, scratch, made = {}, {}, {}
    for name in names:
        if name == "llamacpp":
            from specbench.measure import llamacpp

            made[name] = llamacpp.peer(drafting, target, t5, dynamic, temperatures, start)
            continue
        if "q8_0" in formats_:
            raise PeerError(f"{name} has no Q8_0 weights: use --dtype float32, or --peer llamacpp", "peer")
        if name == "warfield" or t5:
            specs[name] = t5_spec(name, drafting, target, t5, dynamic, temperatures)
            specs[name] |= {"dtype": dtype, "on_gpu": on_gpu}
            continue
        if name == "numpy":
            specs[name] = numpy_spec(drafting, target, dynamic, dtype)
        else:
            if not installed("torch", "transformers"):
                raise PeerError(f"transformers needs the peers extra: {PEERS_EXTRA}", "peer")
            if not start:
                continue
            scratch[name] = tempfile.mkdtemp(prefix="specbench-peer-")  # random or layer-skip weights
            specs[name] = {
                "scratch": scratch[name],  # the worker removes it once read, even if this process has gone
                "draft_dir": hf_directory(drafting, f"{scratch[name]}/draft"),
                "target_dir": hf_directory(target, f"{scratch[name]}/target"),
                "dtype": dtype,
                "dynamic_K": dynamic,
                "on_gpu": on_gpu,
                "t5": False,
            }
    if not start:
        return tuple(PlannedPeer(name) for name in names)
    return tuple(made.get(name) or PeerProcess(name, specs[name], scratch.get(name)) for name in names)


def numpy_spec(drafting: Model, target: Model, dynamic: bool, dtype: str) -> dict:
    """The numpy peer's settings (NumPy copies of both models), checked: PeerError otherwise."""
    if not family_of(target.config).numpy_peer:
        kind = network.display_name(target.config)
        raise PeerError(f"numpy runs the papers' algorithm on GPT-2s; {target.name} is a {kind}", "peer")
    if dynamic:
        raise PeerError("numpy runs the papers' constant K; leave out --dynamic-K", "peer")
    if dtype != "float32":
        raise PeerError("numpy has no bfloat16: use --dtype float32", "peer")
    as_np = lambda m: (reference.as_numpy(layouts.as_loaded(m.params)), m.config)
    return {"draft": as_np(drafting), "target": as_np(target)}


def first_difference(ours: list[int], theirs: list[int]) -> int | None:
    """The first position where two token lists differ, or None."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def difference_note(
    target: Model, prompt: list[int], ours: list[int], theirs: list[int], who: str
) -> str | None:
    """Where `theirs` first leaves specbench's tokens at T = 0, with the target's logits of the two
    candidates there (a near tie that float rounding may flip), or None where they agree."""
    i = first_difference(ours, theirs)
    if i is None:
        return None
    if i >= min(len(ours), len(theirs)):
        return f"{who} gave {len(theirs)} tokens, specbench {len(ours)}"
    logits = np.asarray(network.last_logits(target.params, prompt, ours[:i], target.config))
    a, b = ours[i], theirs[i]
    return (
        f"{who} differs from token {i + 1}: specbench chose {a} (target logit {logits[a]:.5f}), "
        f"{who} chose {b} (target logit {logits[b]:.5f})"
    )
