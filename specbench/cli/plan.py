"""From flags to a checked plan: one typed object per command, every value checked (checks.py)
before any work starts, as hyperfine parses its options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specbench.cli.checks import (
    check_batch,
    check_decodable,
    check_drafter_flags,
    check_no_effect,
    kinds_that,
    make_drafter,
)
from specbench.cli.console import BadInput, bad_input
from specbench.cli.jobs import Job
from specbench.cli.loading import (
    check_backend,
    drafting_model,
    load_head,
    load_model,
    load_pair,
    load_peers,
    on_mesh,
    random_model,
)
from specbench.cli.paths import (
    check_exports,
    check_save_path,
    results_dir,
    stamp,
)
from specbench.cli.suites import category_of, origin, resolve_prompt, suite_of
from specbench.errors import WeightsError
from specbench.measure.bench import RunConfig
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.sampling import Warp


@dataclasses.dataclass(frozen=True)
class RunPlan:
    job: Job
    dtype: str
    exports: dict[str, str | None]
    save_path: Path | None


def run_settings(f: dict) -> dict:
    """The RunConfig fields that the flags set the same for every row of a command."""
    settings = {k: f[k] for k in ("n_tokens", "seed", "repeats", "warmup")} | {
        "device_loop": not f["host_loop"]
    }
    return settings | {"itl": bool(f.get("itl"))}


def queue_length(f: dict, batch: int) -> int | None:
    """--refill's queue for a batch of this size (--queue, else 4 x the batch); None without --refill."""
    if f.get("queue") is not None and not f.get("refill"):
        raise BadInput("--queue", "sets --refill's queue of requests: give --refill too")
    return (f.get("queue") or 4 * batch) if f.get("refill") else None


def check_refill(f: dict, drafter) -> None:
    """A refilled batch runs on the device loop, one drafter for every slot, and no peer."""
    if f.get("itl") and (f.get("refill") or max(f.get("batches") or [f.get("batch", 1)]) > 1):
        raise BadInput("--itl", "times one sequence's tokens as they arrive: use --batch 1, without --refill")
    if not f.get("refill"):
        return
    if f["host_loop"]:
        raise BadInput(
            "--host-loop", "drives one sequence; --refill serves its queue in the device loop only"
        )
    if drafter.spec.acceptance:
        raise BadInput("--refill", "the dial drives one sequence at T = 0: it serves no queue")
    if f["peers"]:
        raise BadInput("--peer", "peers decode one sequence at a time: leave out --refill")


def check_placement(f: dict, drafter) -> None:
    """A draft on a device of its own (--draft-device) drafts one chain for one sequence, in one
    process: its rounds are driven from the host (decode/placed.py)."""
    if f.get("draft_device") is None:
        return
    batches = f.get("batches") or [f.get("batch", 1)]
    for flag, refused in (
        ("--batch", max(batches) > 1),
        ("--refill", f.get("refill")),
        ("--itl", f.get("itl")),
        ("--peer", f.get("peers")),
        ("--processes", f.get("processes")),
        (
            "--tree" if drafter.tree is not None else "--drafts",
            drafter.tree is not None or drafter.drafts > 1,
        ),
    ):
        if refused:
            raise BadInput(
                flag, "a draft on a device of its own (--draft-device) drafts one chain of one sequence"
            )


def drafter_models(kinds: list[str], f: dict) -> tuple[dict, object]:
    """({kind: the model it drafts with: the draft model, the EAGLE head or None}, the target),
    each loaded once and only where one of `kinds` needs it."""
    need_draft = bool(set(kinds_that("draft_model")) & set(kinds))
    if f.get("draft_device") is not None and set(kinds) - set(kinds_that("draft_model")):
        raise BadInput("--draft-device", "places a draft model: it takes --drafter model only")
    model_flags = (f["kernels"], f["random_init"], f["mesh"], f.get("draft_device"))
    d, t = load_pair(f["draft"], f["target"], f["dtype"], need_draft, *model_flags)
    if f["mesh"] and set(kinds_that("features")) & set(kinds):
        raise BadInput("--drafter", "eagle does not run on a mesh yet: its head is not placed there")
    head = load_head(f, t) if set(kinds_that("features")) & set(kinds) else None
    return {kind: drafting_model(kind, d, head) for kind in kinds}, t


def run_plan(f: dict, given: set[str]) -> RunPlan:
    """`run`: one configuration, checked. `given`: the flags the user set."""
    check_no_effect(f, given, [f["drafter"]], [f["temperature"]])
    suite = suite_of(f)
    chose_prompt = bool({"prompt", "prompt_id"} & given)
    exports = check_exports(f)
    save_path = results_dir(create=False) / f"run-{stamp()}.json" if f["save"] else None
    if save_path:
        check_save_path(save_path)
    prompt, prompt_id = resolve_prompt(f, given, suite)
    batch, queue = f["batch"], queue_length(f, f["batch"])
    # a batch (or a queue): the suite's prompts cycled, unless a prompt was chosen, then repeated
    chosen = {prompt_id: prompt} if chose_prompt or (batch == 1 and not queue) else suite.texts()
    if (batch > 1 or queue) and not chose_prompt:
        prompt_id = "all"
    check_drafter_flags([f["drafter"]], f)
    own, t = drafter_models([f["drafter"]], f)
    d = own[f["drafter"]]
    drafter, draft_name = make_drafter(f["drafter"], d, t, f)
    by_id = {pid: tokenizer.for_model(t).encode(text) for pid, text in chosen.items()}
    for pid, ids in by_id.items():
        models = [m for m in (d, t) if m is not None]
        where = origin(suite, pid)
        check_decodable(ids, f["n_tokens"], drafter.reach(f["K"]), models, drafter.reach_setting, where)
    check_batch(batch, f["host_loop"], drafter, d, t, list(by_id.values()), f["n_tokens"], f["K"])
    check_refill(f, drafter)
    check_placement(f, drafter)
    ids = suite.batch_ids(chosen, queue or batch)
    peers = load_peers(f["peers"], drafter, d, t, batch, not f["dry_run"], [f["temperature"]])
    warp = Warp(f["temperature"], f["top_k"], f["top_p"])
    config = RunConfig(
        d, t, drafter, f["K"], warp, **run_settings(f), peers=peers, slots=batch if queue else None
    )
    texts, encoded = [chosen[i] for i in ids], [by_id[i] for i in ids]
    job = Job(config, draft_name, prompt_id, ids, texts, encoded, category_of(suite, prompt_id))
    if save_path and not f["dry_run"]:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    return RunPlan(job, f["dtype"], exports, save_path)


@dataclasses.dataclass(frozen=True)
class TracePlan:
    prompt: str
    prompt_ids: list[int]
    draft: object
    target: object
    drafter: object
    draft_name: str
    K: int
    warp: Warp
    n_tokens: int
    seed: int


def trace_plan(f: dict, given: set[str]) -> TracePlan:
    """`trace`: one generation, checked."""
    check_no_effect(f, given, [f["drafter"]], [f["temperature"]])
    suite = suite_of(f)
    prompt, prompt_id = resolve_prompt(f, given, suite)
    check_drafter_flags([f["drafter"]], f)
    own, t = drafter_models([f["drafter"]], f)
    d = own[f["drafter"]]
    drafter, draft_name = make_drafter(f["drafter"], d, t, f)
    ids = tokenizer.for_model(t).encode(prompt)
    models, where = [m for m in (d, t) if m is not None], origin(suite, prompt_id)
    check_decodable(ids, f["n_tokens"], drafter.reach(f["K"]), models, drafter.reach_setting, where)
    return TracePlan(
        prompt,
        ids,
        d,
        t,
        drafter,
        draft_name,
        f["K"],
        Warp(f["temperature"], f["top_k"], f["top_p"]),
        f["n_tokens"],
        f["seed"],
    )


def roofline_plan(f: dict) -> tuple[list[tuple], dict[str, str | None]]:
    """`roofline`: ([(model, dtype)], {format: path}), every check before any timing."""
    from specbench.measure import device
    from specbench.model.checkpoints import weights

    exports = check_exports(f)
    check_backend()
    dtypes = f["dtypes"] or (["float32", "bfloat16"] if device.on_gpu() else ["float32"])
    if any(d not in ("float32", "bfloat16") for d in dtypes):
        raise BadInput("--dtype", "values must be float32 or bfloat16")
    try:
        names = list(f["model_names"]) or list(weights.default_pair()[::-1])
    except WeightsError as e:
        raise bad_input(e, "--model") from None
    if f["mesh"] and set(f["kernels"]) - {"auto", "xla"}:
        raise BadInput("--kernels", "a model split over a mesh runs on XLA's products: use auto or xla")
    kernels = ["xla"] if f["mesh"] else f["kernels"]
    load = random_model if f["random_init"] else lambda *a: load_model(a[0], "--model", *a[1:])
    runs = [
        (on_mesh(None, load(n, dtype, k), f["mesh"])[1], dtype)
        for n in names
        for dtype in dtypes
        for k in kernels
    ]
    for model, _ in runs:
        if f["context"] > model.config.n_ctx:
            raise BadInput(
                "--context",
                f"{f['context']} exceeds {model.name}'s context of {model.config.n_ctx} "
                f"tokens; use at most {model.config.n_ctx}",
            )
    if f["K"] + 1 > f["context"]:
        raise BadInput("--K", f"K+1 = {f['K'] + 1} must fit the cache of --context {f['context']}")
    return runs, exports


# ---------------------------------------------------------------------------------------------
# Dry runs

CPU_GBPS = 20.0  # a dry run's bandwidth where the device's peak is unknown (a CPU): a rough guess
COMPILE_S = 8.0  # a dry run's guess of one configuration's compile time on a CPU (AR, SD, timers)


def estimate_seconds(jobs: list[Job]) -> float:
    """A rough wall time for measuring `jobs`, without compiling: every step at the memory bound
    (step_costs.step_bytes at the device's peak bandwidth, or CPU_GBPS); AR and SD each about N
    steps a repeat (the warm-up too), and as much again for their parts (bench.py), and the step
    timers about 35 target steps a repeat; and COMPILE_S for each distinct program set."""
    from specbench.measure import device
    from specbench.measure.step_costs import step_bytes

    gbps = device.peak_gbps() or CPU_GBPS
    total, programs = 0.0, set()
    for job in jobs:
        c = job.config
        t_step = len(job.ids) * step_bytes(c.target, 256) / (gbps * 1e9)
        walls, parts = 2 * c.n_tokens, 2 * c.n_tokens + 35
        total += ((c.warmup + c.repeats) * walls + (c.repeats + 1) * parts) * t_step
        programs.add((c.drafter, c.K, c.warp, len(job.ids)))
    return total + COMPILE_S * len(programs)


def program_sets(jobs: list[Job]) -> int:
    """Distinct compiled program sets the jobs need: one per drafter, K, warp and batch size."""
    return len({(j.config.drafter, j.config.K, j.config.warp, len(j.ids)) for j in jobs})
