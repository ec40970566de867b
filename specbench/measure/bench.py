"""One configuration measured: autoregressive against speculative decoding, and the step times
that explain the difference.

Rules (as in gpt-fast and hyperfine): the compile run is timed and reported on its own; every
call returns host token ids, so its time includes the device sync; tokenisation is the
caller's, outside the clock; AR and SD run alternately so that drift (thermal, other load) hits
both alike.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from specbench.measure import card, collectives, load, timing
from specbench.measure.peers import PeerResult
from specbench.measure.prepared import Prepared, RunConfig
from specbench.model.decode import placed, sampling, verify
from specbench.model.decode.stats import DecodeStats
from specbench.model.kernels import pallas_layers, programs
from specbench.model.nets import layouts, mesh, network

__all__ = ["BenchmarkResult", "PARTS", "Prepared", "RunConfig", "STEP_TIMERS", "run_benchmark"]


@dataclasses.dataclass
class BenchmarkResult:
    config: RunConfig
    ar_times_s: list[float]
    sd_times_s: list[float]
    ar_tokens: list  # [N], or [B][N] for a batch
    sd_tokens: list
    stats: DecodeStats
    t_draft_s: float  # medians of the step timers
    t_target_s: float
    t_verify_s: float
    t_round_s: float
    t_ar_token_s: float
    t_ar_start_s: float  # prefill and first token of AR, and of SD (target and drafter): one dispatch each
    t_sd_start_s: float
    t_overhead_err_s: float  # σ of t_round - K t_draft - t_verify, from the spread of each timing
    compile_s: float
    n_compiles: int  # programs made: compiled, or read from the persistent cache (compile_cache.py)
    n_cached: int = 0  # of them, read from the cache
    batch: int = 1  # sequences decoded together (a refilled queue's slots); times are then per batch
    queue: int | None = None  # a refilled queue's requests (None: a fixed batch)
    ar_stats: DecodeStats | None = None  # AR's counts: its steps and starts
    token_times: dict | None = None  # with itl: {"ar", "sd": [per repeat, each token's arrival (s)]}
    served: object = None  # with a request rate: serving.Served, every repeat's requests and run times
    peers: list[PeerResult] = dataclasses.field(default_factory=list)
    load: dict = dataclasses.field(default_factory=dict)  # load.others() over the whole measurement
    # the budget's parts as sampled in each repeat: {"ar_start", "ar_token", "sd_start", "round": [repeats]}
    part_samples: dict = dataclasses.field(default_factory=dict)
    kernels: str = "xla"  # what multiplied the weights: cpu, pallas or xla (layouts.kernels_used)
    pallas_backend: str | None = None  # with the Pallas kernels, their products' (pallas_layers.backend)
    verdict: str = "lazy"  # how a T > 0 verdict was computed (verify.KINDS), chosen by verify.kind_for
    sampler: str = "cdf"  # how a T > 0 draw picked its token (sampling.SAMPLERS), by sampling.sampler_for
    xla_loops: str = "xla default"  # how the device loops were compiled (programs.loops_setting)
    architecture: str = "gpt2"  # the target's (network.architecture)
    target_weights: str = (
        "float32"  # each model's weight format (quantized.format_of): float32, bfloat16, q8_0
    )
    draft_weights: str | None = None  # None where no draft model drafts
    mesh: str | None = None  # the target's split over devices ("tp=2"), or None: one device
    devices: int = 1  # the devices the target's weights are on
    draft_device: int | None = None  # the draft's device where it is apart from the target's (placed.py)
    # on a mesh, the collectives of a 1-token target step and of a verify step, timed alone
    # (collectives.py); None on one device
    t_comm_target_s: float | None = None
    t_comm_verify_s: float | None = None


PARTS = {"ar": ("ar_start", "ar_token"), "sd": ("sd_start", "round")}  # each method's budget parts
STEP_TIMERS = ("draft", "target", "verify")  # the theory's step times
COMM_TIMERS = ("comm_target", "comm_verify")  # on a mesh: the collectives of a target and a verify step


def part_seconds(prep: Prepared, name: str, rounds: int) -> np.ndarray:
    """One cold sample of a budget part (PARTS), in a loop as long as the generation's: the AR
    start, N - 1 AR tokens, the SD start, or `rounds` rounds."""
    once, prep = dict(repeats=1, warm=False), prep.timed
    if name == "ar_start":
        return timing.ar_start_seconds(prep, **once)
    if name == "ar_token":
        return timing.ar_token_seconds(prep, iters=max(1, prep.config.n_tokens - 1), **once)
    if name == "sd_start":
        return timing.spec_start_seconds(prep, **once)
    return timing.round_seconds(prep, iters=rounds, **once)


def step_seconds(prep: Prepared, name: str) -> np.ndarray:
    """One cold sample of a step timer (STEP_TIMERS, and on a mesh COMM_TIMERS), a 10-step loop at
    the run's batch size: a draft step, a 1-token target step, or the verify of K + 1 tokens (of k
    sequences with k drafts; of a tree's nodes with a tree); or the collectives alone of the
    target step or of the verify step."""
    prep = prep.timed
    c, B, once = prep.config, len(prep.prompts), dict(iters=10, repeats=1, warm=False)
    if name == "draft":
        return timing.draft_seconds(prep, **once)
    target = name in ("target", "comm_target")
    n, batch = (1, B) if target else (c.drafter.verified(c.K), B * c.drafter.drafts)
    if name in COMM_TIMERS:
        return collectives.comm_seconds(c.target, n, batch, **once)
    return timing.step_seconds(c.target, n, prep.max_len, batch=batch, **once)


def run_benchmark(config: RunConfig, prompts: list[list[int]], on_progress=None) -> BenchmarkResult:
    """Warm up (compile, excluded and timed apart), then `repeats` times: AR and then its parts, SD
    and then its parts, one sample of each step timer at the same batch size, and each peer's AR
    and SD.

    Both decode the same prompts with the same seed, N and models; with B >= 2 prompts they decode
    the B sequences together (batched.py). Every repeat times each method's parts right after its
    wall time, in loops as long as the generation's, each from a cold start as a generation starts,
    so that drift and the state of the caches hit a wall time and its parts alike (docs/metrics.md,
    the time budget). on_progress(done, total, what) follows the work.
    """
    c, prep, total = config, Prepared.make(config, prompts), config.total_steps
    timers = STEP_TIMERS + (COMM_TIMERS if mesh.name(c.target.params) else ())
    progress = on_progress or (lambda *a: None)
    helpers = tuple(p.pid for p in c.peers)  # the peers' worker processes: their CPU time is ours
    before = load.snapshot(helpers)
    walls, outputs = {"ar": [], "sd": []}, {}
    steps = {name: [] for method in PARTS for name in PARTS[method]} | {name: [] for name in timers}
    peer_out = [{"ar": [], "sd": []} for _ in c.peers]
    with timing.CompileCounter() as compiles:
        t0 = time.perf_counter()
        for _ in range(max(c.warmup, 1)):
            _, (_, warm_stats) = prep.generate("ar"), prep.generate("sd")
        compile_s = time.perf_counter() - t0
        rounds = max(1, warm_stats.rounds_run)  # the same every repeat: same prompts, seed and models
        warm_up_timers(prep, timers, rounds, lambda what: progress(c.warmup, total, what))
        on_card = jax.default_backend() == "gpu"
        card_before = card.read() if on_card else None  # the GPU's clocks as the timing starts
        for i in range(c.repeats):
            for method, names in PARTS.items():
                t0 = time.perf_counter()
                outputs[method] = prep.generate(method)
                walls[method].append(time.perf_counter() - t0)
                for name in names:
                    steps[name].append(part_seconds(prep, name, rounds))
            progress(c.warmup + i, total, "timing the steps")
            for name in timers:
                steps[name].append(step_seconds(prep, name))
            for p, out in zip(c.peers, peer_out):
                progress(c.warmup + i, total, f"timing {p.name}")
                for method in PARTS:
                    *output, seconds = prep.peer_generate(p, method)
                    out[method].append(seconds)
                    out[method + "_result"] = output
            if c.peers:  # a peer's run leaves the caches full of its own copy of the weights: the next
                prep.generate("ar"), prep.generate("sd")  # repeat starts after specbench's own work
            progress(c.warmup + i + 1, total, "timing AR, SD and the parts")
        arrivals = token_arrivals(prep) if c.itl else None
        served = open_loop_runs(prep, lambda what: progress(total, total, what)) if c.request_rate else None
        progress(total, total, "done")
    machine = load.others(before, load.snapshot(helpers)) | card.record(
        card_before, card.read() if on_card else None
    )
    result = benchmark_result(prep, walls, outputs, steps, peer_out, machine, compile_s, compiles.count)
    return dataclasses.replace(result, token_times=arrivals, served=served, n_cached=compiles.cached)


def warm_up_timers(prep: Prepared, timers: tuple, rounds: int, say) -> None:
    """The step timers' and the peers' first calls, which compile (and warm a peer's process up):
    run_benchmark's, excluded from every time like its own warm-up. say(what) reports the work."""
    say("compiling the step timers")
    for method, names in PARTS.items():
        for name in names:
            part_seconds(prep, name, rounds)
    for name in timers:
        step_seconds(prep, name)
    for p in prep.config.peers:  # each call returns once its process is idle
        say(f"warm-up of {p.name}")
        for _ in range(max(prep.config.warmup, 1)):
            prep.peer_generate(p, "ar"), prep.peer_generate(p, "sd")
    say("warm-up done")


def token_arrivals(prep: Prepared) -> dict[str, list[list[float]]]:
    """Each repeat's token arrival times, AR's and SD's alternated (generate.token_times), after one
    untimed call of each to compile its host-driven programs."""
    prep.token_times("ar"), prep.token_times("sd")
    arrivals = {"ar": [], "sd": []}
    for i in range(prep.config.repeats):
        for m in ("ar", "sd") if i % 2 == 0 else ("sd", "ar"):
            arrivals[m].append(prep.token_times(m).tolist())
    return arrivals


def open_loop_runs(prep: Prepared, say=lambda what: None):
    """Each repeat's queue served open-loop at the run's request rate (serving.py), AR and SD at
    the same Poisson arrivals (seed + repeat), their order alternated, after one untimed run of
    each that compiles its programs. say(what) reports each serving as it starts, with the span of
    its arrivals (the loop sleeps between them)."""
    from specbench.measure import serving

    c = prep.config
    at = lambda i: serving.poisson_arrivals(c.request_rate, len(prep.prompts), c.seed + i)
    prep.serve_open("ar", at(0) * 0), prep.serve_open("sd", at(0) * 0)
    out = serving.Served([], [], [], [])
    for i in range(c.repeats):
        arrivals = at(i)
        for m in ("ar", "sd") if i % 2 == 0 else ("sd", "ar"):
            say(
                f"serving requests arriving at {c.request_rate:g}/s: repeat {i + 1}/{c.repeats}, "
                f"{m.upper()}, arrivals over {arrivals[-1]:.1f} s"
            )
            done, seconds = prep.serve_open(m, arrivals)
            getattr(out, m).append([r.times(c.n_tokens) for r in done])
            getattr(out, f"{m}_run_s").append(seconds)
    return out


def draft_device(prep: Prepared) -> int | None:
    """The id of the device the draft drafts on where it is apart from the target's (placed.py)."""
    if not placed.apart(prep.draft_params, prep.config.target.params):
        return None
    (device,) = placed.devices(prep.draft_params)
    return device.id


def peer_results(peers, peer_out) -> list[PeerResult]:
    """Each peer's times and tokens (run_benchmark's peer_out) as a PeerResult."""
    return [
        PeerResult(
            p.name,
            p.version,
            out["ar"],
            out["sd"],
            list(out["ar_result"][0]),
            list(out["sd_result"][0]),
            out["sd_result"][1],
        )
        for p, out in zip(peers, peer_out)
    ]


def benchmark_result(
    prep: Prepared, walls, outputs, steps, peer_out, machine, compile_s, n_compiles
) -> BenchmarkResult:
    """run_benchmark's measurements as a BenchmarkResult: the medians of the step timers and the
    parts, the σ of the round's overhead, and every part's samples."""
    c = prep.config
    steps = {name: np.concatenate(s, axis=-1) for name, s in steps.items()}
    median = {name: float(np.median(s)) for name, s in steps.items()}
    # the overhead is a difference of separately timed medians: carry its uncertainty with it
    sd_of = lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    overhead_err = float(
        np.sqrt(sd_of(steps["round"]) ** 2 + (c.K * sd_of(steps["draft"])) ** 2 + sd_of(steps["verify"]) ** 2)
    )
    peers = peer_results(c.peers, peer_out)
    return BenchmarkResult(
        c,
        walls["ar"],
        walls["sd"],
        outputs["ar"][0].tolist(),
        outputs["sd"][0].tolist(),
        outputs["sd"][1],
        t_draft_s=median["draft"],
        t_target_s=median["target"],
        t_verify_s=median["verify"],
        t_round_s=median["round"],
        t_ar_token_s=median["ar_token"],
        t_ar_start_s=median["ar_start"],
        t_sd_start_s=median["sd_start"],
        t_overhead_err_s=overhead_err,
        compile_s=compile_s,
        n_compiles=n_compiles,
        batch=c.slots or len(prep.prompts),
        queue=len(prep.prompts) if c.slots else None,
        ar_stats=outputs["ar"][1],
        peers=peers,
        load=machine,
        part_samples={name: steps[name].tolist() for names in PARTS.values() for name in names},
        kernels=layouts.kernels_used(c.target.params),
        pallas_backend=pallas_layers.backend() if layouts.kernels_used(c.target.params) == "pallas" else None,
        verdict=verify.kind_for(jax.default_backend()),
        sampler=sampling.sampler_for(jax.default_backend()),
        xla_loops=programs.loops_setting(),
        architecture=network.architecture(c.target.config),
        **c.weight_formats,
        mesh=mesh.name(c.target.params),
        devices=mesh.device_count(c.target.params),
        draft_device=draft_device(prep),
        t_comm_target_s=median.get("comm_target"),
        t_comm_verify_s=median.get("comm_verify"),
    )
