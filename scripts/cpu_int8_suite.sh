#!/usr/bin/env bash
# docs/cpu.md's table: specbench and llama.cpp side by side (AR, SD, speedup) at float32 and int8
# (Q8_0), on the bundled pair and on a 124M-shaped pair of random weights, K = 4, N = 40, T = 0,
# the draft's head over the full vocabulary on both sides. Build llama.cpp first:
#
#     bash scripts/build_llamacpp.sh DIR
#     bash scripts/cpu_int8_suite.sh DIR [OUT_DIR]     # default results/recorded/cpu
#
# The 124M pair (random-124M over random-draft, the registry's shapes) is saved once, with the
# bundled tokenizer's files, to a scratch folder, since llama.cpp converts folders. Take it on an
# idle machine; each run alternates specbench and llama.cpp within every repeat.
set -euo pipefail
build="$1"
out="${2:-results/recorded/cpu}"
mkdir -p "$out"
pair124="${TMPDIR:-/tmp}/specbench-124M-pair"
if [[ ! -d "$pair124/target" ]]; then
  python - "$pair124" <<'PY'
import shutil, sys
from pathlib import Path
from specbench.model.checkpoints import hf_layout, weights
root = Path(sys.argv[1])
for role, name in (("target", "random-124M"), ("draft", "random-draft")):
    model = weights.load_model(name, decoding=False)
    hf_layout.save(root / role, model.params, model.config)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(Path("gpt2_weights/tiny-target") / f, root / role / f)
PY
fi
common=(--peer llamacpp --llamacpp "$build" --K 4 -n 40 -t 0 --draft-vocab full --no-save)
for dtype in float32 int8; do
  python -m specbench run "${common[@]}" --dtype "$dtype" --repeats 10 --export-json "$out/cpu-run-bundled-$dtype-llamacpp.json"
  python -m specbench run "${common[@]}" --dtype "$dtype" --repeats 5 --target "$pair124/target" \
    --draft "$pair124/draft" --export-json "$out/cpu-run-124M-$dtype-llamacpp.json"
done
python -m specbench run --K 4 -n 40 -t 0 --draft-vocab full --no-save --repeats 10 --target-dtype int8 \
  --export-json "$out/cpu-run-bundled-int8-target-only.json"
python -m specbench roofline -m tiny-target -m tiny-draft --dtype float32,int8 --K 4 --export-json "$out/cpu-roofline-bundled-int8.json"
python -m specbench roofline -m random-124M --dtype float32,int8 --K 4 --export-json "$out/cpu-roofline-124M-int8.json"
xz -9f "$out"/*.json  # recorded runs are kept compressed (scripts/cpu_int8_table.py reads them)
