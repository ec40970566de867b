"""Time the 1-token and 5-token decode steps of GPT-2 shapes (random weights) with and without
gpt2.decode_layout, each twice, alternated, and write the medians and the measured read bandwidth
to a JSON file. The README's decode-layout table comes from

    python scripts/decode_layouts.py OUT.json 355M 774M 1558M 124M
"""

import gc
import json
import sys

import numpy as np

from specbench.measure import roofline, step_costs, timing
from specbench.model.checkpoints import weights
from specbench.model.nets.gpt2 import decode_layout, init_params


def main(out_path: str, names: list[str]) -> None:
    out = {"gbps_start": roofline.read_gbps().best}
    for name in names:
        spec = weights.REGISTRY[name]
        params = init_params(spec.config, 0)
        models = {
            "hf": weights.Model(name, spec.config, params, "random"),
            "pieces": weights.Model(name, spec.config, decode_layout(params), "random"),
        }
        iters = 10 if spec.config.n_embd <= 1024 else 5
        for order in (("pieces", "hf"), ("hf", "pieces")):
            for layout in order:
                for n in (1, 5):
                    t = float(np.median(timing.step_seconds(models[layout], n, 256, iters=iters, repeats=3)))
                    out.setdefault(f"{name}-{layout}-{n}", []).append(t)
                    print(name, layout, n, f"{t * 1e3:.1f} ms", flush=True)
        out[f"{name}-bytes"] = step_costs.step_bytes(models["hf"], 256)
        del models, params
        gc.collect()
    out["gbps_end"] = roofline.read_gbps().best
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
