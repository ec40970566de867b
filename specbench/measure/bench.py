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

import numpy as np

from specbench.measure import load, timing
from specbench.measure.peers import PeerResult
from specbench.model import generate, kernels
from specbench.model.drafters import Drafter
from specbench.model.sampling import Warp
from specbench.model.stats import DecodeStats
from specbench.model.weights import Model


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one benchmark decodes, and how often."""

    draft: Model | None  # None when the drafter needs no draft model (lookup, layerskip)
    target: Model
    drafter: Drafter
    K: int
    warp: Warp = Warp()
    n_tokens: int = 40
    seed: int = 123
    repeats: int = 5
    warmup: int = 1
    device_loop: bool = True
    peers: tuple = ()  # peers.PeerProcess, timed alternately with specbench's own

    @property
    def models(self) -> list[Model]:
        return [self.target] + ([self.draft] if self.drafter.kind == "model" else [])

    @property
    def total_steps(self) -> int:
        """Progress units of run_benchmark: warm-up, then each repeat with its step timings."""
        return self.warmup + self.repeats


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
    n_compiles: int
    batch: int = 1  # sequences decoded together; times are then per batch
    peers: list[PeerResult] = dataclasses.field(default_factory=list)
    load: dict = dataclasses.field(default_factory=dict)  # load.others() over the whole measurement
    # the budget's parts as sampled in each repeat: {"ar_start", "ar_token", "sd_start", "round": [repeats]}
    part_samples: dict = dataclasses.field(default_factory=dict)
    kernels: str = "xla"  # what multiplied the weights: "cpu" (specbench's kernel) or "xla" (kernels.used_by)


def run_benchmark(config: RunConfig, prompts: list[list[int]], on_progress=None) -> BenchmarkResult:
    """Warm up (compile, excluded and timed apart), then `repeats` times: AR and then its parts, SD
    and then its parts, one sample of each step timer at the same batch size, and each peer's AR
    and SD.

    Both decode the same prompts with the same seed, N and models; with B >= 2 prompts they decode
    the B sequences together (batched.py). on_progress(done, total, what) follows the work.
    """
    c, B = config, len(prompts)
    one = prompts[0] if B == 1 else prompts  # one prompt: tokens [N]; a batch: [B, N]
    max_len = generate.plan(prompts, c.n_tokens, c.K, c.models)
    # what the drafter drafts with, made once, outside every clock (the dial's is an AR generation)
    draft_params = generate.prepare_drafter(
        c.drafter, c.draft, c.target, one, c.n_tokens, c.K, c.warp, c.seed, max_len
    )
    ar = lambda: generate.autoregressive(
        c.target, one, c.n_tokens, c.warp, c.seed, max_len=max_len, device_loop=c.device_loop
    )
    sd = lambda: generate.speculative(
        c.draft,
        c.target,
        one,
        c.n_tokens,
        c.K,
        c.warp,
        c.seed,
        max_len=max_len,
        device_loop=c.device_loop,
        drafter=c.drafter,
        draft_params=draft_params,
    )
    # each peer's AR and SD, in its own process: () -> (tokens, drafts accepted per round or None,
    # seconds of the call timed there); each returns once the peer's process has gone idle
    peer_calls = [
        (
            lambda p=p: p.autoregressive(prompts[0], c.n_tokens, c.warp, c.seed),
            lambda p=p: p.speculative(prompts[0], c.n_tokens, c.K, c.warp, c.seed),
        )
        for p in c.peers
    ]
    peer_out = [{"ar": [], "sd": []} for _ in c.peers]
    # The parts of the time budget, each a device-loop timer (timing.py) of one sample per call.
    # Every repeat times each method's parts right after its wall time, in loops as long as the
    # generation's (N - 1 tokens; the rounds SD ran), each from a cold start as a generation
    # starts, so that drift and the state of the caches hit a wall time and its parts alike
    # (README, time budget). Then the step timers of the theory.
    once = dict(repeats=1, warm=False)
    ar_args = (c.target, prompts, c.warp, max_len, c.seed)
    sd_args = (c.draft, c.target, prompts, c.K, c.warp, max_len, c.seed)
    drafting = dict(drafter=c.drafter, draft_params=draft_params)
    ar_parts = {
        "ar_start": lambda: timing.ar_start_seconds(*ar_args, **once),
        "ar_token": lambda: timing.ar_token_seconds(*ar_args, iters=max(1, c.n_tokens - 1), **once),
    }
    sd_parts = {
        "sd_start": lambda: timing.spec_start_seconds(*sd_args, **drafting, **once),
        "round": lambda: timing.round_seconds(*sd_args, iters=rounds, **drafting, **once),
    }
    step = lambda n, batch=B: timing.step_seconds(c.target, n, max_len, iters=10, batch=batch, **once)
    step_timers = {
        "draft": lambda: timing.draft_seconds(
            c.drafter, c.draft, c.target, prompts, c.K, max_len, iters=10, **once
        ),
        "target": lambda: step(1),
        "verify": lambda: step(c.K + 1, B * c.drafter.drafts),  # k drafts: k sequences of K + 1
    }
    timers = ar_parts | sd_parts | step_timers
    total = c.total_steps
    progress = on_progress or (lambda *a: None)
    helpers = tuple(p.pid for p in c.peers)  # the peers' worker processes: their CPU time is ours
    before = load.snapshot(helpers)
    with timing.CompileCounter() as compiles:
        t0 = time.perf_counter()
        for _ in range(max(c.warmup, 1)):
            _, (_, warm_stats) = ar(), sd()
        compile_s = time.perf_counter() - t0
        rounds = max(1, warm_stats.rounds_run)  # the same every repeat: same prompts, seed and models
        progress(c.warmup, total, "compiling the step timers")
        for measure in timers.values():  # their compiles, excluded too
            measure()
        for p, (p_ar, p_sd) in zip(c.peers, peer_calls):  # the peers' warm-up, excluded too
            progress(c.warmup, total, f"warm-up of {p.name}")
            for _ in range(max(c.warmup, 1)):
                p_ar(), p_sd()
        progress(c.warmup, total, "warm-up done")
        walls, outputs = {"ar": [], "sd": []}, {}
        steps = {name: [] for name in timers}
        for i in range(c.repeats):
            for method, generation, parts in (("ar", ar, ar_parts), ("sd", sd, sd_parts)):
                t0 = time.perf_counter()
                outputs[method] = generation()
                walls[method].append(time.perf_counter() - t0)
                for name, measure in parts.items():
                    steps[name].append(measure())
            progress(c.warmup + i, total, "timing the steps")
            for name, measure in step_timers.items():
                steps[name].append(measure())
            for p, out, calls in zip(c.peers, peer_out, peer_calls):
                progress(c.warmup + i, total, f"timing {p.name}")
                for method, call in zip(("ar", "sd"), calls):
                    *result, seconds = call()
                    out[method].append(seconds)
                    out[method + "_result"] = result
            if c.peers:  # a peer's run leaves the caches full of its own copy of the weights: the next
                ar(), sd()  # repeat starts, as without peers, after specbench's own work (untimed)
            progress(c.warmup + i + 1, total, "timing AR, SD and the parts")
        progress(total, total, "done")
    steps = {name: np.concatenate(s, axis=-1) for name, s in steps.items()}
    machine = load.others(before, load.snapshot(helpers))
    median = {name: float(np.median(s)) for name, s in steps.items()}
    # the overhead is a difference of separately timed medians: carry its uncertainty with it
    sd_of = lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    overhead_err = float(
        np.sqrt(sd_of(steps["round"]) ** 2 + (c.K * sd_of(steps["draft"])) ** 2 + sd_of(steps["verify"]) ** 2)
    )
    return BenchmarkResult(
        config,
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
        n_compiles=compiles.count,
        batch=B,
        peers=[
            PeerResult(
                p.name,
                p.version,
                out["ar"],
                out["sd"],
                list(out["ar_result"][0]),
                list(out["sd_result"][0]),
                out["sd_result"][1],
            )
            for p, out in zip(c.peers, peer_out)
        ],
        load=machine,
        part_samples={name: steps[name].tolist() for name in ar_parts | sd_parts},
        kernels=kernels.used_by(c.target.params),
    )
