"""From flags to a checked plan: one typed object per command, every value checked (checks.py)
before any work starts, as hyperfine parses its options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specbench.cli.asked.checks import check_batch, check_decodable, kinds_that
from specbench.cli.asked.console import BadInput, bad_input
from specbench.cli.asked.paths import (
    check_exports,
    check_save_path,
    results_dir,
    stamp,
)
from specbench.cli.asked.settings import Roofline, Settings
from specbench.cli.asked.suites import origin, resolve_prompt, suite_of
from specbench.cli.commands import grid
from specbench.cli.commands.grid import Base
from specbench.cli.commands.heads import drafting_model, load_head, load_mtp, own_draft
from specbench.cli.commands.jobs import Job
from specbench.cli.commands.loading import (
    check_backend,
    load_model,
    load_pair,
    load_peers,
    on_mesh,
    random_model,
)
from specbench.errors import WeightsError
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.drafters import KINDS
from specbench.model.decode.sampling import Warp
from specbench.weight_format import NAMES as DTYPES


@dataclasses.dataclass(frozen=True)
class RunPlan:
    job: Job
    dtype: str
    exports: dict[str, str | None]
    save_path: Path | None


def drafter_models(s: Settings) -> tuple[dict, object]:
    """({kind: the model it drafts with: the draft model, the EAGLE head or None}, the target),
    each loaded once and only where one of the kinds needs it."""
    kinds, m = s.kinds, s.models
    need_draft = bool(set(kinds_that("draft_model")) & set(kinds))
    model_flags = (m.kernels, m.random_init, m.mesh, s.draft_device)
    d, t = load_pair(
        m.draft,
        m.target,
        m.dtype,
        need_draft,
        *model_flags,
        target_dtype=m.target_dtype,
        draft_dtype=m.draft_dtype,
    )
    if m.mesh and (heads := set(kinds_that("features")) & set(kinds)):
        raise BadInput(
            "--drafter", f"{' and '.join(sorted(heads))} do not run on a mesh yet: a head is not placed there"
        )
    heads = {  # each head-reading kind's head, by the flag that names its folder
        "eagle_head": lambda: load_head(m.eagle_head, t),
        "mtp_head": lambda: load_mtp(m.mtp_head, t),
    }
    head = {k: heads[KINDS[k].flags[0]]() for k in kinds if KINDS[k].features}
    models = {kind: drafting_model(kind, d, head.get(kind)) for kind in kinds}
    for kind in kinds:  # a kind whose own draft stands in for a --draft not of its kind (pard's)
        models[kind] = own_draft(KINDS[kind], models[kind], m.draft_dtype or m.dtype, m.kernels)
    return models, t


def check_fit(s: Settings, suite, encoded: dict[str, list[int]], base: Base, t) -> None:
    """Every chosen prompt decodes with the largest K, and the largest batch fits the device."""
    K_max, uses, drafter = max(s.Ks), [m for m in (base.model, t) if m is not None], base.drafter
    for pid, ids in encoded.items():
        check_decodable(
            ids, s.n_tokens, drafter.reach(K_max), uses, drafter.reach_setting, origin(suite, pid)
        )
    b = s.most_batch
    check_batch(b, s.host_loop, drafter, base.model, t, list(encoded.values()), s.n_tokens, K_max)


def run_plan(s: Settings) -> RunPlan:
    """`run`: one configuration (Settings.of_run, checked), planned as a grid of one cell."""
    suite = suite_of(s.prompts, s.seed)
    chose_prompt = bool({"prompt", "prompt_id"} & s.given)
    exports = check_exports(s.output.export_paths)
    save_path = results_dir(create=False) / f"run-{stamp()}.json" if s.output.save else None
    if save_path:
        check_save_path(save_path)
    prompt, prompt_id = resolve_prompt(s.prompts, s.given, suite)
    batch, queue = s.most_batch, s.queue_for(s.most_batch)
    # a batch (or a queue): the suite's prompts cycled, unless a prompt was chosen, then repeated
    chosen = {prompt_id: prompt} if chose_prompt or (batch == 1 and not queue) else suite.texts()
    if (batch > 1 or queue) and not chose_prompt:
        prompt_id = "all"
    models, t = drafter_models(s)
    made = grid.bases(s, models, t)
    by_id = {pid: tokenizer.for_model(t).encode(text) for pid, text in chosen.items()}
    ((kind, base),) = made.items()  # run's one drafter
    start = not s.dry_run  # a dry run starts no peer
    check_fit(s, suite, by_id, base, t)
    peers = {kind: load_peers(s.peers, grid.first(s, base)[0], base.model, t, batch, start, s.temperatures)}
    unit = grid.Unit(prompt_id, suite.batch_ids(chosen, queue or batch), batch if queue else None)
    (planned,) = grid.grid(s, made, t, [unit], (suite, chosen, by_id), peers)
    if save_path and not s.dry_run:
        results_dir(create=True)  # every check has passed: the folder the user named can be made
    return RunPlan(planned.job, s.models.dtype, exports, save_path)


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


def trace_plan(s: Settings) -> TracePlan:
    """`trace`: one generation (Settings.of_run, checked)."""
    suite = suite_of(s.prompts, s.seed)
    prompt, prompt_id = resolve_prompt(s.prompts, s.given, suite)
    models, t = drafter_models(s)
    (base,) = grid.bases(s, models, t).values()
    drafter, draft_name = grid.first(s, base)
    ids = tokenizer.for_model(t).encode(prompt)
    check_fit(s, suite, {prompt_id: ids}, base, t)
    (K,), (temperature,), (top_p,) = s.Ks, s.temperatures, s.top_ps
    warp = Warp(temperature, s.top_k, top_p)
    return TracePlan(prompt, ids, base.model, t, drafter, draft_name, K, warp, s.n_tokens, s.seed)


def roofline_plan(r: Roofline) -> tuple[list[tuple], dict[str, str | None]]:
    """`roofline`: ([(model, dtype)], {format: path}), every check before any timing."""
    from specbench.measure import device
    from specbench.model.checkpoints import weights

    exports = check_exports(dict(r.exports))
    check_backend()
    dtypes = list(r.dtypes) or (["float32", "bfloat16"] if device.on_gpu() else ["float32"])
    if any(d not in DTYPES for d in dtypes):
        raise BadInput("--dtype", f"values must be {', '.join(DTYPES)}")
    try:
        names = list(r.models) or list(weights.default_pair()[::-1])
    except WeightsError as e:
        raise bad_input(e, "--model") from None
    if r.mesh and set(r.kernels) - {"auto", "xla"}:
        raise BadInput("--kernels", "a model split over a mesh runs on XLA's products: use auto or xla")
    kernels = ["xla"] if r.mesh else list(r.kernels)
    load = random_model if r.random_init else lambda *a: load_model(a[0], "--model", *a[1:])
    runs = [
        (on_mesh(None, load(n, dtype, k), r.mesh)[1], dtype)
        for n in names
        for dtype in dtypes
        for k in kernels
    ]
    for model, _ in runs:
        if r.context > model.config.n_ctx:
            raise BadInput(
                "--context",
                f"{r.context} exceeds {model.name}'s context of {model.config.n_ctx} "
                f"tokens; use at most {model.config.n_ctx}",
            )
    if r.K + 1 > r.context:
        raise BadInput("--K", f"K+1 = {r.K + 1} must fit the cache of --context {r.context}")
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
