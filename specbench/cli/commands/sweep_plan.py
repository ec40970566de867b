"""`sweep`'s plan: the grid over drafters, prompts (or batch sizes), temperatures, top-p and K,
checked before anything runs, less the rows --resume finds done."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.paths import (
    check_exports,
    check_grid_resume,
    check_resume_settings,
    check_save_path,
    results_dir,
    stamp,
)
from specbench.cli.asked.settings import Cell, Settings
from specbench.cli.asked.suites import suite_of
from specbench.cli.commands import grid
from specbench.cli.commands.jobs import Job
from specbench.cli.commands.loading import load_peers
from specbench.cli.commands.plan import check_fit, drafter_models
from specbench.errors import ExportError
from specbench.model.checkpoints import tokenizer
from specbench.results import export
from specbench.results import schema as results
from specbench.results.requests import slo_text
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


def sweep_plan(s: Settings) -> SweepPlan:
    """`sweep`: the grid over drafters, prompts (or batch sizes), temperatures, top-p and K
    (Settings.of_sweep, checked), less the rows --resume finds done."""
    suite = suite_of(s.prompts, s.seed)
    chosen, batch_label = sweep_prompts(s, suite)
    output, exports, rows = sweep_output(s)
    models, t = drafter_models(s)  # the model each kind drafts with
    made = grid.bases(s, models, t)
    start = not s.dry_run
    load = lambda b: load_peers(s.peers, grid.first(s, b)[0], b.model, t, s.most_batch, start, s.temperatures)
    peers = {kind: load(base) for kind, base in made.items()}
    encoded = {pid: tokenizer.for_model(t).encode(text) for pid, text in chosen.items()}
    for base in made.values():  # a tree's reach is the same for every variant: one tree
        check_fit(s, suite, encoded, base, t)
    # the prompt axis: each chosen prompt alone, or (with --batch) the batch of B cycling through them
    units = sweep_units(s, suite, chosen, batch_label)
    fixed = sweep_fixed(s, t)
    check_resume_settings(rows, {**fixed, "repeats": s.repeats, "warmup": s.warmup}, output)
    done = {results.sweep_key(r) for r in rows}
    keys, todo, labels = [], [], []
    planned = grid.grid(s, made, t, units, (suite, chosen, encoded), peers)
    for cell, drafter, name, unit, job in planned:
        varied = {"K": cell.K, "temperature": cell.temperature, "top_p": cell.top_p, "prompt_id": unit.label}
        varied |= {"batch": unit.slots or len(unit.ids), "queue": len(unit.ids) if unit.slots else None}
        varied |= {"request_rate": job.config.request_rate, "slo": slo_text(s.slo) if unit.slots else None}
        key = {**fixed, **varied, "draft": name, **drafter_settings(drafter), **job.config.weight_formats}
        # the cell's rows: specbench's and each peer's, measured together; done when all are there
        cell_keys = [{**key, "implementation": i} for i in ["specbench", *s.peers]]
        keys += cell_keys
        if all(results.sweep_key(k_) in done for k_ in cell_keys):
            continue
        todo.append(job)
        slots, n = unit.slots, len(unit.ids)
        size = f" batch {slots} queue {n}" if slots else f" batch {n}" if s.batches else ""
        labels.append(cell_label(cell, drafter, unit.label) + size)
    check_grid_resume(rows, keys, output)
    if not s.output.path and not s.dry_run:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    names = list(dict.fromkeys(p.name for p in planned))
    return SweepPlan(output, rows, len(planned), todo, labels, names, t.name, exports, s.batches, s.repeats)


def sweep_units(s: Settings, suite, chosen: dict[str, str], batch_label: str) -> list[grid.Unit]:
    """The prompt axis: each chosen prompt alone, or with --batch each batch of B cycling through
    them (with --refill a queue of them on B slots)."""
    if not s.batches:
        return [grid.Unit(pid, [pid]) for pid in chosen]
    return [
        grid.Unit(batch_label, suite.batch_ids(chosen, s.queue_for(b) or b), b if s.refill else None)
        for b in s.batches
    ]


def sweep_prompts(s: Settings, suite) -> tuple[dict[str, str], str]:
    """(the chosen prompts, what a batch of them is called): --prompts of the suite, all of a
    --prompts-file by default; a batch cycles the whole suite unless --prompts chose."""
    chose = "prompt_spec" in s.given
    mixed = bool(s.batches) and not chose
    spec = "all" if s.prompts.file and not chose else s.prompts.spec
    try:
        chosen = suite.texts() if mixed else suite.select(spec)
    except ValueError as e:
        raise BadInput("--prompts", str(e)) from None
    return chosen, "all" if mixed else spec


def sweep_output(s: Settings) -> tuple[str, dict[str, str | None], list[dict]]:
    """(--output, the exports, the rows --resume finds there), checked: nothing is overwritten
    unless --force says so."""
    o = s.output
    if o.resume and not o.path:
        raise BadInput("--resume", "needs --output FILE.json, the file to resume")
    if o.resume and o.force:
        raise BadInput("--force", "starts --output over, --resume extends it: give one of them")
    output = o.path or str(results_dir(create=False) / f"sweep-{stamp()}.json")
    if Path(output).exists() and not (o.resume or o.force):
        raise BadInput("--output", f"{output} exists: --resume extends it, --force starts it over")
    exports = check_exports(o.export_paths, o.path)
    if not o.path:
        check_save_path(Path(output), "--output")
    rows = []
    if o.resume and Path(output).exists():
        try:
            rows = export.read_json(output)
        except ExportError as e:
            raise BadInput("--resume", str(e)) from None
    return output, exports, rows


def sweep_fixed(s: Settings, t) -> dict:
    """The settings every row of a sweep shares, which --resume must find the same."""
    import jax

    from specbench.model.decode.sampling import sampler_for
    from specbench.model.decode.verify import kind_for
    from specbench.model.kernels.pallas_layers import backend
    from specbench.model.nets import network
    from specbench.model.nets.layouts import kernels_used

    loop = "host" if s.host_loop else "device"
    fixed = {"dtype": s.models.dtype, "top_k": s.top_k, "n_tokens": s.n_tokens, "seed": s.seed}
    fixed |= {"target": t.name, "loop": loop}
    fixed |= {"kernels": kernels_used(t.params), "verdict": kind_for(jax.default_backend())}
    fixed["pallas_backend"] = backend() if fixed["kernels"] == "pallas" else None
    fixed["sampler"] = sampler_for(jax.default_backend())
    fixed["architecture"] = network.architecture(t.config)
    return fixed


def cell_label(cell: Cell, drafter, prompt_label: str) -> str:
    """What a sweep's cell varies, for its progress line."""
    top = f" top-p={cell.top_p:g}" if cell.top_p else ""
    method = f" verify={drafter.verify}" if drafter.verify != "token" else ""
    method += f" drafts={drafter.drafts}" if drafter.drafts > 1 else ""
    method += f" a={drafter.acceptance:g}" if drafter.acceptance is not None else ""
    return f"{cell.kind}{method} K={cell.K} T={cell.temperature:g}{top} {prompt_label}"
