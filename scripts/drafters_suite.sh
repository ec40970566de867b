#!/usr/bin/env bash
# Every drafter over the 16 built-in prompts at T = 0 and T = 1 on the bundled pair, each as a
# chain of K = 4 and (those that propose trees) as the tree 2,2,1,1 of depth 4 (15 verify rows)
# and the dynamic tree dynamic:4,3,14 (15 verify rows), then the table of docs/drafters.md:
#
#     bash scripts/drafters_suite.sh [OUT_DIR]       # default results/recorded/drafters
#
# Resumable: each sweep keeps its rows as they finish (--resume). Take it on an idle machine.
set -euo pipefail
out="${1:-results/recorded/drafters}"
mkdir -p "$out"
run() {  # a sweep into $out/$1, resumed where it stopped
    local file="$out/$1"
    shift
    python -m specbench sweep --prompts all -t 0,1 --repeats 2 "$@" --output "$file" \
        $([ -f "$file" ] && echo --resume)
}
run cpu-sweep-drafters-chains.json --drafter model,layerskip,lookup,eagle --K 4
run cpu-sweep-drafters-trees.json --drafter model,layerskip,eagle --tree 2,2,1,1
run cpu-sweep-drafters-dynamic.json --drafter model,eagle --tree dynamic:4,3,14
python scripts/drafters_table.py "$out"/cpu-sweep-drafters-*.json | tee "$out/table.md"
