#!/usr/bin/env bash
# The bundled pair's recipe, as run on the project's 2-core CPU (README, "Bundled pair").
# Safe to rerun after a kill: each stage resumes from its checkpoint, and a finished stage is skipped.
#   scripts/train_pair.sh [DATA] [OUT]        (needs the `train` extra; DATA from `train prepare`)
set -euo pipefail
DATA=${1:-data}; OUT=${2:-gpt2_weights}
# tcmalloc, where installed (Debian: libtcmalloc-minimal4), made the CPU step 1.5x faster here:
# glibc returns each step's large buffers to the kernel and pays for the page faults again.
TC=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$TC" ] && export LD_PRELOAD="$TC"
COMMON="--data $DATA --n-ctx 512 --ctx 512 --batch 4 --seed 0 --head-vocab 16384 --head-extra 2048 --resume"
[ -e "$OUT/tiny-target/config.json" ] || python -m specbench.train target $COMMON --out "$OUT/tiny-target" \
    --n-layer 6 --n-embd 256 --n-head 4 --steps 1500 --warmup 100 --lr 2e-3
[ -e "$OUT/tiny-draft/config.json" ] || python -m specbench.train draft $COMMON --out "$OUT/tiny-draft" \
    --teacher "$OUT/tiny-target" --n-layer 2 --n-embd 64 --n-head 2 --steps 900 --warmup 100 --lr 3e-3 \
    --kd 0.7
