#!/usr/bin/env bash
# Measurements on a lent GPU machine (the workplace's device tool runs this in a copy of the
# checkout, with the image's own Python, JAX and torch; nothing is installed). Usage:
#   bash scripts/gpu_session.sh STAGE...   stages: env pallas-check loops sampler verdict run run-xla-kernels run-xla-loops
#                                          dial batch roofline-kernels pallas-tiles roofline-bf16 roofline drafters profile
#                                          report-bundled report-pair peer tests
#                                          mosaic-check roofline-mosaic mosaic-tests draft-curve
#   bash scripts/gpu_session.sh all        issue 74's measuring, the most wanted first, in one call of 10 minutes
# Every stage has its own time limit, writes its log and files under a work folder, and a failed
# stage does not stop the next. After each stage the folder is packed into $OUT/gpu-session.tgz
# (the device tool brings back at most 8 files, and whatever is there when a call is cut off):
# unpack it into results/recorded/gpu-<card>/ afterwards.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
BACK=${OUT:-/tmp/gpu-out}  # what comes back: the archive and the stages' list
OUT=$(mktemp -d /tmp/gpu-session.XXXX)  # where the stages write
mkdir -p "$BACK"
sb="python3 -m specbench"
stage() {  # stage NAME SECONDS COMMAND...: run it under a limit, log it, note its exit status
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/stages.txt"
    tail -n 40 "$OUT/$name.log"
    tar -czf "$BACK/gpu-session.tgz" -C "$OUT" . && cp "$OUT/stages.txt" "$BACK/"
}
stages=("$@")
# the most wanted first: a stage the call's limit cuts off is the one least needed
[ "${stages[0]:-}" = all ] && stages=(env pallas-check mosaic-check roofline-1558M roofline-mosaic mosaic-tests tests run profile roofline-kernels draft-curve loops verdict dial batch run-xla-kernels run-xla-loops pallas-tiles)
for s in "${stages[@]}"; do
    case $s in
    env)
        stage env 60 bash -c 'nvidia-smi; python3 -c "import jax, jaxlib, torch; print(jax.__version__, jaxlib.__version__, jax.devices(), torch.__version__, torch.cuda.is_available())"'
        ;;
    pallas-check)  # whether the fused Pallas kernels run here (--kernels auto takes them if so), and why not
        stage pallas-check 120 python3 -c "from specbench.model.kernels import pallas as g; print('unavailable:', g.unavailable())"
        ;;
    mosaic-check)  # the Mosaic swap-AB products (kernels/mosaic.py) compiled for this card against plain JAX, bf16
        stage mosaic-check 120 python3 scripts/mosaic_check.py
        ;;
    roofline-mosaic)  # 124M and 1558M bf16 steps with the Mosaic products (Triton's attention), each kernel alone:
        # beside roofline-1558M's and roofline-kernels' Triton and XLA rows
        stage roofline-mosaic "${ROOF_LIMIT:-200}" env SPECBENCH_PALLAS_BACKEND=mosaic $sb roofline -m 124M -m 1558M \
            --random-init --dtype bfloat16 --K 4 --kernels pallas --export-json "$OUT/roofline-124M-1558M-bf16-mosaic.json"
        ;;
    mosaic-tests)  # both backends against the oracle on the card: the Triton kernels' tests and the Mosaic ones
        stage mosaic-tests "${TESTS_LIMIT:-180}" env JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -v -rf \
            -n ${TESTS_WORKERS:-4} -p no:cacheprovider tests/test_mosaic_kernels.py tests/test_gpu_kernels.py
        ;;
    run-xla-kernels)  # the bundled pair with XLA's products, against run's (the Pallas kernels where they passed)
        stage run-xla-kernels-T0 75 $sb run --K 4 -t 0 --repeats 10 --no-save --kernels xla \
            --export-json "$OUT/run-bundled-f32-T0-xla-kernels.json"
        stage run-xla-kernels-T1 75 $sb run --K 4 -t 1 --repeats 10 --no-save --kernels xla \
            --export-json "$OUT/run-bundled-f32-T1-xla-kernels.json"
        ;;
    pallas-tiles)  # each fused kernel of one 1558M-wide and one 124M-wide layer under six tilings: the default to keep
        stage pallas-tiles-1558M 150 python3 scripts/pallas_tiles.py --export-json "$OUT/pallas-tiles-1558M-bf16.json"
        stage pallas-tiles-124M 100 python3 scripts/pallas_tiles.py --width 768 --heads 12 \
            --export-json "$OUT/pallas-tiles-124M-bf16.json"
        ;;
    roofline-kernels)  # 124M and 1558M bf16 steps with the Pallas kernels and with XLA's, each kernel alone too
        stage roofline-kernels "${ROOF_LIMIT:-240}" $sb roofline -m 124M -m 1558M --random-init --dtype bfloat16 --K 4 \
            --kernels pallas,xla --export-json "$OUT/roofline-124M-1558M-bf16-kernels.json"
        ;;
    profile)  # a run (20 AR tokens, about 5 rounds) under JAX's profiler, reduced per program to kernel time,
        # loop iterations and the idle after each (scripts/profile_run.py); the raw trace kept if small. T = 0
        # only by default: at T = 1 a step timer died under CUPTI on 2026-11-27 (PROFILE_TEMPERATURES="0 1")
        for t in ${PROFILE_TEMPERATURES:-0}; do
            stage "profile-T$t" 90 python3 scripts/profile_run.py --out "$OUT/profile-T$t" -- --K 4 -t $t -n 21
            find "$OUT/profile-T$t" -name '*.json.gz' -size +8M -delete
            find "$OUT/profile-T$t" -name '*.pb' -delete
        done
        ;;
    roofline-1558M)  # the 1558M bf16 step alone, Pallas against XLA, each kernel alone (never measured yet)
        stage roofline-1558M "${ROOF_LIMIT:-200}" $sb roofline -m 1558M --random-init --dtype bfloat16 --K 4 \
            --kernels pallas,xla --export-json "$OUT/roofline-1558M-bf16-kernels.json"
        ;;
    loops)  # what an iteration of each kind of device loop costs (docs/gpu.md)
        stage loops 120 python3 scripts/loop_cost.py
        ;;
    verdict)  # the T = 1 verdict of each kind (verify.KINDS): which one verify.kind_for should give a GPU
        stage verdict 150 python3 scripts/verdict_ab.py --repeats 8
        ;;
    run)  # the bundled pair as the tool runs by default here: all-rows verdict, command-buffer loops
        stage run-bundled-T0 75 $sb run --K 4 -t 0 --repeats 10 --no-save --export-json "$OUT/run-bundled-f32-T0.json"
        stage run-bundled-T1 75 $sb run --K 4 -t 1 --repeats 10 --no-save --export-json "$OUT/run-bundled-f32-T1.json"
        ;;
    sampler)  # T = 1 with the race sampler (a GPU's default, sampling.sampler_for) and with the CPU's CDF
        stage sampler-race 75 $sb run --K 4 -t 1 --repeats 10 --no-save --export-json "$OUT/run-bundled-f32-T1-race.json"
        stage sampler-cdf 75 env SPECBENCH_SAMPLER=cdf $sb run --K 4 -t 1 --repeats 10 --no-save \
            --export-json "$OUT/run-bundled-f32-T1-cdf.json"
        ;;
    run-xla-loops)  # the same with XLA's default loops (model/kernels/programs.py), for the comparison
        stage run-xla-loops-T0 75 env SPECBENCH_XLA_LOOPS=default $sb run --K 4 -t 0 --repeats 10 --no-save \
            --export-json "$OUT/run-bundled-f32-T0-xla-loops.json"
        stage run-xla-loops-T1 75 env SPECBENCH_XLA_LOOPS=default $sb run --K 4 -t 1 --repeats 10 --no-save \
            --export-json "$OUT/run-bundled-f32-T1-xla-loops.json"
        ;;
    drafters)  # the EAGLE head as a chain, a tree and a dynamic tree, T = 0 and 1: what trees buy where
        # a verify of 15 rows costs about one of 5 (issue 49)
        for shape in chain:--K=4 tree:--tree=2,2,1,1 dynamic:--tree=dynamic:4,3,14; do
            name="eagle-${shape%%:*}"
            stage "drafters-$name" 75 $sb sweep --drafter eagle ${shape#*:} -t 0,1 --repeats 5 \
                --prompts narrative-1,dialogue-1 -o "$OUT/sweep-$name.json"
        done
        ;;
    dial)  # random 1558M verifying the dial's drafts: speedup against an acceptance set exactly, bf16
        stage dial "${DIAL_LIMIT:-150}" $sb sweep --drafter dial --acceptance 0.5,1 --K 4 -t 0 --dtype bfloat16 \
            --target random-1558M --repeats 5 -o "$OUT/sweep-dial-1558M-bf16.json"
        ;;
    batch)  # distinct prompts (the suite cycled), then one prompt repeated (the upper bound)
        stage batch-mixed 90 $sb sweep --batch 1,2,4,8,16 --K 4 -t 0 --repeats 3 -o "$OUT/sweep-batch-mixed.json"
        stage batch-repeated 90 $sb sweep --batch 1,2,4,8,16 --K 4 -t 0 --repeats 3 --prompts narrative-1 \
            -o "$OUT/sweep-batch-repeated.json"
        ;;
    roofline-bf16)  # the decode step against the HBM bound, bfloat16 only (issue 48's figures)
        stage roofline-bf16 "${ROOF_LIMIT:-150}" $sb roofline -m 124M -m 1558M --random-init --dtype bfloat16 --K 4 \
            --export-json "$OUT/roofline-124M-1558M-bf16.json"
        ;;
    draft-curve)  # t_D(n), n = 1..9, of a 124M-shaped draft, bf16: what a one-pass drafter (PARD,
        # DFlash: draft_cost.py) spends drafting K tokens on the card, read by `predict --draft-cost
        # one-pass`; nearly flat in n while the step is memory-bound (issue 80, item 4)
        stage draft-curve "${ROOF_LIMIT:-120}" $sb roofline -m 124M --random-init --dtype bfloat16 --K 8 \
            --export-json "$OUT/roofline-124M-bf16-K8.json"
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
        stage tests "${TESTS_LIMIT:-240}" env JAX_PLATFORMS=cuda XLA_FLAGS= XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -v -rf ${TESTS_X--x} -n ${TESTS_WORKERS:-8} \
            -p no:cacheprovider ${TESTS:-tests/test_gpu_kernels.py tests/test_gpt2.py tests/test_decoding.py tests/test_verify.py tests/test_batch.py}
        ;;
    *) echo "unknown stage $s" ;;
    esac
done
tar -czf "$BACK/gpu-session.tgz" -C "$OUT" .
cat "$OUT/stages.txt"
