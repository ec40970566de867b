#!/usr/bin/env bash
# Measurements on a lent GPU machine (the workplace's device tool runs this in a copy of the
# checkout, with the image's own Python, JAX and torch; nothing is installed). Usage:
#   bash scripts/gpu_session.sh STAGE...   stages: env loops verdict run roofline report-bundled report-pair peer tests
# Every stage has its own time limit, writes its log and files under $OUT, and a failed stage
# does not stop the next.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
sb="python3 -m specbench"
stage() {  # stage NAME SECONDS COMMAND...: run it under a limit, log it, note its exit status
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/stages.txt"
    tail -n 40 "$OUT/$name.log"
}
for s in "$@"; do
    case $s in
    env)
        stage env 60 bash -c 'nvidia-smi; python3 -c "import jax, jaxlib, torch; print(jax.__version__, jaxlib.__version__, jax.devices(), torch.__version__, torch.cuda.is_available())"'
        ;;
    loops)  # what an iteration of each kind of device loop costs (docs/gpu.md)
        stage loops 120 python3 scripts/loop_cost.py
        ;;
    verdict)  # the T = 1 verdict over all rows (2967239) against the lazy one; needs, made here
        # beforehand and carried: git show 2967239:specbench/model/sampling.py > .gpu/sampling-2967239.py
        stage verdict 240 python3 scripts/verdict_ab.py --repeats 8 --before .gpu/sampling-2967239.py
        ;;
    run)
        stage run-bundled-f32 150 $sb run --K 4 -t 0 --repeats 10 --no-save --export-json "$OUT/run-bundled-f32-T0.json"
        ;;
    roofline)
        stage roofline "${ROOF_LIMIT:-240}" $sb roofline -m 124M -m 1558M --random-init --dtype bfloat16,float32 --K 4 \
            --export-json "$OUT/roofline-124M-1558M.json"
        ;;
    report-bundled)
        stage report-bundled "${REPORT_LIMIT:-300}" $sb report --quick -o /tmp/report-bundled ${REPORT_ARGS:-}
        tar -czf "$OUT/report-bundled.tgz" -C /tmp report-bundled
        ;;
    report-pair)
        stage report-pair "${REPORT_LIMIT:-300}" $sb report --quick --dtype bfloat16 \
            --draft random-124M --target random-1558M -o /tmp/report-pair ${REPORT_ARGS:-}
        tar -czf "$OUT/report-pair.tgz" -C /tmp report-pair
        ;;
    peer)
        stage run-peer 150 $sb run --K 4 -t 0 --repeats 5 --no-save --peer transformers \
            --export-json "$OUT/run-bundled-f32-T0-peer.json"
        ;;
    tests)  # the exactness tests on this device: XLA's default flags, the GPU backend
        stage tests "${TESTS_LIMIT:-240}" env JAX_PLATFORMS=cuda XLA_FLAGS= XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -q ${TESTS_X--x} -n ${TESTS_WORKERS:-8} \
            -p no:cacheprovider ${TESTS:-tests/test_gpt2.py tests/test_decoding.py tests/test_verify.py tests/test_batch.py}
        ;;
    *) echo "unknown stage $s" ;;
    esac
done
cat "$OUT/stages.txt"
