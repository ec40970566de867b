"""docs/cpu.md's table from scripts/cpu_int8_suite.sh's files: for each pair and weight format,
specbench's and llama.cpp's AR and SD per token, their speedups, and what int8 does to specbench's
t_target, c = t_draft / t_target, the 5-token verify over the 1-token step, and α.

    python scripts/cpu_int8_table.py results/recorded/cpu
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def main(folder: str) -> None:
    root = Path(folder)
    print("| pair | weights | specbench AR | SD | speedup | llama.cpp AR | SD | speedup "
          "| SD ÷ specbench's | t_target | c | t_verify(5) ÷ t_target | α | tokens |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pair in ("bundled", "124M"):
        for dtype in ("float32", "int8"):
            found = sorted(root.glob(f"cpu-run-{pair}-{dtype}-llamacpp.json*"))
            if not found:
                continue
            ours, peer = rows(found[0])
            N = ours["n_tokens"]
            ms = lambda s: f"{1e3 * s / N:.2f} ms"  # per token
            print(
                f"| {pair} | {ours['target_weights']}/{ours['draft_weights']} "
                f"| {ms(ours['ar_mean_s'])} | {ms(ours['sd_mean_s'])} | {ours['speedup']:.2f} "
                f"| {ms(peer['ar_mean_s'])} | {ms(peer['sd_mean_s'])} | {peer['speedup']:.2f} "
                f"| {peer['sd_over_specbench']:.2f} | {1e3 * ours['t_target_s']:.2f} ms "
                f"| {ours['t_draft_s'] / ours['t_target_s']:.3f} "
                f"| {ours['t_verify_s'] / ours['t_target_s']:.2f} "
                f"| {ours['alpha']:.3f} | {'same' if peer['same_as_specbench'] else 'differ'} |"
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/recorded/cpu")
