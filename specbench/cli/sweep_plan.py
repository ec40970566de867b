"""`sweep`'s plan: the grid over drafters, prompts (or batch sizes), temperatures, top-p and K,
checked before anything runs, less the rows --resume finds done."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from specbench.cli.checks import (
    check_batch,
    check_decodable,
    check_drafter_flags,
    check_no_effect,
    method_flags,
    method_variants,
    network_drafter,
)
from specbench.cli.console import BadInput
from specbench.cli.jobs import Job
from specbench.cli.loading import load_peers
from specbench.cli.paths import (
    check_exports,
    check_grid_resume,
    check_resume_settings,
    check_save_path,
    results_dir,
    stamp,
)
from specbench.cli.plan import check_placement, check_refill, drafter_models, queue_length, run_settings
from specbench.cli.suites import category_of, origin, suite_of
from specbench.errors import ExportError
from specbench.measure.bench import RunConfig
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.sampling import Warp
from specbench.results import export
from specbench.results import schema as results
from specbench.results.rows import drafter_settings


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
    suite = suite_of(f)
    chosen, batch_label = sweep_prompts(f, given, suite)
    kinds = f["drafter_kinds"]
    output, exports, rows = sweep_output(f)
    check_drafter_flags(kinds, f)
    own, t = drafter_models(kinds, f)  # the model each kind drafts with
    # each drafter with every --verify, --drafts and (the dial) --acceptance: [(Drafter, name)]
    variants = {
        kind: method_variants(*network_drafter(kind, own[kind], t, f), *method_flags(f)) for kind in kinds
    }
    most = max(f["batches"] or [1])
    load = lambda kind: load_peers(
        f["peers"], variants[kind][0][0], own[kind], t, most, not f["dry_run"], f["temperature"]
    )
    peers = {kind: load(kind) for kind in kinds}
    encoded = {pid: tokenizer.for_model(t).encode(text) for pid, text in chosen.items()}
    batches = f["batches"]
    for kind in kinds:  # a tree's reach is the same for every variant: one tree
        check_fit(f, suite, encoded, variants[kind][0][0], own[kind], t)
    # the prompt axis: each chosen prompt alone, or (with --batch) the batch of B cycling through them
    units = sweep_units(f, suite, chosen, batch_label)
    fixed = sweep_fixed(f, t)
    check_resume_settings(rows, {**fixed, "repeats": f["repeats"], "warmup": f["warmup"]}, output)
    done = {results.sweep_key(r) for r in rows}
    keys = []
    settings = run_settings(f)
    methods = [(kind, *v) for kind in kinds for v in variants[kind]]
    grid = list(itertools.product(methods, units, f["temperature"], f["top_p"] or [None], f["K"]))
    todo, labels = [], []
    for (kind, drafter, name), (pid, ids, slots), temp, p, k in grid:
        check_refill(f, drafter)
        check_placement(f, drafter)
        varied = {"K": k, "temperature": temp, "top_p": p, "prompt_id": pid, "batch": slots or len(ids)}
        varied["queue"] = len(ids) if slots else None
        key = {**fixed, **varied, "draft": name, **drafter_settings(drafter)}
        # the cell's rows: specbench's and each peer's, measured together; done when all are there
        cell_keys = [{**key, "implementation": i} for i in ["specbench", *f["peers"]]]
        keys += cell_keys
        if all(results.sweep_key(k_) in done for k_ in cell_keys):
            continue
        warp = Warp(temp, f["top_k"], p)
        config = RunConfig(own[kind], t, drafter, k, warp, **settings, peers=peers[kind], slots=slots)
        texts, codes = [chosen[i] for i in ids], [encoded[i] for i in ids]
        todo.append(Job(config, name, pid, ids, texts, codes, category_of(suite, pid)))
        size = f" batch {slots} queue {len(ids)}" if slots else f" batch {len(ids)}" if batches else ""
        labels.append(cell_label(kind, drafter, k, temp, p, pid) + size)
    check_grid_resume(rows, keys, output)
    if not f["output"] and not f["dry_run"]:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    names = [name for _, _, name in methods]
    return SweepPlan(output, rows, len(grid), todo, labels, names, t.name, exports, batches, f["repeats"])


def sweep_units(f: dict, suite, chosen: dict[str, str], batch_label: str) -> list[tuple]:
    """The prompt axis: (label, prompt ids, slots) for each chosen prompt alone, or with --batch each
    batch of B cycling through them (with --refill a queue of them on B slots; slots None else)."""
    batches = f["batches"]
    queue_length(f, 1)  # --queue without --refill is refused
    if f.get("refill") and not batches:
        raise BadInput("--refill", "serves a queue on --batch slots: give --batch")
    queue = lambda b: queue_length(f, b)  # --refill's requests for b slots, else None
    return (
        [(batch_label, suite.batch_ids(chosen, queue(b) or b), b if queue(b) else None) for b in batches]
        if batches
        else [(pid, [pid], None) for pid in chosen]
    )


def sweep_prompts(f: dict, given: set[str], suite) -> tuple[dict[str, str], str]:
    """(the chosen prompts, what a batch of them is called): --prompts of the suite, all of a
    --prompts-file by default; a batch cycles the whole suite unless --prompts chose."""
    mixed = bool(f["batches"]) and "prompt_spec" not in given
    spec = "all" if f.get("prompts_file") and "prompt_spec" not in given else f["prompt_spec"]
    try:
        chosen = suite.texts() if mixed else suite.select(spec)
    except ValueError as e:
        raise BadInput("--prompts", str(e)) from None
    return chosen, "all" if mixed else spec


def check_fit(f: dict, suite, encoded: dict[str, list[int]], drafter, draft, t) -> None:
    """Every chosen prompt decodes with the largest K, and the largest batch fits the device."""
    K_max, uses = max(f["K"]), [m for m in (draft, t) if m is not None]
    for pid, ids in encoded.items():
        reach = drafter.reach(K_max)
        check_decodable(ids, f["n_tokens"], reach, uses, drafter.reach_setting, origin(suite, pid))
    for b in sorted(f["batches"] or [], reverse=True)[:1]:
        check_batch(b, f["host_loop"], drafter, draft, t, list(encoded.values()), f["n_tokens"], K_max)


def sweep_output(f: dict) -> tuple[str, dict[str, str | None], list[dict]]:
    """(--output, the exports, the rows --resume finds there), checked: nothing is overwritten
    unless --force says so."""
    if f["resume"] and not f["output"]:
        raise BadInput("--resume", "needs --output FILE.json, the file to resume")
    if f["resume"] and f["force"]:
        raise BadInput("--force", "starts --output over, --resume extends it: give one of them")
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
    return output, exports, rows


def sweep_fixed(f: dict, t) -> dict:
    """The settings every row of a sweep shares, which --resume must find the same."""
    import jax

    from specbench.model.decode.sampling import sampler_for
    from specbench.model.decode.verify import kind_for
    from specbench.model.nets import network
    from specbench.model.nets.layouts import kernels_used

    loop = "host" if f["host_loop"] else "device"
    fixed = {k: f[k] for k in ("dtype", "top_k", "n_tokens", "seed")} | {"target": t.name, "loop": loop}
    fixed |= {"kernels": kernels_used(t.params), "verdict": kind_for(jax.default_backend())}
    fixed["sampler"] = sampler_for(jax.default_backend())
    fixed["architecture"] = network.architecture(t.config)
    return fixed


def cell_label(kind: str, drafter, K: int, temperature: float, top_p: float | None, pid: str) -> str:
    """What a sweep's cell varies, for its progress line."""
    top = f" top-p={top_p:g}" if top_p else ""
    method = f" verify={drafter.verify}" if drafter.verify != "token" else ""
    method += f" drafts={drafter.drafts}" if drafter.drafts > 1 else ""
    method += f" a={drafter.acceptance:g}" if drafter.acceptance is not None else ""
    return f"{kind}{method} K={K} T={temperature:g}{top} {pid}"
