#!/usr/bin/env bash
# The bundled T5 pair's recipe, as run on the project's 2-core CPU (gpt2_weights/README.md).
# Safe to rerun after a kill: each stage resumes from its checkpoint, and a finished stage is skipped.
#   scripts/train_t5_pair.sh [CORPUS] [DATA] [OUT]      (needs the `train` extra)
set -euo pipefail
CORPUS=${1:-../shared/corpus}; DATA=${2:-data-t5}; OUT=${3:-gpt2_weights}
TC=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4  # as scripts/train_pair.sh says why
[ -e "$TC" ] && export LD_PRELOAD="$TC"
[ -e "$DATA/tokenizer.json" ] || python -m specbench.train t5-prepare --corpus "$CORPUS" --out "$DATA"
COMMON="--data $DATA --batch 64 --source 64 --target 32 --seed 0 --checkpoint-every 300 --resume"
[ -e "$OUT/tiny-t5-target/config.json" ] || python -m specbench.train t5-target $COMMON \
    --out "$OUT/tiny-t5-target" --steps 6000 --warmup 300
[ -e "$OUT/tiny-t5-draft/config.json" ] || python -m specbench.train t5-draft $COMMON \
    --out "$OUT/tiny-t5-draft" --teacher "$OUT/tiny-t5-target" --steps 2500 --warmup 200
