"""Time the decode steps of two versions of gpt2.py alternated in one process, so that the host's
drifting bandwidth falls on both alike: this checkout's `specbench.gpt2` against another file
(an older commit's, for instance), random weights in the decode layout, cache 256.

    git worktree add /tmp/before ccc21a5
    python scripts/compare_steps.py /tmp/before/specbench/gpt2.py OUT.json 124M 1x1 5x1 1x4

Each SHAPE is tokens-per-step x batch. Every round times both versions (the order flips each
round), median of 3 device loops per shape; the read bandwidth is measured at the start and end.
"""

import importlib.util
import json
import os
import sys

import jax
import numpy as np

from specbench.measure import roofline, step_costs, timing
from specbench.model.checkpoints import weights
from specbench.model.nets import gpt2, layouts


def load_other(path: str):
    spec = importlib.util.spec_from_file_location("gpt2_other", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpt2_other"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main(other_path: str, out_path: str, name: str, shapes: list[str], rounds: int = 3) -> None:
    other = load_other(other_path)
    versions = {
        v: {k: getattr(m, k) for k in ("step", "init_cache", "batch_layout")}
        for v, m in (("this", gpt2), ("other", other))
    }
    config = weights.REGISTRY[name].config
    model = weights.Model(name, config, layouts.decode_layout(gpt2.init_params(config, 0)), "random")
    steps = [tuple(int(n) for n in s.split("x")) for s in shapes]
    out = {
        "model": name,
        "other": other_path,
        "bytes_per_step": step_costs.step_bytes(model, 256),
        "gbps_start": roofline.read_gbps().best,
        "ms": {},
    }
    for r in range(rounds):
        for v in ("other", "this") if r % 2 == 0 else ("this", "other"):
            for k, f in versions[v].items():  # timing's loops call these by name
                setattr(timing, k, f)
            jax.clear_caches()
            for n, b in steps:
                iters = 5 if config.n_embd >= 1600 else 20 if n * b == 1 else 10
                t = float(np.median(timing.step_seconds(model, n, 256, iters=iters, repeats=3, batch=b)))
                out["ms"].setdefault(f"{v} {n}x{b}", []).append(round(t * 1e3, 2))
                print(r, v, f"{n}x{b}", f"{t * 1e3:.2f} ms", flush=True)
    out["gbps_end"] = roofline.read_gbps().best
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    for key, ms in out["ms"].items():
        print(key, "median", np.median(ms), "ms, all", ms)


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:], int(os.environ.get("ROUNDS", 3)))
