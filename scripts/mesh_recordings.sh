#!/usr/bin/env bash
# The mesh recordings of docs/mesh.md, on 4 host devices of this CPU (idle machine, nothing else
# running): the roofline of random 124M on one device and split 2 and 4 ways; the dial (a = 0.8)
# on the same three; the bundled pair with its draft replicated, on one device of the mesh, on a
# device of its own, and on one device. Writes into results/recorded/mesh/.
set -euo pipefail
cd "$(dirname "$0")/.."
export XLA_FLAGS=--xla_force_host_platform_device_count=4
out=results/recorded/mesh
what=${1:-all}
if [[ $what == all || $what == roofline ]]; then
    specbench roofline -m gpt2 --random-init --kernels xla --export-json $out/cpu-roofline-124M-one-device.json
    for tp in 2 4; do
        specbench roofline -m gpt2 --random-init --mesh tp=$tp --export-json $out/cpu-roofline-124M-tp$tp.json
    done
fi
if [[ $what == all || $what == dial ]]; then
    dial=(--target random-124M --drafter dial --acceptance 0.8 --kernels xla --K 4 --repeats 3 --no-save)
    specbench run "${dial[@]}" --export-json $out/cpu-dial-124M-a0.8-one-device.json
    for tp in 2 4; do
        specbench run "${dial[@]}" --mesh tp=$tp --export-json $out/cpu-dial-124M-a0.8-tp$tp.json
    done
fi
if [[ $what == all || $what == placed ]]; then
    pair=(--kernels xla --K 4 --repeats 5 --no-save)
    specbench run "${pair[@]}" --export-json $out/cpu-bundled-one-device.json
    specbench run "${pair[@]}" --draft-device 1 --export-json $out/cpu-bundled-draft-on-1.json
    specbench run "${pair[@]}" --mesh tp=2 --export-json $out/cpu-bundled-tp2-replicated.json
    specbench run "${pair[@]}" --mesh tp=2 --draft-device 1 --export-json $out/cpu-bundled-tp2-draft-on-1.json
    specbench run "${pair[@]}" --mesh tp=2 --draft-device 2 --export-json $out/cpu-bundled-tp2-draft-on-2.json
fi
