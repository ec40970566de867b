"""`specbench report`: a standard battery of measurements with one pair, saved row by row, and
one page that shows them (page.py).

The battery is a list of sections; each names the jobs (plan.Job: one row each) it shows.
Jobs that several sections show (K = 4, T = 0 on the default prompt) are measured once. Every
row is written to DIR/rows.json and rows.csv as it finishes, with the load other processes put
on the machine while it was measured (load.py); `--resume` measures only the jobs that are
missing, after checking that DIR holds a report of the same settings.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specbench import prompts
from specbench.cli.asked.checks import check_batch, check_decodable
from specbench.cli.asked.settings import Drafting, Method, Settings, checked
from specbench.cli.asked.suites import origin, suite_of
from specbench.cli.commands import grid
from specbench.cli.commands.battery import TREE_SHAPE, Battery
from specbench.cli.commands.grid import drafts_for
from specbench.cli.commands.heads import default_head, drafting_model
from specbench.cli.commands.jobs import Job, measure_into
from specbench.cli.commands.loading import load_pair, load_peers
from specbench.cli.commands.report_files import STATE_FILE, check_directory, save_state
from specbench.cli.views.words import plural
from specbench.measure import load
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.sampling import Warp
from specbench.model.nets.families import family_of
from specbench.results.sections import BY_ID, SECTIONS

# what a report made before a setting existed was measured with
FIXED_SECONDS = 30.0  # a dry run's rough time for the roofline, and for the self-test
K_DEFAULT = 4
SELFTEST_SAMPLES = 20000  # the self-test's generations per sampler (selftest.run): seconds on a CPU
N_TOKENS = 40  # new tokens per generation, every job


@dataclasses.dataclass(frozen=True)
class ReportPlan:
    directory: Path
    settings: dict  # what --resume must find the same
    battery: Battery
    draft: object
    target: object
    jobs: dict[str, Job]  # job id -> job
    shows: dict[str, list[str]]  # section id -> the job ids it shows
    done: list[dict]  # rows already in the directory (--resume)
    resume: bool
    dtype: str


def job_id(kind: str, dynamic: bool, K: int, warp: Warp, pid: str, batch: int, method=None, tree=None) -> str:
    p = f"-top_p{warp.top_p:g}" if warp.top_p else ""
    verify, drafts, acceptance = method or ("token", 1, None)
    how = (f"-{verify}" if verify != "token" else "") + (f"-x{drafts}" if drafts > 1 else "")
    how += f"-a{acceptance:g}" if acceptance is not None else ""
    how += f"-tree{'x'.join(map(str, tree))}" if tree else ""
    return f"{kind}{'-dynamic' if dynamic else ''}{how}-K{K}-T{warp.temperature:g}{p}-{pid}-b{batch}"


def report_settings(s: Settings, quick: bool, suite) -> dict:
    """What --resume must find the same: the battery, the pair and how it runs, the prompts."""
    m, vocab = s.models, s.drafting.draft_vocab
    settings = {"quick": quick, "draft": m.draft, "target": m.target, "dtype": m.dtype, "kernels": m.kernels}
    settings |= {"peers": list(s.peers), "draft_vocab": "full" if vocab is None else vocab}
    for flag, value in (("random_init", m.random_init), ("mesh", m.mesh)):  # recorded only when set:
        if value:  # older reports resume as they were
            settings[flag] = value
    if suite is not prompts.BUILTIN:
        listed = "\n".join(f"{p.id}\t{p.category}\t{p.text}" for p in suite.prompts)
        settings |= {"prompts_file": suite.source, "prompts_sha": prompts.prompt_hash(listed)}
    return settings


@dataclasses.dataclass
class Jobs:
    """The report's jobs as the battery adds them, one per distinct configuration, and which
    sections show each."""

    battery: Battery
    d: object
    t: object
    head: object  # the target's EAGLE head, or None
    drafting: Drafting  # what every job's drafter shares (--draft-vocab)
    encoded: dict[str, list[int]]  # the suite's prompts, tokenised
    peer_names: tuple[str, ...] = ()
    jobs: dict[str, Job] = dataclasses.field(default_factory=dict)
    shows: dict[str, list[str]] = dataclasses.field(default_factory=lambda: {s.id: [] for s in SECTIONS})

    def add(self, section, kind="model", dynamic=False, K=K_DEFAULT, warp=Warp(), pid=None, batch=1, **kw):
        """A job of these settings (once), shown in `section`. kw: peers, method (verify, drafts,
        acceptance), mixed (a batch cycles the suite; else repeats pid) and tree."""
        suite = self.battery.suite
        pid = pid or self.battery.default_prompt
        mixed, refilled = kw.get("mixed", True) and batch > 1, kw.get("refill", False)
        queue = self.battery.QUEUE_PER_SLOT * batch if refilled else None
        ids = suite.batch_ids(suite.texts(), queue or batch) if mixed else [pid] * batch
        label = "all" if mixed else pid
        method, tree, peers = Method(*(kw.get("method") or ())), kw.get("tree"), kw.get("peers", ())
        name = job_id(kind, dynamic, K, warp, label, batch, method, tree) + ("-refill" if refilled else "")
        if name not in self.jobs:
            a = method.acceptance
            s = Settings(
                kinds=(kind,),
                Ks=(K,),
                temperatures=(warp.temperature,),
                top_ps=(warp.top_p,),
                verifies=(method.verify,),
                drafts=(method.drafts,),
                acceptances=None if a is None else (a,),
                batches=(batch,),
                drafting=dataclasses.replace(self.drafting, dynamic_K=dynamic, tree=tree),
                n_tokens=N_TOKENS,
                repeats=self.battery.repeats,
                refill=refilled,
                queue=queue,
                peers=self.peer_names if peers else (),
            )
            s = checked(s)  # the battery's settings, checked as a user's are
            made = grid.bases(s, {kind: drafting_model(kind, self.d, self.head)}, self.t)
            unit = grid.Unit(label, ids, batch if refilled else None)
            prompts = (suite, suite.texts(), self.encoded)
            (planned,) = grid.grid(s, made, self.t, [unit], prompts, {kind: peers})
            self.jobs[name] = planned.job
        self.shows[section].append(name)


def report_plan(s: Settings, quick: bool) -> ReportPlan:
    """Every check before anything is written: the directory, --resume's settings, the pair,
    that the largest batch fits. `s`: report's options (Settings.of_report); `quick`: the battery."""

    m, o = s.models, s.output
    directory, suite = Path(o.path), suite_of(s.prompts)
    battery, settings = Battery(quick, suite), report_settings(s, quick, suite)
    done = check_directory(directory, settings, o.resume, o.force)
    d, t = load_pair(m.draft, m.target, m.dtype, kernels=m.kernels, random=m.random_init, mesh=m.mesh)
    chains_only = not family_of(t.config).trees  # a T5 verifies chains so far: no trees section
    head = None if m.mesh else default_head(t)  # the target's EAGLE head (not on a mesh yet): eagle joins
    drafting = Drafting(draft_vocab=s.drafting.draft_vocab)
    encoded = {pid: tokenizer.for_model(t).encode(text) for pid, text in suite.texts().items()}
    jobs = Jobs(battery, d, t, head, drafting, encoded, s.peers)
    add = jobs.add
    model_drafter, _ = grid.drafter_of("model", d, t, drafting)
    peers = load_peers(list(s.peers), model_drafter, d, t, 1, start=not s.dry_run)
    for pid in battery.categories:
        add("categories", pid=pid, peers=peers)
        add("requests", pid=pid, peers=peers)  # the same jobs, read per request
    for K in battery.Ks:
        add("K", K=K)
    for warp in battery.warps:
        add("temperature", warp=warp)
    for kind, dynamic in battery.drafters + ([("eagle", False)] if head else []):
        if drafts_for(kind, t):  # a T5's drafters: the model, lookup, dynamic K
            add("drafters", kind=kind, dynamic=dynamic)
    for kind, tree, verify in [] if chains_only else battery.trees(eagle=head is not None):
        add("trees", kind=kind, K=len(TREE_SHAPE), warp=Warp(1.0), method=(verify, 1, None), tree=tree)
    for b in battery.batches:  # distinct prompts, and one prompt repeated as the upper bound
        add("batch", batch=b)
        if b > 1 and battery.repeated_prompt:
            add("batch", batch=b, mixed=False)
        if b > 1 and battery.refilled:
            add("batch", batch=b, refill=True)  # the slots refilled from a queue, as servers run them
    for verify, drafts in battery.methods:
        add("verification", warp=Warp(1.0), method=(verify, drafts, None))
    for a in battery.acceptances:
        add("dial", kind="dial", method=("token", 1, a))
    for job in jobs.jobs.values():
        drafter = job.config.drafter
        for pid, ids in zip(job.ids, job.encoded):
            where = origin(suite, pid)
            check_decodable(ids, N_TOKENS, drafter.reach(job.config.K), [d, t], drafter.reach_setting, where)
    planned = one_cache_length(jobs.jobs, [d, t])
    check_batch(
        max(battery.batches), False, model_drafter, d, t, list(encoded.values()), N_TOKENS, max(battery.Ks)
    )
    return ReportPlan(
        directory, settings, battery, d, t, planned, jobs.shows, done, resume=o.resume, dtype=m.dtype
    )


def one_cache_length(jobs: dict[str, Job], models: list) -> dict[str, Job]:
    """The jobs with one cache length, the longest any of them needs: a job's compiled programs
    (the generations, the step timers) then serve every other job of the same shape and
    settings, in its section and others, instead of compiling again for a cache of another length."""
    from specbench.model import generate

    needs = [
        generate.plan(job.encoded, N_TOKENS, job.config.drafter.reach(job.config.K), models)
        for job in jobs.values()
    ]
    longest = max(needs)
    return {
        name: dataclasses.replace(job, config=dataclasses.replace(job.config, max_len=longest))
        for name, job in jobs.items()
    }


def measure(plan: ReportPlan, on_progress) -> tuple[list[dict], dict]:
    """Measure the jobs not yet done, section by section, saving rows as they finish; then the
    roofline and the self-test. Returns (rows, sections' load and extra results)."""
    from specbench.measure import device, roofline, selftest

    plan.directory.mkdir(parents=True, exist_ok=True)
    rows = list(plan.done)
    have = {r.get("report_job") for r in rows}
    state = {"sections": {}}
    if plan.resume:  # the sections already measured (roofline, self-test) are kept too
        state = json.loads((plan.directory / STATE_FILE).read_text())
    sections = state.get("sections", {})
    save_state(plan, sections)
    files = {"json": str(plan.directory / "rows.json"), "csv": str(plan.directory / "rows.csv")}
    helpers = tuple({p.pid for job in plan.jobs.values() for p in job.config.peers})  # the peers' workers
    step = 0
    for section, ids in plan.shows.items():
        todo = [i for i in ids if i not in have]
        if section == "roofline" and "roofline" not in sections:
            todo = ["roofline"]
        if section == "exactness" and "selftest" not in sections.get("exactness", {}):
            todo = ["selftest"]
        if not todo:
            continue
        start = load.snapshot(helpers)
        extra = {}
        for name in todo:
            on_progress(step, f"{BY_ID[section].title}: {name}", rows)
            if name == "roofline":
                # the jobs' own cache length: their step timers then reuse the roofline's programs
                context = next(iter(plan.jobs.values())).config.max_len
                pair = [(plan.target, plan.dtype), (plan.draft, plan.dtype)]
                iters = plan.battery.roofline_iters
                extra["rows"] = roofline.measure_runs(pair, K_DEFAULT, context, iters, lambda **_: None)
                extra["context"] = device.context()
            elif name == "selftest":
                extra["selftest"] = selftest.run(n_samples=SELFTEST_SAMPLES)
            else:
                job, tag = plan.jobs[name], {"report_job": name}
                measure_into(job, rows, files, plan.dtype, key=job_row_key, tag=tag)
                have.add(name)
            step += 1
        end, before = load.snapshot(helpers), sections.get(section, {})
        seconds = before.get("seconds", 0.0) + end.wall - start.wall
        sections[section] = {**before, **extra, **load.others(start, end), "seconds": seconds}
        save_state(plan, sections)
    return rows, sections


def job_row_key(row: dict) -> tuple:
    """What tells a report's rows apart: the job, and whose implementation (specbench's or a peer's)."""
    return row.get("report_job"), row.get("implementation", "specbench")


def total_steps(plan: ReportPlan) -> int:
    """Progress units: each job, the roofline, the self-test."""
    return len(plan.jobs) + 2


def left_to_measure(plan: ReportPlan) -> int:
    """Progress units --resume still has to measure: the jobs without a row, the roofline and the
    self-test where the report's state has none."""
    have = {r.get("report_job") for r in plan.done}
    state = plan.directory / STATE_FILE
    sections = json.loads(state.read_text()).get("sections", {}) if plan.resume and state.is_file() else {}
    return (
        sum(name not in have for name in plan.jobs)
        + ("roofline" not in sections)
        + ("selftest" not in sections.get("exactness", {}))
    )


def page_info(plan: ReportPlan, sections: dict) -> dict:
    """What the page's header and its device section say."""
    import jax

    from specbench.measure import device
    from specbench.model.nets import network

    describe = lambda m: f"{m.name} ({network.shape(m.config)}, {m.config.n_params / 1e6:.1f}M)"
    memory = device.memory_bytes()
    b = plan.battery
    seconds = sum(s.get("seconds", 0) for s in sections.values())
    measured = list(sections.values()) or [{}]
    first, last = measured[0], measured[-1]
    return {
        "pair": f"draft {plan.draft.name} · target {plan.target.name}"
        + ("" if b.suite is prompts.BUILTIN else f" · prompts from {b.suite.source}"),
        "battery": f"{'quick' if b.quick else 'full'} battery, {plural(b.repeats, 'repeat')}, N = {N_TOKENS}",
        "quick_left_out": b.left_out(eagle=any(j.config.drafter.spec.features for j in plan.jobs.values())),
        "K": K_DEFAULT,
        "device": {
            **(sections.get("roofline", {}).get("context") or device.context()),  # when it was measured
            "memory": f"{memory / 2**30:.1f} GiB" if memory else "unknown",
            "JAX backend": jax.default_backend(),
            "dtype": plan.dtype,
            "draft": describe(plan.draft),
            "target": describe(plan.target),
            "measuring took": f"{seconds:.0f} s (compiles included)",
            "load average, start → end": " → ".join(
                f"{x:.2f}" if x is not None else "?"
                for x in (first.get("load_average_start"), last.get("load_average_end"))
            ),
            "measured under load": ", ".join(k for k, v in sections.items() if v.get("under_load")) or "no",
        },
        "left_out": (  # a section the pair cannot run, and why (page.render says so in its place)
            {"trees": f"{plan.target.name} is a T5, which verifies chains so far: no trees were measured."}
            if not family_of(plan.target.config).trees
            else {}
        ),
    }
