"""specbench's command line: run, sweep, trace, theory, models, prompts, plot.

Every bad value or impossible configuration ends in one line, `error: ...`, naming the flag and
what is allowed, with exit code 2; Ctrl-C ends with exit code 130 and keeps what was written.
Human-readable output goes to standard output, or to standard error when an export is `-`.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specbench import export, prompts, theory, tokenizer
from specbench.decoding import DecodeError
from specbench.export import ExportError
from specbench.progress import progress as progress_bar
from specbench.tokenizer import TokenizerError
from specbench.weights import WeightsError

METRICS_HELP = """\b
Metrics (one generation of N new tokens; the first comes from the prefill in both AR and SD):
  tokens/round  tokens emitted per speculative round, resampled/bonus token included (AR: 1)
  r             tokens/round / (K+1), the r of the DeepMind paper
  alpha         accepted / (accepted + rejections): MLE of the per-token acceptance rate;
                drafts after a rejection were never tested and do not count. Not vLLM's or
                llama.cpp's "acceptance rate" = accepted / drafted (accept_rate_drafted)
  t_draft       median time of one draft decode step (1 token), device loop, no dispatch
  t_target      median time of one target decode step (1 token)
  t_verify      median time of one target step over K+1 tokens
  speedup       AR wall time / SD wall time, same prompt, N, seed and models; mean ± σ of repeats
  theory        r (K+1) t_target / (K t_draft + t_target)          (DeepMind, seed 003)
  refined       tokens/round t_target / (K t_draft + t_verify)     (with the measured verify step)
  t_round       median time of one whole round in the device loop; overhead = t_round - K t_draft
                - t_verify (warping, accept/reject, the draft's 2-token first step, bookkeeping)
  round model   tokens/round t_ar_token / t_round, t_ar_token one AR token with its sampling: the
                speedup the per-round costs explain; it differs from measured by the prefill
  batch B       B sequences decoded together (AR too); tokens/s count all B x N tokens, and every
                step time is one step of the whole batch. A batch runs until its slowest sequence
                is done: refined and round model use tokens per sequence per round the batch ran
                (tok/batch-round), not each sequence's own tokens/round; idle = the share of
                (sequence, round) slots in which a finished sequence waited
"""


# What Ctrl-C prints before exit 130; a sweep points it at the rows it has kept.
interrupt_message = ["interrupted"]


class BadInput(click.UsageError):
    """One line naming the flag and what is allowed."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"{flag}: {message}")


class PipeClosed(Exception):
    """stdout's reader went away (`specbench run | head -1`)."""


class SpecbenchGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click turns it into a bare exit 1
            raise PipeClosed() from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name or "specbench", complete_var, standalone_mode=False, **extra)
        except PipeClosed:
            # the reader has what it wanted: end quietly, and point stdout at /dev/null so that
            # the interpreter's last flush cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:  # bare `specbench`: help
                click.echo(e.ctx.get_help())
                sys.exit(0)
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(2)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(2)
        except (WeightsError, DecodeError, ExportError, TokenizerError) as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


class ListParam(click.ParamType):
    """A comma list, with a-b ranges for integers: '1,2,4,8', '1-8', '0,0.7,1'."""

    def __init__(self, kind: type):
        self.kind = kind
        self.name = f"{kind.__name__} list"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            if self.kind is int:
                return theory.parse_K_range(str(value))
            values = [self.kind(v.strip()) for v in str(value).split(",")]
            if not values:
                raise ValueError
            return values
        except ValueError:
            example = {int: "1,2,4,8 or 1-8 (integers >= 1)", float: "0,0.7,1"}.get(self.kind, "a,b")
            self.fail(f"{value!r} is not a comma list like {example}", param, ctx)


class QuietConsole(Console):
    """rich's Console, but a closed pipe is an ordinary end (exit 0), not rich's exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise PipeClosed()


def make_console(*exports) -> Console:
    """Where the human-readable output goes: stderr when an export writes to stdout."""
    to_stderr = any(e == "-" for e in exports)
    stream = sys.stderr if to_stderr else sys.stdout
    # a pipe or file gets 140 columns, not rich's default 80, so the tables stay readable
    return QuietConsole(stderr=to_stderr, highlight=False, width=None if stream.isatty() else 140)




def load_model(name: str, flag: str, dtype: str, cache: dict):
    import jax.numpy as jnp

    from specbench import weights

    key = (name, dtype)
    if key not in cache:
        try:
            cache[key] = weights.load_model(name, jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
        except WeightsError as e:
            raise BadInput(flag, str(e)) from None
    return cache[key]


def check_drafter_flags(kinds: list[str], draft: str | None, ngram: int, draft_layers: int | None,
                        dynamic_K: bool, confidence: float) -> None:
    """The drafter flags, checked before any model is loaded."""
    from specbench.drafters import KINDS

    for kind in kinds:
        if kind not in KINDS:
            raise BadInput("--drafter", f"{kind!r} is not a drafter; use {', '.join(KINDS)}")
    if draft is not None and "model" not in kinds:
        raise BadInput("--draft", f"only the model drafter uses a draft model ({', '.join(kinds)} draft without one)")
    if ngram < 1:
        raise BadInput("--ngram", f"must be >= 1 (got {ngram})")
    if draft_layers is not None and draft_layers < 1:
        raise BadInput("--draft-layers", f"must be >= 1 and below the target's depth (got {draft_layers})")
    if not 0 < confidence < 1:
        raise BadInput("--draft-confidence", f"must be in (0, 1) (got {confidence:g})")
    if dynamic_K and kinds == ["lookup"]:
        raise BadInput("--dynamic-K", "needs a drafter with probabilities (model or layerskip), not lookup")


def make_drafter(kind: str, draft, target, ngram: int, draft_layers: int | None, dynamic_K: bool,
                 confidence: float):
    """(Drafter, the name result rows give its draft)."""
    from specbench import drafters

    conf = confidence if dynamic_K and kind != "lookup" else None
    if kind == "lookup":
        return drafters.lookup_drafter(ngram), f"lookup(n={ngram})"
    if kind == "layerskip":
        L = draft_layers or max(1, target.config.n_layer // 3)
        if not 1 <= L < target.config.n_layer:
            raise BadInput("--draft-layers", f"must be in 1..{target.config.n_layer - 1}: {target.name} has "
                                             f"{target.config.n_layer} layers (got {L})")
        return drafters.layerskip_drafter(target.config, L, conf), f"{target.name}[:{L}]"
    return drafters.model_drafter(draft.config, conf), draft.name


def load_pair(draft: str | None, target: str | None, dtype: str, cache: dict, need_draft: bool = True):
    """(draft, target) models; the draft is None when the drafter needs no draft model."""
    from specbench import weights

    default_draft, default_target = weights.default_pair()
    d = load_model(draft or default_draft, "--draft", dtype, cache) if need_draft else None
    t = load_model(target or default_target, "--target", dtype, cache)
    if d is not None and d.config.n_vocab != t.config.n_vocab:
        raise BadInput("--draft/--target", f"draft and target must share the vocabulary "
                       f"({d.name}: {d.config.n_vocab}, {t.name}: {t.config.n_vocab})")
    return d, t


def check_config(prompt_ids, n_tokens: int, K: int, draft, target):
    from specbench.decoding import validate

    try:
        validate(prompt_ids, n_tokens, K, [m for m in (draft, target) if m is not None], None)
    except DecodeError as e:
        message = str(e)
        flag = "--prompt" if message.startswith(("prompt must", "prompt token")) else \
            "--K" if message.startswith("K ") else "--n-tokens"
        raise BadInput(flag, str(e)) from None


def check_exports(**paths):
    """Every --export-* (and sweep's --output) path: the right extension, and writable, before any work."""
    formats = {"export_csv": "csv", "export_json": "json", "export_markdown": "markdown", "output": "json"}
    for flag, path in paths.items():
        if path:
            try:
                export.check_writable(path)
                if flag in formats:
                    export.check_extension(path, formats[flag])
            except ExportError as e:
                raise BadInput("--" + flag.replace("_", "-"), str(e)) from None


def write_exports(rows, csv_path, json_path, md_path):
    for path, fmt in ((csv_path, "csv"), (json_path, "json"), (md_path, "markdown")):
        if path:
            export.write(rows, path, fmt)


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


def check_save_path(path: Path, flag: str = "--save") -> None:
    """Before any work: the default results file must be writable, or say how to avoid it."""
    try:
        export.check_writable(str(path))
    except ExportError as e:
        raise BadInput(flag, f"{e}; pass --no-save, or set SPECBENCH_RESULTS_DIR to a writable folder") from None


def describe_pair(spec, draft_name: str, d, t) -> str:
    """'draft NAME (LxE) · target NAME (LxE)', or what drafts instead of a draft model."""
    target = f"target [bold]{t.name}[/bold] ({t.config.n_layer}x{t.config.n_embd})"
    if spec.kind == "lookup":
        return f"drafter [bold]prompt lookup[/bold] (n-gram ≤ {spec.ngram}) · {target}"
    if spec.kind == "layerskip":
        return f"drafter [bold]layer-skip[/bold] ({draft_name}: its first {spec.config.n_layer} blocks) · {target}"
    return f"draft [bold]{d.name}[/bold] ({d.config.n_layer}x{d.config.n_embd}) · {target}"


def resolve_prompt(prompt: str, prompt_id: str | None) -> tuple[str, str]:
    """(text, id) for run and trace: --prompt-id names one built-in prompt; else the text's own id."""
    if prompt_id is None:
        return prompt, next((pid for pid, text in prompts.all_prompts().items() if text == prompt), "custom")
    everything = prompts.all_prompts()
    if prompt_id not in everything:
        several = prompt_id == "all" or prompt_id in prompts.PROMPTS or "," in prompt_id
        hint = ("this command decodes one prompt; `specbench sweep --prompts " + prompt_id + "` runs several"
                if several else "see `specbench prompts`")
        raise BadInput("--prompt-id", f"{prompt_id!r} is not a prompt id ({', '.join(everything)}); {hint}")
    return everything[prompt_id], prompt_id


def batch_prompts(batch: int, chosen: dict[str, str]) -> tuple[list[str], list[str]]:
    """(ids, texts) of a batch: the chosen prompts cycled (prompts.batch_ids); one is repeated."""
    ids = prompts.batch_ids(chosen, batch)
    return ids, [chosen[pid] for pid in ids]


def check_batch(batch: int, host_loop: bool, spec, d, t, encoded: list[list[int]], n_tokens: int, K: int) -> None:
    """Before any work: a batch runs on the device loop, and its caches must fit the device.
    `encoded` are the batch's distinct prompts (the longest sets the cache length)."""
    from specbench import batch as batching
    from specbench import harness
    from specbench.gpt2 import param_bytes

    if batch == 1:
        return
    if host_loop:
        raise BadInput("--host-loop", f"drives one sequence; a batch (--batch {batch}) runs in the device loop only")
    configs = [t.config] + ([spec.config] if spec.config is not None else [])  # lookup runs no network
    max_len = batching.plan_batch(encoded, n_tokens, K, [m for m in (d, t) if m is not None])
    itemsize = t.params["wte"].dtype.itemsize
    weights = param_bytes(t.params) + (param_bytes(d.params) if d is not None and spec.kind == "model" else 0)
    per_seq = batching.memory_bytes(1, configs, max_len, K, t.config.n_vocab, itemsize)
    free = harness.device_memory_bytes()
    if free is not None and weights + batch * per_seq > free:
        gib = lambda b: f"{b / 2**30:.1f} GiB"
        fits = max(0, (free - weights) // per_seq)
        raise BadInput("--batch", f"{batch} sequences need about {gib(weights + batch * per_seq)} (K/V caches and "
                                  f"round buffers for {max_len} positions, and the weights); {harness.device_kind()} "
                                  f"has {gib(free)} free: use at most --batch {fits}")


def stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_speedup(row: dict) -> str:
    """mean ± σ of the per-repeat ratios; one repeat has no spread, so none is printed."""
    return f"{row['speedup']:.2f}" if row["repeats"] == 1 else f"{row['speedup']:.2f} ± {row['speedup_std']:.2f}"


def fmt_overhead(row: dict) -> str:
    """The per-round overhead with its uncertainty (it is a difference of separately timed medians)."""
    ms = lambda s: f"{s * 1e3:.2f}"
    return f"{ms(row['t_overhead_s'])} ± {ms(row.get('t_overhead_err_s') or 0.0)} ms"


def fmt_range(lo: float, hi: float) -> str:
    return f"{lo * 1e3:.1f} … {hi * 1e3:.1f} ms" if hi < 1 else f"{lo:.3f} … {hi:.3f} s"


# ---------------------------------------------------------------------------------------------


@click.group(cls=SpecbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specbench")
def cli():
    """Measure what speculative decoding buys: GPT-2 in JAX, autoregressive (AR) against
    speculative decoding (SD), timed honestly and set beside the theory."""


DRAFT_CONFIDENCE = 0.2  # dynamic K's default: the best of 0.2-0.8 measured on the bundled pair (README, "Drafters")

model_options = [
    click.option("--draft", default=None, help="Draft model: registry name, alias or directory [default: bundled pair]."),
    click.option("--target", default=None, help="Target model [default: bundled pair]."),
    click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True),
]
decode_options = [
    click.option("--n-tokens", "-n", type=click.IntRange(min=1), default=40, show_default=True, help="New tokens N."),
    click.option("--top-k", type=click.IntRange(min=1), default=None, help="Keep the k most likely tokens."),
    click.option("--seed", type=int, default=123, show_default=True),
]
drafter_options = [
    click.option("--ngram", type=int, default=3, show_default=True,
                 help="lookup: the longest suffix matched (shorter ones are tried down to 1)."),
    click.option("--draft-layers", type=int, default=None,
                 help="layerskip: how many of the target's first blocks draft [default: a third of them]."),
    click.option("--dynamic-K", "dynamic_K", is_flag=True,
                 help="Stop drafting when the draft's top probability falls below --draft-confidence."),
    click.option("--draft-confidence", type=float, default=DRAFT_CONFIDENCE, show_default=True,
                 help="dynamic K: the threshold, in (0, 1)."),
]
export_options = [
    click.option("--export-csv", type=str, default=None, metavar="PATH", help="Write CSV ('-' = stdout)."),
    click.option("--export-json", type=str, default=None, metavar="PATH", help="Write JSON ('-' = stdout)."),
    click.option("--export-markdown", type=str, default=None, metavar="PATH", help="Write Markdown ('-' = stdout)."),
]


def apply(options):
    def decorator(f):
        for option in reversed(options):
            f = option(f)
        return f
    return decorator


def batch_line(row: dict) -> str:
    """What a batch did: its size and mix, the rounds it ran, and the slots stragglers wasted."""
    mix = sorted(set(row["batch_prompt_ids"] or []))
    shown = ", ".join(mix[:4]) + (f" and {len(mix) - 4} more" if len(mix) > 4 else "")
    return (f"batch of {row['batch']} ({shown}) · tokens/s count all {row['batch']} sequences · the batch ran "
            f"{row['batch_rounds']} rounds, {row['tokens_per_batch_round']:.2f} tokens per sequence per round "
            f"(each sequence alone: {row['tokens_per_round']:.2f}) · idle slots {row['idle_fraction']:.1%}: "
            f"finished sequences waiting for the slowest")


def timing_table(rows: list[dict], console: Console):
    row = rows[0]
    n = row["n_tokens"]
    one = row["repeats"] == 1
    batch = row.get("batch", 1)
    table = Table(title=f"{n} new tokens" + (f" x {batch} sequences" if batch > 1 else "")
                        + f" · {plural(row['repeats'], 'repeat')}"
                        + (" (no spread from one repeat)" if one else "") + f" · {row['device']} · {row['dtype']}")
    for col in ("method", "time" if one else "time (mean ± σ)", "range (min … max)", "tokens/s", "speedup",
                "tokens/round", "r", "α"):
        table.add_column(col, justify="left" if col == "method" else "right")
    spread = (lambda m, sd: fmt_time(m)) if one else (lambda m, sd: f"{fmt_time(m)} ± {fmt_time(sd)}")
    table.add_row("autoregressive", spread(row['ar_mean_s'], row['ar_std_s']),
                  fmt_range(row['ar_min_s'], row['ar_max_s']), f"{row['ar_tokens_per_s']:.1f}",
                  "1.00", "1.00", "", "")
    table.add_row(f"speculative K={row['K']}", spread(row['sd_mean_s'], row['sd_std_s']),
                  fmt_range(row['sd_min_s'], row['sd_max_s']), f"{row['sd_tokens_per_s']:.1f}",
                  f"[bold]{fmt_speedup(row)}[/bold]", f"{row['tokens_per_round']:.2f}",
                  f"{row['r']:.3f}", f"{row['alpha']:.3f}")
    console.print(table)
    steps = Table(title="step times (median, device loop" + (f", all {batch} sequences at once" if batch > 1 else "")
                        + ") and theory from the same run")
    for col in ("t_draft", "t_target", f"t_verify({row['K'] + 1})", "c", "t_round", "overhead (± σ)",
                "theory", "refined", "measured/refined", "round model"):
        steps.add_column(col, justify="right")
    steps.add_row(fmt_time(row["t_draft_s"]), fmt_time(row["t_target_s"]), fmt_time(row["t_verify_s"]),
                  f"{row['t_draft_s'] / row['t_target_s']:.3f}", fmt_time(row["t_round_s"]), fmt_overhead(row),
                  f"{row['theory_speedup']:.2f}", f"{row['refined_speedup']:.2f}",
                  f"{row['measured_over_refined']:.2f}", f"{row['round_model_speedup']:.2f}")
    console.print(steps)
    if row["t_overhead_s"] < 0:
        console.print("[dim]overhead < 0: t_round, t_draft and t_verify are separately timed medians, and their "
                      "difference is within the timing noise shown (± σ)[/dim]")


@cli.command(epilog=METRICS_HELP)
@apply(model_options)
@click.option("--prompt", default=prompts.DEFAULT_PROMPT, show_default=True, help="Prompt text.")
@click.option("--prompt-id", default=None, help="A built-in prompt id instead (see `specbench prompts`).")
@click.option("--K", "-k", "K", type=click.IntRange(min=1), default=4, show_default=True, help="Draft tokens per round.")
@click.option("--temperature", "-t", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0 = greedy (SD then gives exactly the AR tokens).")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=None, help="Nucleus mass, in (0, 1].")
@apply(decode_options)
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Timed AR/SD pairs.")
@click.option("--warmup", type=click.IntRange(min=1), default=1, show_default=True, help="Untimed compile runs.")
@click.option("--host-loop", is_flag=True, help="Drive rounds from Python (one sync per round) instead of on device.")
@click.option("--save/--no-save", default=True, show_default=True, help="Write the row to results/.")
@click.option("--batch", "-b", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sequences decoded together: the built-in prompts cycled, or --prompt/--prompt-id repeated.")
@click.option("--drafter", default="model", show_default=True,
              help="Who drafts: model (the --draft model), lookup (prompt lookup), layerskip (the target's first layers).")
@apply(drafter_options)
@apply(export_options)
def run(draft, target, dtype, prompt, prompt_id, K, temperature, top_p, n_tokens, top_k, seed, repeats, warmup,
        host_loop, save, batch, drafter, ngram, draft_layers, dynamic_K, draft_confidence, export_csv, export_json,
        export_markdown):
    """One configuration: autoregressive against speculative decoding, side by side."""
    from specbench import harness
    from specbench.sampling import Warp

    console = make_console(export_csv, export_json, export_markdown)
    check_exports(export_csv=export_csv, export_json=export_json, export_markdown=export_markdown)
    save_path = results_dir() / f"run-{stamp()}.json" if save else None
    if save_path:
        check_save_path(save_path)
    source = click.get_current_context().get_parameter_source
    chose_prompt = prompt_id is not None or source("prompt") != click.core.ParameterSource.DEFAULT
    prompt, prompt_id = resolve_prompt(prompt, prompt_id)
    # a batch: the built-in prompts cycled, unless a prompt was chosen, which is then repeated
    chosen = {prompt_id: prompt} if chose_prompt or batch == 1 else prompts.all_prompts()
    if batch > 1 and not chose_prompt:
        prompt_id = "all"
    check_drafter_flags([drafter], draft, ngram, draft_layers, dynamic_K, draft_confidence)
    d, t = load_pair(draft, target, dtype, {}, need_draft=drafter == "model")
    spec, draft_name = make_drafter(drafter, d, t, ngram, draft_layers, dynamic_K, draft_confidence)
    by_id = {pid: tokenizer.encode(text) for pid, text in chosen.items()}
    for ids_ in by_id.values():
        check_config(ids_, n_tokens, K, d, t)
    check_batch(batch, host_loop, spec, d, t, list(by_id.values()), n_tokens, K)
    ids, texts = batch_prompts(batch, chosen)
    encoded = [by_id[pid] for pid in ids]
    warp = Warp(temperature, top_k, top_p)
    console.print(describe_pair(spec, draft_name, d, t) + f" · K={K}" + (" (dynamic)" if spec.confidence else "")
                  + f" · T={temperature:g}" + (f" · top-k {top_k}" if top_k else "")
                  + (f" · top-p {top_p:g}" if top_p else "") + (f" · batch {batch}" if batch > 1 else "")
                  + (" · random weights: timing only" if "random" in (t.source, d.source if d else "") else ""))
    with progress_bar("compiling (warm-up)", warmup + repeats + 5) as bar:
        res = harness.run_benchmark(d, t, encoded[0], n_tokens, K, warp, seed, repeats, warmup, not host_loop,
                                    lambda done, total, what: bar.update(done, what=what), drafter=spec,
                                    batch_prompts=encoded if batch > 1 else None)
    row = harness.result_row(res, draft=draft_name, target=t.name, dtype=dtype, K=K, warp=warp, seed=seed,
                             prompt_id=prompt_id, prompt=texts if batch > 1 else prompt, n_tokens=n_tokens,
                             repeats=repeats, warmup=warmup, loop="host" if host_loop else "device",
                             decode=tokenizer.decode, drafter=spec, batch_prompt_ids=ids)
    timing_table([row], console)
    if spec.kind == "lookup" or spec.confidence:
        console.print(f"drafts per round: mean {row['mean_drafted']:.2f} of {K} · rounds with 0..{K} drafts: "
                      f"{row['drafted_hist']}")
    if batch > 1:
        console.print(batch_line(row))
    faster = "faster" if row["speedup"] >= 1 else "slower"
    factor = row["speedup"] if row["speedup"] >= 1 else 1 / row["speedup"]
    spread = "" if repeats == 1 else f" ± {row['speedup_std']:.2f}"
    console.print(f"[bold]speculative[/bold] ran [bold]{factor:.2f}{spread}[/bold] times {faster} "
                  f"than autoregressive · compile (excluded): {res.compile_s:.1f} s, {res.n_compiles} programs")
    first = (lambda x: x[0]) if batch > 1 else (lambda x: x)
    which = f" (sequence 1 of {batch}: {ids[0]})" if batch > 1 else ""
    console.print(Text.assemble(("prompt" + which + " ", "dim"), texts[0]))
    console.print(Text.assemble(("AR ", "bold"), first(row["ar_text"])))
    console.print(Text.assemble(("SD ", "bold"), first(row["sd_text"])))
    if temperature == 0:
        both = "the two generations are" if batch == 1 else f"all {batch} pairs of generations are"
        console.print(f"T=0: {both} " + ("[green]identical[/green]" if row["identical"] else "[red]DIFFERENT[/red]"))
    write_exports([row], export_csv, export_json, export_markdown)
    if save_path:
        export.write([row], str(save_path), "json")
        console.print(f"[dim]saved {save_path}[/dim]")


SWEEP_KEY = ("draft", "target", "drafter", "ngram", "draft_layers", "dynamic_K", "draft_confidence", "dtype", "K",
             "temperature", "top_k", "top_p", "prompt_id", "n_tokens", "seed", "loop", "batch")


@cli.command(epilog=METRICS_HELP)
@apply(model_options)
@click.option("--K", "-k", "K", type=ListParam(int), default="1,2,4,8", show_default=True, help="Comma list or range.")
@click.option("--temperature", "-t", type=ListParam(float), default="0", show_default=True, help="Comma list.")
@click.option("--top-p", type=ListParam(float), default=None, help="Comma list of nucleus masses in (0, 1].")
@click.option("--prompts", "prompt_spec", default=prompts.DEFAULT_PROMPT_ID, show_default=True,
              help="all, a category, or prompt ids, comma-separated.")
@apply(decode_options)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--warmup", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--host-loop", is_flag=True, help="Drive rounds from Python instead of on device.")
@click.option("--output", "-o", default=None, metavar="FILE.json",
              help="JSON results, rewritten after every row [default: results/sweep-TIME.json].")
@click.option("--resume", is_flag=True, help="Skip the rows already in --output.")
@click.option("--drafter", "drafter_kinds", type=ListParam(str), default="model", show_default=True,
              help="Comma list of drafters: model, lookup, layerskip.")
@click.option("--batch", "-b", "batches", type=ListParam(int), default=None,
              help="Comma list of batch sizes. Each row then decodes B sequences together, the --prompts "
                   "cycled (one prompt: repeated), instead of one row per prompt.")
@apply(drafter_options)
@apply(export_options)
def sweep(draft, target, dtype, K, temperature, top_p, prompt_spec, n_tokens, top_k, seed, repeats, warmup,
          host_loop, output, resume, drafter_kinds, batches, ngram, draft_layers, dynamic_K, draft_confidence,
          export_csv, export_json, export_markdown):
    """A grid over drafters, K, temperature, top-p and prompts (or batch sizes); every finished row
    is saved at once."""
    from specbench import harness
    from specbench.sampling import Warp

    if any(not v >= 0 for v in temperature):
        raise BadInput("--temperature", "values must be >= 0")
    if top_p and any(not 0 < v <= 1 for v in top_p):
        raise BadInput("--top-p", "values must be in (0, 1]")
    try:
        chosen = prompts.select(prompt_spec)
    except ValueError as e:
        raise BadInput("--prompts", str(e)) from None
    if resume and not output:
        raise BadInput("--resume", "needs --output FILE.json, the file to resume")
    check_drafter_flags(drafter_kinds, draft, ngram, draft_layers, dynamic_K, draft_confidence)
    output = output or str(results_dir() / f"sweep-{stamp()}.json")
    check_exports(output=output, export_csv=export_csv, export_json=export_json, export_markdown=export_markdown)
    rows = []
    if resume and Path(output).exists():
        try:
            rows = export.read_json(output)
        except ExportError as e:
            raise BadInput("--resume", str(e)) from None
    console = make_console(export_csv, export_json, export_markdown)
    cache: dict = {}
    d, t = load_pair(draft, target, dtype, cache, need_draft="model" in drafter_kinds)
    specs = {kind: make_drafter(kind, d, t, ngram, draft_layers, dynamic_K, draft_confidence) for kind in drafter_kinds}
    loop = "host" if host_loop else "device"
    encoded = {pid: tokenizer.encode(text) for pid, text in chosen.items()}
    # the prompt axis: each chosen prompt alone, or (with --batch) the batch of B cycling through them
    for kind in drafter_kinds:
        for ids in encoded.values():
            check_config(ids, n_tokens, max(K), d if kind == "model" else None, t)
        for b in sorted(batches or [], reverse=True)[:1]:  # the largest batch, with the largest K, must fit
            check_batch(b, host_loop, specs[kind][0], d if kind == "model" else None, t, list(encoded.values()),
                        n_tokens, max(K))
    if batches:
        batch_of = {b: batch_prompts(b, chosen)[0] for b in batches}
        units = [(prompt_spec, b) for b in batches]
    else:
        batch_of, units = {1: None}, [(pid, 1) for pid in chosen]
    grid = [(kind, k, temp, p, pid, b) for kind in drafter_kinds for pid, b in units for temp in temperature
            for p in (top_p or [None]) for k in K]
    fixed = {"target": t.name, "dtype": dtype, "top_k": top_k, "n_tokens": n_tokens, "seed": seed,
             "loop": loop, "repeats": repeats, "warmup": warmup}
    check_resume_settings(rows, fixed, output)
    older = {"drafter": "model", "dynamic_K": False, "batch": 1}  # rows written before drafters and batches
    done = {tuple(r.get(c, older.get(c)) for c in SWEEP_KEY) for r in rows}

    def key_of(kind, k, temp, p, pid, b):
        spec, name = specs[kind]
        row = {"draft": name, "target": t.name, **spec.describe(), "dtype": dtype, "K": k, "temperature": temp,
               "top_k": top_k, "top_p": p, "prompt_id": pid, "n_tokens": n_tokens, "seed": seed, "loop": loop,
               "batch": b}
        return tuple(row[c] for c in SWEEP_KEY)

    todo = [g for g in grid if key_of(*g) not in done]
    console.print(f"sweep: {plural(len(grid), 'configuration')}, {len(grid) - len(todo)} already in {output}, "
                  f"{len(todo)} to run · drafters {', '.join(specs[k][1] for k in drafter_kinds)} · target {t.name}")
    # files are rewritten after every row; standard output gets the exports once, at the end
    file_exports = {f: p for f, p in (("csv", export_csv), ("json", export_json), ("markdown", export_markdown))
                    if p and p != "-"}
    kept = lambda: f"{plural(len(rows), 'row')} kept in {output}; run again with --resume --output {output}"
    interrupt_message[0] = "interrupted: " + kept()
    try:
        with progress_bar("sweep", len(todo), unit="configuration") as bar:
            for i, (kind, k, temp, p, pid, b) in enumerate(todo):
                bar.update(i, what=f"{kind} K={k} T={temp:g}" + (f" top-p={p:g}" if p else "") + f" {pid}"
                           + (f" batch {b}" if batches else ""))
                warp = Warp(temp, top_k, p)
                spec, name = specs[kind]
                ids = batch_of[b] or [pid]
                res = harness.run_benchmark(d, t, encoded[ids[0]], n_tokens, k, warp, seed, repeats, warmup,
                                            not host_loop, drafter=spec,
                                            batch_prompts=[encoded[i] for i in ids] if b > 1 else None)
                rows.append(harness.result_row(res, draft=name, target=t.name, dtype=dtype, K=k, warp=warp,
                                               seed=seed, prompt_id=pid,
                                               prompt=[chosen[i] for i in ids] if b > 1 else chosen[ids[0]],
                                               n_tokens=n_tokens, repeats=repeats, warmup=warmup, loop=loop,
                                               decode=tokenizer.decode, drafter=spec, batch_prompt_ids=ids))
                export.write(rows, output, "json")
                for fmt, path in file_exports.items():
                    export.write(rows, path, fmt)
                interrupt_message[0] = "interrupted: " + kept()
                bar.update(i + 1)
    except KeyboardInterrupt:  # in-process callers (tests); the console script exits from watch_interrupts
        click.echo("interrupted: " + kept(), err=True)
        sys.exit(130)
    for fmt, path in (("csv", export_csv), ("json", export_json), ("markdown", export_markdown)):
        if path == "-":
            export.write(rows, path, fmt)
    headers = {"draft": "drafter", "prompt_id": "prompt", "batch": "batch", "K": "K", "temperature": "T",
               "top_p": "top-p", "ar_tokens_per_s": "AR tok/s",
               "sd_tokens_per_s": "SD tok/s", "speedup": "speedup", "speedup_std": "±", "tokens_per_round": "tok/round",
               "tokens_per_batch_round": "tok/batch-round", "idle_fraction": "idle",
               "alpha": "α", "t_target_s": "t_target", "t_verify_s": "t_verify", "theory_speedup": "theory",
               "refined_speedup": "refined", "identical": "T=0 same"}
    settings = ("draft", "prompt_id", "batch", "K", "temperature", "top_p")
    if not any(r.get("batch", 1) > 1 for r in rows):  # the batch columns say nothing at batch 1
        headers = {c: h for c, h in headers.items()
                   if c not in ("tokens_per_batch_round", "idle_fraction", "t_target_s", "t_verify_s")}
    # like llama-bench: settings that do not vary are left out of the table (they are in the file)
    shown = [c for c in headers if c not in settings or len({str(r.get(c)) for r in rows}) > 1]
    if repeats == 1:
        shown.remove("speedup_std")
    table = Table(title=f"{plural(len(rows), 'row')} · {output}" + (" · one repeat: no spread" if repeats == 1 else ""))
    for c in shown:
        table.add_column(headers[c], justify="left" if c in ("prompt_id", "draft") else "right")
    for r in rows:
        table.add_row(*[export.fmt_fixed(c, r.get(c)) for c in shown])
    console.print(table)
    if batches and len(batches) > 1:
        for line in crossover_lines(rows):
            console.print(line)


def crossover_lines(rows: list[dict]) -> list[str]:
    """Where speedup against batch size crosses 1, measured and by the refined theory, per curve."""
    lines = []
    for (draft, k, temp, top_p), curve in theory.batch_curves(rows).items():
        Bs = curve["batch"]
        if len(Bs) < 2:
            continue
        label = f"{draft} K={k} T={temp:g}" + (f" top-p={top_p:g}" if top_p else "")

        def where(values):
            b = theory.crossover(Bs, values)
            if b is not None:
                return f"crosses 1 at B ≈ {b:.1f}"
            return f"stays above 1 up to B={Bs[-1]}" if values[-1] >= 1 else f"is below 1 from B={Bs[0]} on"

        lines.append(f"{label}: the measured speedup {where(curve['speedup'])}; the refined theory from the step "
                     f"times at each batch size {where(curve['refined_speedup'])}")
    return lines


def check_resume_settings(rows: list[dict], fixed: dict, output: str) -> None:
    """--resume adds rows only to a file of the same settings: refuse, naming each that differs."""
    differing = []
    for name, value in fixed.items():
        before = {r.get(name) for r in rows}
        if before and before != {value}:
            shown = ", ".join(str(v) for v in sorted(before, key=str))
            differing.append(f"{name} {shown} there, {value} now")
    if differing:
        raise BadInput("--resume", f"{output} holds rows of other settings ({'; '.join(differing)}); "
                                   "pass the same settings, or write to another --output")


@cli.command(epilog=METRICS_HELP)
@apply(model_options)
@click.option("--prompt", default=prompts.DEFAULT_PROMPT, show_default=True)
@click.option("--prompt-id", default=None, help="A built-in prompt id instead (see `specbench prompts`).")
@click.option("--K", "-k", "K", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--temperature", "-t", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=None)
@apply(decode_options)
@click.option("--drafter", default="model", show_default=True, help="model, lookup or layerskip (see run).")
@apply(drafter_options)
def trace(draft, target, dtype, prompt, prompt_id, K, temperature, top_p, n_tokens, top_k, seed, drafter, ngram,
          draft_layers, dynamic_K, draft_confidence):
    """One generation shown round by round: accepted drafts, the rejected draft (struck
    through), and the resampled or bonus token."""
    from specbench.decoding import speculative
    from specbench.sampling import Warp

    console = make_console()
    prompt, _ = resolve_prompt(prompt, prompt_id)
    check_drafter_flags([drafter], draft, ngram, draft_layers, dynamic_K, draft_confidence)
    d, t = load_pair(draft, target, dtype, {}, need_draft=drafter == "model")
    spec, draft_name = make_drafter(drafter, d, t, ngram, draft_layers, dynamic_K, draft_confidence)
    prompt_ids = tokenizer.encode(prompt)
    check_config(prompt_ids, n_tokens, K, d, t)
    tokens, st = speculative(d, t, prompt_ids, n_tokens, K, Warp(temperature, top_k, top_p), seed, record=True,
                             drafter=spec)
    piece = lambda i: tokenizer.decode([i])
    # without colour (a pipe, a file) the roles are marked in the text instead
    plain = not console.is_terminal or console.no_color
    mark = (lambda role, t: {"rejected": f"[-{t}-]", "resampled": f"[+{t}]", "bonus": f"[*{t}]"}.get(role, t)) \
        if plain else (lambda role, t: t)
    style = {"accepted": "green", "rejected": "red strike", "resampled": "bold yellow", "bonus": "bold cyan",
             "first": "magenta", "round": "dim blue"}
    out = Text(prompt, style="dim")
    out.append(piece(tokens[0]), style=style["first"])  # the prefill's draw from the target
    left = n_tokens - 1
    for rnd in st.rounds:
        if left <= 0:
            break
        out.append("│", style=style["round"])
        a = rnd["n_accepted"]
        for x in rnd["drafts"][:min(a, left)]:
            out.append(piece(x), style=style["accepted"])
        left -= a
        if left > 0:  # the round's last token, still within N
            if a < rnd["n_drafted"]:  # a draft was tested and rejected
                out.append(mark("rejected", piece(rnd["drafts"][a])), style=style["rejected"])
            role = "resampled" if a < rnd["n_drafted"] else "bonus"  # bonus: every proposed draft accepted
            out.append(mark(role, piece(rnd["emitted"])), style=style[role])
            left -= 1
    legend = [("accepted draft", "accepted"), (mark("rejected", "rejected draft"), "rejected"),
              (mark("resampled", "resampled"), "resampled"), (mark("bonus", "bonus"), "bonus"),
              ("first token (prefill)", "first"), ("│ round", "round")]
    console.print(Text.assemble(("legend: ", "dim"), *[part for text, role in legend for part in ((text, style[role]), "  ")]))
    console.print(out)
    console.print(f"{st.n_rounds} rounds · {st.n_generated} tokens · tokens/round {st.tokens_per_round:.2f} · "
                  f"r {st.r:.3f} · α {st.alpha:.3f} · accepted per round {st.accepted_hist.tolist()} · "
                  f"draft {draft_name} · target {t.name} · K={K} · T={temperature:g}")


K_SEARCH = 64  # theory --alpha looks for the optimal K in 1..K_SEARCH


@cli.command("theory")
@click.option("--K", "-k", "K", type=ListParam(int), required=True, help="K, a range (1-8) or a list (1,2,4).")
@click.option("--t-draft", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Draft step time (any unit, the same as --t-target).")
@click.option("--t-target", type=click.FloatRange(min=0, min_open=True), required=True, help="Target step time.")
@click.option("--r", "r", type=click.FloatRange(0, 1), default=None, help="r = tokens per round / (K+1).")
@click.option("--alpha", type=click.FloatRange(0, 1), default=None, help="Per-token acceptance probability.")
@click.option("--t-verify", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Target step over K+1 tokens, for the refined formula.")
def theory_cmd(K, t_draft, t_target, r, alpha, t_verify):
    """The speedup that theory predicts. With --r: DeepMind's formula (seed 003); with --alpha:
    Leviathan et al.'s, and the optimal K.

    \b
      speedup = r (K+1) t_target / (K t_draft + t_target)
      E[tokens/round] = (1 - alpha^(K+1)) / (1 - alpha),  speedup = E / (K c + 1),  c = t_draft/t_target
    """
    if (r is None) == (alpha is None):
        raise BadInput("--r/--alpha", "give exactly one of --r or --alpha")
    console = make_console()
    c = t_draft / t_target
    rows = []
    for k in K:
        if r is not None:
            if r < 1 / (k + 1):
                raise BadInput("--r", f"r must be in [1/(K+1), 1] = [{1 / (k + 1):.3f}, 1] for K={k}")
            a, tpr = theory.alpha_from_r(r, k), r * (k + 1)
            s = theory.speedup_from_r(r, k, t_draft, t_target)
        else:
            a, tpr = alpha, theory.expected_tokens(alpha, k)
            s = theory.speedup_from_alpha(alpha, k, c)
        refined = theory.refined_speedup(tpr, k, t_draft, t_target, t_verify) if t_verify else None
        rows.append((k, tpr, tpr / (k + 1), a, s, refined))
    if len(rows) == 1:
        k, tpr, rr, a, s, refined = rows[0]
        console.print(f"K={k}  c={c:.4f}  tokens/round={tpr:.3f}  r={rr:.3f}  alpha={a:.3f}")
        console.print(f"speedup = [bold]{s:.2f}[/bold]" + (f"  (refined with t_verify: {refined:.2f})" if refined else ""))
        if alpha is not None:
            best = theory.optimal_K(alpha, c, K_SEARCH)
            if best == K_SEARCH:  # still rising at the end of the search: no finite optimum to report
                console.print(f"no optimal K for alpha={alpha:g}, c={c:.4f}: the speedup still grows at K={K_SEARCH} "
                              f"({theory.speedup_from_alpha(alpha, best, c):.2f}), the end of the search"
                              + (" and, at alpha = 1, for ever, toward 1/c" if alpha == 1 else ""))
            else:
                console.print(f"optimal K for alpha={alpha:g}, c={c:.4f}: {best} "
                              f"(speedup {theory.speedup_from_alpha(alpha, best, c):.2f})")
        return
    best = max(rows, key=lambda row: row[4])[0]
    rising = best == max(K) and len(rows) > 1
    table = Table(title=f"c = t_draft/t_target = {c:.4f}" + (f", r = {r:g}" if r is not None else f", alpha = {alpha:g}"))
    for col in ("K", "tokens/round", "r", "alpha", "speedup") + (("refined",) if t_verify else ()) + ("",):
        table.add_column(col, justify="right")
    for k, tpr, rr, a, s, refined in rows:
        cells = [str(k), f"{tpr:.3f}", f"{rr:.3f}", f"{a:.3f}", f"{s:.2f}"] + ([f"{refined:.2f}"] if t_verify else [])
        mark = ("◀ best so far" if rising else "◀ best") if k == best else ""
        table.add_row(*cells, mark, style="bold" if k == best else None)
    console.print(table)
    if rising:
        console.print(f"the speedup still grows at K={best}, the largest K asked for: try larger K")


@cli.group(invoke_without_command=True)
@click.pass_context
def models(ctx):
    """List models (registry, bundled, downloaded) or download one."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(models_list)


@models.command("list")
def models_list():
    """Every model specbench knows, whether it is here, and its size."""
    from specbench import weights

    table = Table(title=f"models · weights in {weights.weights_dir()}")
    for col in ("name", "aliases", "layers x width", "parameters", "kind", "here"):
        table.add_column(col)
    for row in weights.list_models():
        table.add_row(row["name"], row["aliases"], row["layers_x_width"], f"{row['n_params'] / 1e6:.1f}M",
                      row["kind"], "[green]yes[/green]" if row["present"] else "no")
    make_console().print(table)


@models.command("download")
@click.argument("name")
def models_download(name):
    """Download an HF GPT-2 checkpoint into gpt2_weights/NAME (honours HF_ENDPOINT)."""
    from specbench import weights

    try:
        path = weights.download(name)
    except WeightsError as e:
        raise BadInput("NAME", str(e)) from None
    click.echo(f"{path.name}: ready in {path}")


@cli.command("prompts")
def prompts_cmd():
    """The built-in prompt suite, by category."""
    table = Table()
    for col in ("id", "category", "prompt"):
        table.add_column(col)
    for pid, text in prompts.all_prompts().items():
        table.add_row(pid, prompts.category(pid), text)
    make_console().print(table)


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--output", "-o", default=None, metavar="PNG", help="[default: FILE with .png]")
def plot(file, output):
    """Speedup and tokens/round against K from a JSON results file, with the theory curve; speedup
    and throughput against batch size when the file varies it (sweep --batch)."""
    try:
        from specbench import plot as plotting
    except ImportError:
        raise BadInput("plot", "needs matplotlib: pip install -e '.[plot]'") from None
    try:
        rows = export.read_json(file)
    except ExportError as e:
        raise BadInput("FILE", str(e)) from None
    missing = plotting.missing_fields(rows)
    if missing:
        raise BadInput("FILE", f"{file}: {missing}; plot needs rows written by `specbench run` or `sweep`")
    output = output or str(Path(file).with_suffix(".png"))
    if Path(output).suffix.lower() != ".png":
        raise BadInput("--output", f"{output}: the plot is a PNG, so name the file *.png")
    try:
        export.check_writable(output)
    except ExportError as e:
        raise BadInput("--output", str(e)) from None
    plotting.plot_rows(rows, output)
    click.echo(f"wrote {output}")


def roofline_model(name: str, dtype: str, random_init: bool):
    """The model roofline times: from disk, or random weights of a registry shape."""
    import jax.numpy as jnp

    from specbench import weights
    from specbench.gpt2 import init_params

    if not random_init:
        return load_model(name, "--model", dtype, {})
    try:
        spec = weights.resolve(name)
    except WeightsError as e:
        raise BadInput("--model", str(e)) from None
    if not isinstance(spec, weights.ModelSpec):
        raise BadInput("--random-init", "needs registry names (a directory has weights already)")
    jdtype = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
    return weights.Model(spec.name, spec.config, init_params(spec.config, 0, jdtype), "random")


@cli.command("roofline")
@click.option("--model", "-m", "model_names", multiple=True, default=None,
              help="Model(s) to measure: registry name, alias or directory [default: the bundled pair].")
@click.option("--random-init", is_flag=True, help="Random weights of the registry shape (timing only), for "
                                                 "sizes not on disk.")
@click.option("--dtype", "dtypes", type=ListParam(str), default=None,
              help="Comma list of float32,bfloat16 [default: both on GPU, float32 on CPU].")
@click.option("--K", "-k", "K", type=click.IntRange(min=1), default=4, show_default=True,
              help="Measure steps of 1 .. K+1 tokens.")
@click.option("--context", type=click.IntRange(min=8), default=128, show_default=True, help="Cache length.")
@click.option("--iters", type=click.IntRange(min=1), default=20, show_default=True, help="Steps per device loop.")
@apply(export_options)
def roofline_cmd(model_names, random_init, dtypes, K, context, iters, export_csv, export_json, export_markdown):
    """Decode-step time against the memory-bandwidth bound, for steps of 1 to K+1 tokens.

    A step must read every weight once whatever the number of tokens, so while the step is
    memory-bound, t(K+1)/t(1) stays near 1: that is why verifying K drafts is nearly free.
    Steps are timed as device-side loops; "plain step" is the same 1-token step dispatched from
    Python one call per token, the usual way, and plain/loop what the device loop saves.
    """
    import jax

    from specbench import harness, weights

    console = make_console(export_csv, export_json, export_markdown)
    check_exports(export_csv=export_csv, export_json=export_json, export_markdown=export_markdown)
    on_gpu = jax.devices()[0].platform == "gpu"
    dtypes = dtypes or (["float32", "bfloat16"] if on_gpu else ["float32"])
    if any(d not in ("float32", "bfloat16") for d in dtypes):
        raise BadInput("--dtype", "values must be float32 or bfloat16")
    names = list(model_names) or list(weights.default_pair()[::-1])
    runs = [(roofline_model(name, dtype, random_init), dtype) for name in names for dtype in dtypes]
    for model, _ in runs:  # every check before any timing
        if context > model.config.n_ctx:
            raise BadInput("--context", f"{context} exceeds {model.name}'s context of {model.config.n_ctx} "
                                        f"tokens; use at most {model.config.n_ctx}")
    if K + 1 > context:
        raise BadInput("--K", f"K+1 = {K + 1} must fit the cache of --context {context}")
    rows: list[dict] = []
    with progress_bar("roofline", len(runs) * (K + 2), unit="timing") as bar:
        for model, dtype in runs:
            bar.update(what=f"timing {model.name} {dtype}")
            measured = harness.roofline(model, K + 1, context, iters, on_timing=lambda: bar.update(advance=1))
            rows += [{**harness.context(), "model": model.name, "weights": "random (timing only)"
                      if model.source == "random" else model.source, "dtype": dtype, "context": context, **r}
                     for r in measured]
    random_note = " · random weights: timing only" if any(r["weights"].startswith("random") for r in rows) else ""
    table = Table(title=f"decode-step roofline · {rows[0]['device']} · cache {context} · peak "
                        + (f"{rows[0]['peak_gbps']:.0f} GB/s" if rows[0]["peak_gbps"] else "unknown") + random_note)
    for col in ("model", "dtype", "tok/step", "t_step", "bound", "t/bound", "MB/step", "GB/s", "t(n)/t(1)",
                "plain", "plain/loop"):
        table.add_column(col, justify="left" if col in ("model", "dtype") else "right")
    for r in rows:
        bound = r["bound_s"]
        table.add_row(r["model"], r["dtype"],
                      str(r["n_tokens_per_step"]), fmt_time(r["t_step_s"]), fmt_time(bound) if bound else "—",
                      f"{r['t_step_s'] / bound:.2f}" if bound else "—", f"{r['bytes_per_step'] / 1e6:.1f}",
                      f"{r['achieved_gbps']:.1f}", f"{r['t_over_t1']:.2f}",
                      fmt_time(r["t_plain_step_s"]) if r["t_plain_step_s"] else "",
                      f"{r['plain_over_loop']:.2f}" if r["plain_over_loop"] else "")
    console.print(table)
    for path, fmt in ((export_csv, "csv"), (export_json, "json"), (export_markdown, "markdown")):
        if path:
            text = {"json": export.to_json, "csv": lambda rs: export.to_csv(rs, list(rs[0])),
                    "markdown": lambda rs: export.to_markdown(rs, list(rs[0]))}[fmt](rows)
            export.write_text(path, text)


def main():
    """Run the command line. The console script enters through specbench.__main__, which first
    makes Ctrl-C safe at any moment."""
    cli()
