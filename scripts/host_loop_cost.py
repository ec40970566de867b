#!/usr/bin/env python
"""What the open loop's host costs (docs/batches.md, "Under load"): the same queue (the 16 built-in
prompts, B = 4, N = 32, K = 4, T = 0) served by the device loop (model/decode/refill.py) and by the
host-driven open loop (measure/serving.py) with every request there at 0, alternated, medians of 7.

    python scripts/host_loop_cost.py
"""

from __future__ import annotations

import time

import numpy as np

from specbench import prompts
from specbench.cli.commands.loading import load_pair
from specbench.measure.prepared import Prepared, RunConfig
from specbench.model.checkpoints import tokenizer
from specbench.model.decode import drafters


def main() -> None:
    draft, target = load_pair(None, None, "float32")
    encode = tokenizer.for_model(target).encode
    ids = [encode(text) for text in prompts.all_prompts().values()][:16]
    config = RunConfig(draft, target, drafters.model_drafter(draft.config), 4, n_tokens=32, slots=4)
    prep = Prepared.make(config, ids)
    everyone_at_0 = np.zeros(len(ids))
    for method in ("ar", "sd"):
        prep.serve(method), prep.serve_open(method, everyone_at_0)  # compiles
        device, host = [], []
        for _ in range(7):
            t0 = time.perf_counter()
            prep.serve(method)
            device.append(time.perf_counter() - t0)
            host.append(prep.serve_open(method, everyone_at_0)[1])
        d, h = np.median(device), np.median(host)
        print(f"{method}: device loop {d * 1e3:.1f} ms, host loop {h * 1e3:.1f} ms, ratio {h / d:.3f}")


if __name__ == "__main__":
    main()
