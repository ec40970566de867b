"""From flags to a checked plan: every model, drafter, prompt, size, path and resume file is
checked here, before any work, into one typed object per command (as hyperfine parses its
options). A bad value becomes BadInput, one line naming the flag."""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path

from specbench import export, prompts, results, tokenizer
from specbench.bench import RunConfig
from specbench.console import BadInput, bad_input
from specbench.errors import DecodeError, ExportError, WeightsError
from specbench.sampling import Warp

FORMATS = {"export_csv": "csv", "export_json": "json", "export_markdown": "markdown"}


# ---------------------------------------------------------------------------------------------
# Models and drafters


def load_model(name: str, flag: str, dtype: str, cache: dict | None = None):
    """A model by registry name, alias or directory; BadInput naming `flag` if it cannot be had."""
    import jax.numpy as jnp

    from specbench import weights

    cache = {} if cache is None else cache
    if (name, dtype) not in cache:
        try:
            cache[name, dtype] = weights.load_model(
                name, jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
            )
        except WeightsError as e:
            raise BadInput(flag, str(e)) from None
    return cache[name, dtype]


def load_pair(draft: str | None, target: str | None, dtype: str, need_draft: bool = True):
    """(draft, target) models; the draft is None when the drafter needs no draft model."""
    from specbench import weights

    default_draft, default_target = weights.default_pair()
    d = load_model(draft or default_draft, "--draft", dtype) if need_draft else None
    t = load_model(target or default_target, "--target", dtype)
    if d is not None and d.config.n_vocab != t.config.n_vocab:
        raise BadInput(
            "--draft/--target",
            f"draft and target must share the vocabulary "
            f"({d.name}: {d.config.n_vocab}, {t.name}: {t.config.n_vocab})",
        )
    return d, t


def random_model(name: str, dtype: str):
    """Random weights of a registry shape (timing only)."""
    import jax.numpy as jnp

    from specbench import weights
    from specbench.gpt2 import init_params

    try:
        spec = weights.resolve(name)
    except WeightsError as e:
        raise BadInput("--model", str(e)) from None
    if not isinstance(spec, weights.ModelSpec):
        raise BadInput("--random-init", "needs registry names (a directory has weights already)")
    jdtype = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
    return weights.Model(spec.name, spec.config, init_params(spec.config, 0, jdtype), "random")


def check_drafter_flags(kinds: list[str], f: dict) -> None:
    """The drafter flags, checked before any model is loaded."""
    from specbench.drafters import KINDS

    for kind in kinds:
        if kind not in KINDS:
            raise BadInput("--drafter", f"{kind!r} is not a drafter; use {', '.join(KINDS)}")
    if f["draft"] is not None and "model" not in kinds:
        raise BadInput(
            "--draft", f"only the model drafter uses a draft model ({', '.join(kinds)} draft without one)"
        )
    if f["ngram"] < 1:
        raise BadInput("--ngram", f"must be >= 1 (got {f['ngram']})")
    if f["draft_layers"] is not None and f["draft_layers"] < 1:
        raise BadInput(
            "--draft-layers", f"must be >= 1 and below the target's depth (got {f['draft_layers']})"
        )
    if not 0 < f["draft_confidence"] < 1:
        raise BadInput("--draft-confidence", f"must be in (0, 1) (got {f['draft_confidence']:g})")
    if f["dynamic_K"] and kinds == ["lookup"]:
        raise BadInput("--dynamic-K", "needs a drafter with probabilities (model or layerskip), not lookup")


def make_drafter(kind: str, draft, target, f: dict):
    """(Drafter, the name result rows give its draft)."""
    from specbench import drafters

    conf = f["draft_confidence"] if f["dynamic_K"] and kind != "lookup" else None
    if kind == "lookup":
        return drafters.lookup_drafter(f["ngram"]), f"lookup(n={f['ngram']})"
    if kind == "layerskip":
        n_layer = target.config.n_layer
        L = f["draft_layers"] or max(1, n_layer // 3)
        if not 1 <= L < n_layer:
            raise BadInput(
                "--draft-layers", f"must be in 1..{n_layer - 1}: {target.name} has {n_layer} layers (got {L})"
            )
        return drafters.layerskip_drafter(target.config, L, conf), f"{target.name}[:{L}]"
    return drafters.model_drafter(draft.config, conf), draft.name


# ---------------------------------------------------------------------------------------------
# Prompts, sizes and memory


def resolve_prompt(prompt: str, prompt_id: str | None) -> tuple[str, str]:
    """(text, id) for run and trace: --prompt-id names one built-in prompt; else the text's own id."""
    everything = prompts.all_prompts()
    if prompt_id is None:
        return prompt, next((pid for pid, text in everything.items() if text == prompt), "custom")
    if prompt_id not in everything:
        several = prompt_id == "all" or prompt_id in prompts.PROMPTS or "," in prompt_id
        hint = (
            "this command decodes one prompt; `specbench sweep --prompts " + prompt_id + "` runs several"
            if several
            else "see `specbench prompts`"
        )
        raise BadInput("--prompt-id", f"{prompt_id!r} is not a prompt id ({', '.join(everything)}); {hint}")
    return everything[prompt_id], prompt_id


def check_decodable(prompt_ids, n_tokens: int, K: int, models: list) -> None:
    """The prompt, N and K fit every model; else BadInput blaming the setting the DecodeError names."""
    from specbench.decoding import validate

    try:
        validate(prompt_ids, n_tokens, K, models, None)
    except DecodeError as e:
        raise bad_input(e, "--n-tokens") from None


def check_batch(
    batch: int, host_loop: bool, drafter, d, t, encoded: list[list[int]], n_tokens: int, K: int
) -> None:
    """A batch runs on the device loop, and its caches must fit the device. `encoded` are the
    batch's distinct prompts (the longest sets the cache length)."""
    from specbench import batched, device, generate
    from specbench.gpt2 import param_bytes

    if batch == 1:
        return
    if host_loop:
        raise BadInput(
            "--host-loop", f"drives one sequence; a batch (--batch {batch}) runs in the device loop only"
        )
    configs = [t.config] + ([drafter.config] if drafter.config is not None else [])  # lookup runs no network
    max_len = generate.plan(encoded, n_tokens, K, [m for m in (d, t) if m is not None])
    itemsize = t.params["wte"].dtype.itemsize
    weights = param_bytes(t.params) + (
        param_bytes(d.params) if d is not None and drafter.kind == "model" else 0
    )
    per_seq = batched.memory_bytes(1, configs, max_len, K, t.config.n_vocab, itemsize)
    free = device.memory_bytes()
    if free is not None and weights + batch * per_seq > free:
        gib = lambda b: f"{b / 2**30:.1f} GiB"
        fits = max(0, (free - weights) // per_seq)
        raise BadInput(
            "--batch",
            f"{batch} sequences need about {gib(weights + batch * per_seq)} (K/V caches and "
            f"round buffers for {max_len} positions, and the weights); {device.device_kind()} "
            f"has {gib(free)} free: use at most --batch {fits}",
        )


# ---------------------------------------------------------------------------------------------
# Paths


def stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def results_dir() -> Path:
    """Where run and sweep save by default: $SPECBENCH_RESULTS_DIR (made if missing, since the
    user named it), else the results/ folder of the checkout this package runs from, else the
    working directory. No folder the user did not name is ever created."""
    named = os.environ.get("SPECBENCH_RESULTS_DIR")
    if named:
        try:
            Path(named).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput("SPECBENCH_RESULTS_DIR", f"cannot create {named} ({e.strerror})") from None
        return Path(named)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "results").is_dir():
        return checkout / "results"
    return Path.cwd()


def check_exports(f: dict, output: str | None = None) -> dict[str, str | None]:
    """Every --export-* path (and sweep's --output): the right extension, and writable, before any
    work. Returns {format: path} for export.write_all."""
    paths = {flag: f.get(flag) for flag in FORMATS}
    for flag, path in [*paths.items(), ("output", output)]:
        if path:
            try:
                export.check_writable(path)
                export.check_extension(path, FORMATS.get(flag, "json"))
            except ExportError as e:
                raise BadInput("--" + flag.replace("_", "-"), str(e)) from None
    return {FORMATS[flag]: path for flag, path in paths.items()}


def check_save_path(path: Path, flag: str = "--save") -> None:
    """The default results file must be writable, or say how to avoid it."""
    try:
        export.check_writable(str(path))
    except ExportError as e:
        raise BadInput(
            flag, f"{e}; pass --no-save, or set SPECBENCH_RESULTS_DIR to a writable folder"
        ) from None


def check_resume_settings(rows: list[dict], fixed: dict, output: str) -> None:
    """--resume adds rows only to a file of the same settings: refuse, naming each that differs."""
    differing = []
    for name, value in fixed.items():
        before = {r.get(name) for r in rows}
        if before and before != {value}:
            shown = ", ".join(str(v) for v in sorted(before, key=str))
            differing.append(f"{name} {shown} there, {value} now")
    if differing:
        raise BadInput(
            "--resume",
            f"{output} holds rows of other settings ({'; '.join(differing)}); "
            "pass the same settings, or write to another --output",
        )


# ---------------------------------------------------------------------------------------------
# Plans


@dataclasses.dataclass(frozen=True)
class Job:
    """One row to measure: the benchmark's config and the labels its row carries."""

    config: RunConfig
    draft_name: str
    prompt_id: str
    ids: list[str]  # the batch's prompt ids (one for B = 1)
    texts: list[str]
    encoded: list[list[int]]

    def row(self, res, dtype: str) -> dict:
        from specbench import device

        B = len(self.ids)
        return results.result_row(
            res,
            draft=self.draft_name,
            dtype=dtype,
            prompt_id=self.prompt_id,
            prompt=self.texts if B > 1 else self.texts[0],
            context=device.context(),
            decode=tokenizer.decode,
            batch_prompt_ids=self.ids,
        )


@dataclasses.dataclass(frozen=True)
class RunPlan:
    job: Job
    dtype: str
    exports: dict[str, str | None]
    save_path: Path | None


def run_plan(f: dict, chose_prompt: bool) -> RunPlan:
    """`run`: one configuration, checked. `chose_prompt`: --prompt or --prompt-id was given."""
    exports = check_exports(f)
    save_path = results_dir() / f"run-{stamp()}.json" if f["save"] else None
    if save_path:
        check_save_path(save_path)
    prompt, prompt_id = resolve_prompt(f["prompt"], f["prompt_id"])
    batch = f["batch"]
    # a batch: the built-in prompts cycled, unless a prompt was chosen, which is then repeated
    chosen = {prompt_id: prompt} if chose_prompt or batch == 1 else prompts.all_prompts()
    if batch > 1 and not chose_prompt:
        prompt_id = "all"
    check_drafter_flags([f["drafter"]], f)
    d, t = load_pair(f["draft"], f["target"], f["dtype"], need_draft=f["drafter"] == "model")
    drafter, draft_name = make_drafter(f["drafter"], d, t, f)
    by_id = {pid: tokenizer.encode(text) for pid, text in chosen.items()}
    for ids in by_id.values():
        check_decodable(ids, f["n_tokens"], f["K"], [m for m in (d, t) if m is not None])
    check_batch(batch, f["host_loop"], drafter, d, t, list(by_id.values()), f["n_tokens"], f["K"])
    ids = prompts.batch_ids(chosen, batch)
    config = RunConfig(
        d,
        t,
        drafter,
        f["K"],
        Warp(f["temperature"], f["top_k"], f["top_p"]),
        f["n_tokens"],
        f["seed"],
        f["repeats"],
        f["warmup"],
        not f["host_loop"],
    )
    job = Job(config, draft_name, prompt_id, ids, [chosen[i] for i in ids], [by_id[i] for i in ids])
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


def sweep_plan(f: dict) -> SweepPlan:
    """`sweep`: the grid over drafters, prompts (or batch sizes), temperatures, top-p and K,
    checked, less the rows --resume finds done."""
    if any(not v >= 0 for v in f["temperature"]):
        raise BadInput("--temperature", "values must be >= 0")
    if f["top_p"] and any(not 0 < v <= 1 for v in f["top_p"]):
        raise BadInput("--top-p", "values must be in (0, 1]")
    try:
        chosen = prompts.select(f["prompt_spec"])
    except ValueError as e:
        raise BadInput("--prompts", str(e)) from None
    if f["resume"] and not f["output"]:
        raise BadInput("--resume", "needs --output FILE.json, the file to resume")
    kinds = f["drafter_kinds"]
    check_drafter_flags(kinds, f)
    output = f["output"] or str(results_dir() / f"sweep-{stamp()}.json")
    exports = check_exports(f, output)
    rows = []
    if f["resume"] and Path(output).exists():
        try:
            rows = export.read_json(output)
        except ExportError as e:
            raise BadInput("--resume", str(e)) from None
    d, t = load_pair(f["draft"], f["target"], f["dtype"], need_draft="model" in kinds)
    drafters_ = {kind: make_drafter(kind, d, t, f) for kind in kinds}
    encoded = {pid: tokenizer.encode(text) for pid, text in chosen.items()}
    K_max, batches = max(f["K"]), f["batches"]
    for kind in kinds:
        uses = [m for m in ((d if kind == "model" else None), t) if m is not None]
        for ids in encoded.values():
            check_decodable(ids, f["n_tokens"], K_max, uses)
        for b in sorted(batches or [], reverse=True)[:1]:  # the largest batch, with the largest K, must fit
            check_batch(
                b,
                f["host_loop"],
                drafters_[kind][0],
                uses[0] if kind == "model" else None,
                t,
                list(encoded.values()),
                f["n_tokens"],
                K_max,
            )
    # the prompt axis: each chosen prompt alone, or (with --batch) the batch of B cycling through them
    units = (
        [(f["prompt_spec"], prompts.batch_ids(chosen, b)) for b in batches]
        if batches
        else [(pid, [pid]) for pid in chosen]
    )
    loop = "host" if f["host_loop"] else "device"
    check_resume_settings(
        rows,
        {
            "target": t.name,
            "dtype": f["dtype"],
            "top_k": f["top_k"],
            "n_tokens": f["n_tokens"],
            "seed": f["seed"],
            "loop": loop,
            "repeats": f["repeats"],
            "warmup": f["warmup"],
        },
        output,
    )
    done = {results.sweep_key(r) for r in rows}
    grid, todo, labels = 0, [], []
    for kind in kinds:
        drafter, name = drafters_[kind]
        for pid, ids in units:
            for temp in f["temperature"]:
                for p in f["top_p"] or [None]:
                    for k in f["K"]:
                        grid += 1
                        warp = Warp(temp, f["top_k"], p)
                        key = {
                            "draft": name,
                            "target": t.name,
                            **results.drafter_settings(drafter),
                            "dtype": f["dtype"],
                            "K": k,
                            "temperature": temp,
                            "top_k": f["top_k"],
                            "top_p": p,
                            "prompt_id": pid,
                            "n_tokens": f["n_tokens"],
                            "seed": f["seed"],
                            "loop": loop,
                            "batch": len(ids),
                        }
                        if results.sweep_key(key) in done:
                            continue
                        config = RunConfig(
                            d if kind == "model" else None,
                            t,
                            drafter,
                            k,
                            warp,
                            f["n_tokens"],
                            f["seed"],
                            f["repeats"],
                            f["warmup"],
                            not f["host_loop"],
                        )
                        todo.append(
                            Job(config, name, pid, ids, [chosen[i] for i in ids], [encoded[i] for i in ids])
                        )
                        labels.append(
                            f"{kind} K={k} T={temp:g}"
                            + (f" top-p={p:g}" if p else "")
                            + f" {pid}"
                            + (f" batch {len(ids)}" if batches else "")
                        )
    return SweepPlan(
        output,
        rows,
        grid,
        todo,
        labels,
        [drafters_[k][1] for k in kinds],
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


def trace_plan(f: dict) -> TracePlan:
    """`trace`: one generation, checked."""
    prompt, _ = resolve_prompt(f["prompt"], f["prompt_id"])
    check_drafter_flags([f["drafter"]], f)
    d, t = load_pair(f["draft"], f["target"], f["dtype"], need_draft=f["drafter"] == "model")
    drafter, draft_name = make_drafter(f["drafter"], d, t, f)
    ids = tokenizer.encode(prompt)
    check_decodable(ids, f["n_tokens"], f["K"], [m for m in (d, t) if m is not None])
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
    from specbench import device, weights

    exports = check_exports(f)
    dtypes = f["dtypes"] or (["float32", "bfloat16"] if device.on_gpu() else ["float32"])
    if any(d not in ("float32", "bfloat16") for d in dtypes):
        raise BadInput("--dtype", "values must be float32 or bfloat16")
    names = list(f["model_names"]) or list(weights.default_pair()[::-1])
    load = random_model if f["random_init"] else lambda name, dtype: load_model(name, "--model", dtype)
    runs = [(load(name, dtype), dtype) for name in names for dtype in dtypes]
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
