#!/usr/bin/env python
"""The host loop's cost: the same queue (the 16 built-in prompts, B = 4, N = 32, K = 4, T = 0) served
by the device loop (refill.py) and by the open loop with every request there at 0, alternated."""

import time, numpy as np
from specbench.cli.commands.loading import load_pair
from specbench import prompts as P
from specbench.model.checkpoints import tokenizer
from specbench.measure.prepared import RunConfig, Prepared
from specbench.model.decode import drafters

d, t = load_pair(None, None, "float32")
tok = tokenizer.for_model(t)
ids = [tok.encode(x) for x in P.all_prompts().values()][:16]
for method in ("ar", "sd"):
    c = RunConfig(d, t, drafters.model_drafter(d.config), 4, n_tokens=32, slots=4)
    prep = Prepared.make(c, ids)
    zeros = np.zeros(len(ids))
    prep.serve(method)
    prep.serve_open(method, zeros)
    dev, host = [], []
    for i in range(7):
        t0 = time.perf_counter()
        prep.serve(method)
        dev.append(time.perf_counter() - t0)
        _, s = prep.serve_open(method, zeros)
        host.append(s)
    print(
        method,
        "device loop %.1f ms, host loop %.1f ms, ratio %.3f"
        % (1e3 * np.median(dev), 1e3 * np.median(host), np.median(host) / np.median(dev)),
    )
