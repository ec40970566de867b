#!/usr/bin/env bash
# The drafters of 2026 beside the chained draft, on the bundled pair: the draft model (a chain of K
# steps), the EAGLE head (tiny-target-eagle), the MTP layer (tiny-target-mtp, DeepSeek's layout) and
# the PARD draft (tiny-draft-pard, one pass), over all 16 built-in prompts, K = 2, 4, 8, T = 0 and 1;
# then the PARD draft's and the target's step curves t(n), n = 1..16, and `specbench predict` for
# each PARD row against its run's steady state; then the tables of docs/drafters.md. The PARD draft
# is not bundled: train it first (about 25 min on a 2-core CPU):
#
#     python -m specbench.train pard --out gpt2_weights/tiny-draft-pard --steps 1200 --batch 8 \
#         --ctx 256 --anchors 32 --K 8 --lr 1e-3 --warmup 100
#     bash scripts/drafters_2026_suite.sh [OUT_DIR]       # default results/recorded/drafters
#
# Resumable (the sweep keeps its rows as they finish: --resume). Take it on an idle machine.
set -euo pipefail
out="${1:-results/recorded/drafters}"
mkdir -p "$out"
sweep="$out/cpu-sweep-drafters-2026.json"
python -m specbench sweep --drafter model,eagle,mtp,pard --K 2,4,8 -t 0,1 --prompts all \
    --output "$sweep" $([ -f "$sweep" ] && echo --resume)
roof="$out/cpu-roofline-tiny-target-pard-K15.json"  # t(n), n = 1..16, of the target and the PARD draft
[ -f "$roof" ] || python -m specbench roofline -m tiny-target -m tiny-draft-pard --K 15 --export-json "$roof"
python scripts/pard_table.py "$sweep" | tee "$out/drafters-2026-table.md"
python scripts/pard_predict.py "$sweep" "$roof" | tee "$out/pard-predict-table.md"
