#!/usr/bin/env bash
# The one-pass drafter (PARD) beside the chained draft it was adapted from, on the bundled target:
# six built-in prompts, K = 2, 4, 6, 8, T = 0 and 1, then the table of docs/drafters.md. Train the
# PARD draft first (about 25 min on a 2-core CPU):
#
#     python -m specbench.train pard --out gpt2_weights/tiny-draft-pard --steps 1200 --batch 8 \
#         --ctx 256 --anchors 32 --K 8 --lr 1e-3 --warmup 100
#     bash scripts/pard_suite.sh [OUT_DIR]       # default results/recorded/drafters
#
# Resumable: each sweep keeps its rows as they finish (--resume). Take it on an idle machine.
set -euo pipefail
out="${1:-results/recorded/drafters}"
mkdir -p "$out"
prompts=narrative-1,dialogue-1,fairy-1,description-1,list-1,quote-1
run() {  # a sweep into $out/$1, resumed where it stopped
    local file="$out/$1"
    shift
    python -m specbench sweep --prompts "$prompts" --K 2,4,6,8 -t 0,1 --repeats 2 "$@" --output "$file" \
        $([ -f "$file" ] && echo --resume)
}
run cpu-sweep-pard-chain.json --drafter model
run cpu-sweep-pard-one-pass.json --drafter pard --draft tiny-draft-pard
python scripts/pard_table.py "$out"/cpu-sweep-pard-*.json | tee "$out/pard-table.md"
