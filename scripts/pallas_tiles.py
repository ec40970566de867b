"""Each fused Pallas kernel of one GPT-2 layer (pallas.py) timed alone under several tilings
(pallas_tiles.Tiles), against the memory bound: which tiling the kernels should default to on
this GPU. Eight layers of the model's width with random weights (roofline.kernel_parts runs
each kernel over them in turn, so no call reads weights the cache holds), so even 1558M's fits
in seconds:

    python scripts/pallas_tiles.py                          # 1558M's width, bfloat16, 1 and 5 tokens
    python scripts/pallas_tiles.py --width 768 --heads 12   # 124M's
    python scripts/pallas_tiles.py --width 64 --heads 4 --tiles 128,64,4,3   # a try on the CPU (interpreted)

Prints, per tiling, each kernel's GB/s and its time over the bound, and the layer's total time;
--export-json writes every row (roofline.kernel_parts's, with the tiling).
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp
import numpy as np

from specbench.measure import device, roofline
from specbench.model.kernels import pallas_tiles
from specbench.model.nets import gpt2, layouts
from specbench.model.nets.network import Model

SWEEP = [  # chunk, programs, warps, stages
    (128, 64, 4, 3),
    (256, 64, 4, 3),
    (512, 64, 8, 3),
    (128, 128, 4, 4),
    (256, 128, 8, 4),
    (64, 256, 4, 4),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--heads", type=int, default=25)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--layers", type=int, default=roofline.LAYERS_A_TURN)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument(
        "--tiles", action="append", help="chunk,programs,warps,stages (repeatable); default: a sweep"
    )
    ap.add_argument("--export-json")
    args = ap.parse_args()
    config = gpt2.GPT2Config(n_layer=args.layers, n_head=args.heads, n_embd=args.width)
    params = gpt2.init_params(config, dtype=jnp.dtype(args.dtype))
    model = Model(
        f"{args.layers} layers of width {args.width}", config, layouts.pallas_layout(params), "random"
    )
    bound = device.peak_gbps() or roofline.read_gbps().best
    sweep = [tuple(int(v) for v in t.split(",")) for t in args.tiles] if args.tiles else SWEEP
    print(f"{model.name}, {args.dtype}, cache {args.context}, memory bound {bound:.0f} GB/s")
    rows = []
    for t in sweep:
        pallas_tiles.TILES = pallas_tiles.Tiles(*t)
        try:
            parts = roofline.kernel_parts(model, args.context, args.iters, bound)
        except Exception as e:  # noqa: BLE001 -- a tiling this GPU cannot take: say so, try the next
            print(f"tiles {t}: failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            continue
        for n in (1, 5):
            mine = [r for r in parts if r["n_tokens_per_step"] == n]
            cells = "  ".join(
                f"{r['part']} {r['achieved_gbps']:.0f} GB/s ({r['t_over_limit']:.1f}x)" for r in mine
            )
            total = sum(r["t_step_s"] for r in mine)
            print(f"tiles {t}, {n} tokens: a layer's kernels {total * 1e6:.1f} us  {cells}")
        rows += [r | {"tiles": list(t)} for r in parts]
    if args.export_json:
        with open(args.export_json, "w") as f:
            json.dump(rows, f, indent=1, default=lambda x: float(np.asarray(x)))


if __name__ == "__main__":
    main()
