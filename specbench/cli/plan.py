"""From flags to a checked plan: one typed object per command, every value checked (checks.py)
before any work starts, as hyperfine parses its options."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from specbench.cli.checks import (
    check_batch,
    check_decodable,
    check_drafter_flags,
    check_no_effect,
    kinds_that,
    make_drafter,
    method_flags,
    method_variants,
    network_drafter,
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
    random_model,
)
from specbench.cli.paths import (
    check_exports,
    check_grid_resume,
    check_resume_settings,
    check_save_path,
    results_dir,
    stamp,
)
from specbench.cli.suites import category_of, origin, resolve_prompt, suite_of
from specbench.errors import ExportError, WeightsError
from specbench.measure.bench import RunConfig
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.sampling import Warp
from specbench.results import export
from specbench.results import schema as results
from specbench.results.rows import drafter_settings


@dataclasses.dataclass(frozen=True)
class RunPlan:
    job: Job
    dtype: str
    exports: dict[str, str | None]
    save_path: Path | None


def run_settings(f: dict) -> dict:
    """The RunConfig fields that the flags set the same for every row of a command."""
    return {k: f[k] for k in ("n_tokens", "seed", "repeats", "warmup")} | {"device_loop": not f["host_loop"]}


def drafter_models(kinds: list[str], f: dict) -> tuple[dict, object]:
    """({kind: the model it drafts with: the draft model, the EAGLE head or None}, the target),
    each loaded once and only where one of `kinds` needs it."""
    d, t = load_pair(
        f["draft"], f["target"], f["dtype"], bool(set(kinds_that("draft_model")) & set(kinds)), f["kernels"]
    )
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
    batch = f["batch"]
    # a batch: the suite's prompts cycled, unless a prompt was chosen, which is then repeated
    chosen = {prompt_id: prompt} if chose_prompt or batch == 1 else suite.texts()
    if batch > 1 and not chose_prompt:
        prompt_id = "all"
    check_drafter_flags([f["drafter"]], f)
    own, t = drafter_models([f["drafter"]], f)
    d = own[f["drafter"]]
    drafter, draft_name = make_drafter(f["drafter"], d, t, f)
    by_id = {pid: tokenizer.for_model(t.source).encode(text) for pid, text in chosen.items()}
    for pid, ids in by_id.items():
        models = [m for m in (d, t) if m is not None]
        where = origin(suite, pid)
        check_decodable(ids, f["n_tokens"], drafter.reach(f["K"]), models, drafter.reach_setting, where)
    check_batch(batch, f["host_loop"], drafter, d, t, list(by_id.values()), f["n_tokens"], f["K"])
    ids = suite.batch_ids(chosen, batch)
    peers = load_peers(f["peers"], drafter, d, t, batch, not f["dry_run"], [f["temperature"]])
    config = RunConfig(
        d, t, drafter, f["K"], Warp(f["temperature"], f["top_k"], f["top_p"]), **run_settings(f), peers=peers
    )
    texts, encoded = [chosen[i] for i in ids], [by_id[i] for i in ids]
    job = Job(config, draft_name, prompt_id, ids, texts, encoded, category_of(suite, prompt_id))
    if save_path and not f["dry_run"]:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    return RunPlan(job, f["dtype"], exports, save_path)


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    output: str
    rows: list[dict]  # already in --output (with --resume)
    grid_size: int
    todo: list[Job]
    labels: list[str]  # what each job varies, for progress lines
    draft_names: list[str]
    target_name: str
    exports: dict[str, str | None]
    batches: list[int] | None
    repeats: int


def sweep_plan(f: dict, given: set[str]) -> SweepPlan:
    """`sweep`: the grid over drafters, prompts (or batch sizes), temperatures, top-p and K,
    checked, less the rows --resume finds done."""
    check_no_effect(f, given, f["drafter_kinds"], f["temperature"])
    # a batch cycles the built-in suite unless --prompts chose; one chosen prompt is then repeated
    suite = suite_of(f)
    mixed = bool(f["batches"]) and "prompt_spec" not in given
    spec = "all" if f.get("prompts_file") and "prompt_spec" not in given else f["prompt_spec"]
    try:
        chosen = suite.texts() if mixed else suite.select(spec)
    except ValueError as e:
        raise BadInput("--prompts", str(e)) from None
    if f["resume"] and not f["output"]:
        raise BadInput("--resume", "needs --output FILE.json, the file to resume")
    if f["resume"] and f["force"]:
        raise BadInput("--force", "starts --output over, --resume extends it: give one of them")
    kinds = f["drafter_kinds"]
    check_drafter_flags(kinds, f)
    output = f["output"] or str(results_dir(create=False) / f"sweep-{stamp()}.json")
    if Path(output).exists() and not (f["resume"] or f["force"]):
        raise BadInput("--output", f"{output} exists: --resume extends it, --force starts it over")
    exports = check_exports(f, f["output"])
    if not f["output"]:
        check_save_path(Path(output), "--output")
    rows = []
    if f["resume"] and Path(output).exists():
        try:
            rows = export.read_json(output)
        except ExportError as e:
            raise BadInput("--resume", str(e)) from None
    own, t = drafter_models(kinds, f)  # the model each kind drafts with
    # each drafter with every --verify, --drafts and (the dial) --acceptance: [(Drafter, name)]
    variants = {
        kind: method_variants(*network_drafter(kind, own[kind], t, f), *method_flags(f)) for kind in kinds
    }
    peers = {
        kind: load_peers(
            f["peers"],
            variants[kind][0][0],
            own[kind],
            t,
            max(f["batches"] or [1]),
            not f["dry_run"],
            f["temperature"],
        )
        for kind in kinds
    }
    encoded = {pid: tokenizer.for_model(t.source).encode(text) for pid, text in chosen.items()}
    K_max, batches = max(f["K"]), f["batches"]
    for kind in kinds:
        uses = [m for m in (own[kind], t) if m is not None]
        drafter = variants[kind][0][0]  # a tree's reach is the same for every variant: one tree
        for pid, ids in encoded.items():
            reach = drafter.reach(K_max)
            check_decodable(ids, f["n_tokens"], reach, uses, drafter.reach_setting, origin(suite, pid))
        for b in sorted(batches or [], reverse=True)[:1]:  # the largest batch, with the largest K, must fit
            check_batch(
                b,
                f["host_loop"],
                variants[kind][0][0],
                own[kind],
                t,
                list(encoded.values()),
                f["n_tokens"],
                K_max,
            )
    # the prompt axis: each chosen prompt alone, or (with --batch) the batch of B cycling through them
    units = (
        [("all" if mixed else spec, suite.batch_ids(chosen, b)) for b in batches]
        if batches
        else [(pid, [pid]) for pid in chosen]
    )
    loop = "host" if f["host_loop"] else "device"
    import jax

    from specbench.model.decode.sampling import sampler_for
    from specbench.model.decode.verify import kind_for
    from specbench.model.nets import network
    from specbench.model.nets.layouts import kernels_used

    fixed = {k: f[k] for k in ("dtype", "top_k", "n_tokens", "seed")} | {"target": t.name, "loop": loop}
    fixed |= {"kernels": kernels_used(t.params), "verdict": kind_for(jax.default_backend())}
    fixed["sampler"] = sampler_for(jax.default_backend())
    fixed["architecture"] = network.architecture(t.config)
    check_resume_settings(rows, {**fixed, "repeats": f["repeats"], "warmup": f["warmup"]}, output)
    done = {results.sweep_key(r) for r in rows}
    keys = []
    settings = run_settings(f)
    methods = [(kind, *v) for kind in kinds for v in variants[kind]]
    grid = list(itertools.product(methods, units, f["temperature"], f["top_p"] or [None], f["K"]))
    todo, labels = [], []
    for (kind, drafter, name), (pid, ids), temp, p, k in grid:
        varied = {"K": k, "temperature": temp, "top_p": p, "prompt_id": pid, "batch": len(ids)}
        key = {**fixed, **varied, "draft": name, **drafter_settings(drafter)}
        # the cell's rows: specbench's and each peer's, measured together; done when all are there
        cell_keys = [{**key, "implementation": i} for i in ["specbench", *f["peers"]]]
        keys += cell_keys
        if all(results.sweep_key(k_) in done for k_ in cell_keys):
            continue
        warp = Warp(temp, f["top_k"], p)
        config = RunConfig(own[kind], t, drafter, k, warp, **settings, peers=peers[kind])
        texts, codes = [chosen[i] for i in ids], [encoded[i] for i in ids]
        todo.append(Job(config, name, pid, ids, texts, codes, category_of(suite, pid)))
        top_p = f" top-p={p:g}" if p else ""
        method = f" verify={drafter.verify}" if drafter.verify != "token" else ""
        method += f" drafts={drafter.drafts}" if drafter.drafts > 1 else ""
        method += f" a={drafter.acceptance:g}" if drafter.acceptance is not None else ""
        labels.append(
            f"{kind}{method} K={k} T={temp:g}{top_p} {pid}" + (f" batch {len(ids)}" if batches else "")
        )
    check_grid_resume(rows, keys, output)
    if not f["output"] and not f["dry_run"]:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    return SweepPlan(
        output,
        rows,
        len(grid),
        todo,
        labels,
        [name for _, _, name in methods],
        t.name,
        exports,
        batches,
        f["repeats"],
    )


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
    ids = tokenizer.for_model(t.source).encode(prompt)
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
    load = random_model if f["random_init"] else lambda *a: load_model(a[0], "--model", *a[1:])
    runs = [(load(n, dtype, k), dtype) for n in names for dtype in dtypes for k in f["kernels"]]
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
    (roofline.step_bytes at the device's peak bandwidth, or CPU_GBPS); AR and SD each about N
    steps a repeat (the warm-up too), and as much again for their parts (bench.py), and the step
    timers about 35 target steps a repeat; and COMPILE_S for each distinct program set."""
    from specbench.measure import device
    from specbench.measure.roofline import step_bytes

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
