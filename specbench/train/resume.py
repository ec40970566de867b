"""A training run's state on disk: one .npz a checkpoint, written atomically (a tmp file, then
os.replace), so a kill mid-write leaves the previous checkpoint whole; resumed exactly (the same
batches and parameters as an unbroken run)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench.errors import TrainError


def save_checkpoint(path: Path, step: int, params, opt_state, rng: np.random.Generator, extra: dict) -> None:
    """Parameters, optimizer state, step, the data RNG's state and the history, in one file."""
    leaves = jax.tree_util.tree_leaves((params, opt_state))
    meta = {"step": step, "rng": rng.bit_generator.state, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(
            f,
            meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
            **{f"leaf{i:05d}": np.asarray(leaf) for i, leaf in enumerate(leaves)},
        )
    os.replace(tmp, path)


def load_checkpoint(path: Path, params, opt_state):
    """(params, opt_state, meta) from a checkpoint, shaped like the given fresh ones."""
    with np.load(path) as z:
        meta = json.loads(z["meta"].tobytes().decode())
        leaves = [z[f"leaf{i:05d}"] for i in range(len(z.files) - 1)]
    treedef = jax.tree_util.tree_structure((params, opt_state))
    if treedef.num_leaves != len(leaves):
        raise TrainError(f"{path} does not match this model and optimizer", "resume")
    params, opt_state = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(x) for x in leaves])
    return params, opt_state, meta


def restore(checkpoint: Path | None, params, opt_state, rng: np.random.Generator, settings: dict, log):
    """(params, opt_state, history, first step, seconds before): from `checkpoint` when it exists
    and was written with the same settings (the data RNG restored too), else the fresh state."""
    if checkpoint is None:
        return params, opt_state, [], 1, 0.0
    if not checkpoint.exists():
        log(f"--resume: no checkpoint at {checkpoint} yet; starting afresh")
        return params, opt_state, [], 1, 0.0
    params, opt_state, meta = load_checkpoint(checkpoint, params, opt_state)
    if {k: meta[k] for k in settings} != settings:
        raise TrainError(
            f"{checkpoint} was written with other settings; start afresh without --resume, "
            "or pass the same settings",
            "resume",
        )
    rng.bit_generator.state = meta["rng"]
    log(f"resumed from {checkpoint} at step {meta['step']}")
    return params, opt_state, meta["history"], meta["step"] + 1, meta["elapsed"]


@dataclasses.dataclass
class Checkpoints:
    """Where and how often a training run saves its state (save_checkpoint), and whom it tells."""

    path: Path | None
    every: float  # seconds between checkpoints
    settings: dict
    elapsed_before: float  # seconds the run had trained before it was resumed
    on_checkpoint: object = None  # on_checkpoint(step), told of every checkpoint written
    started: float = dataclasses.field(default_factory=time.perf_counter)
    last: float = dataclasses.field(default_factory=time.perf_counter)

    def save(self, i: int, params, opt_state, rng, history: list, due: bool = False) -> None:
        """Step i's state, now (or, with `due`, only once `every` seconds have passed since the last)."""
        now = time.perf_counter()
        if self.path is None or (due and now - self.last < self.every):
            return
        elapsed = self.elapsed_before + now - self.started
        save_checkpoint(
            self.path, i, params, opt_state, rng, {**self.settings, "history": history, "elapsed": elapsed}
        )
        self.last = time.perf_counter()
        if self.on_checkpoint:
            self.on_checkpoint(i)
