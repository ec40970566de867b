"""The command line's options, parameter types and help text, declared once and shared."""

from __future__ import annotations

import math

import click

from specbench import prompts
from specbench.results import theory

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
  theory        r (K+1) t_target / (K t_draft + t_target)          (Chen et al. 2023)
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

DRAFT_CONFIDENCE = (
    0.2  # dynamic K's default: the best of 0.2-0.8 measured on the bundled pair (README, "Drafters")
)


KERNELS = ("auto", "cpu", "xla")  # model/kernels.py's CHOICES, without importing JAX here
KERNELS_HELP = (
    "Matrix products of the decode steps: cpu = specbench's CPU kernel (reads each weight once for all "
    "the rows of a step), xla = XLA's own, auto = the kernel where it can run (float32 on a CPU, built "
    "at install), else XLA."
)

VERIFY_METHODS = ("token", "block")  # drafters.VERIFY_METHODS, without importing JAX for --help
VERIFY_HELP = (
    "How the target judges the drafts: token (token by token, Leviathan et al. 2023) or block (one "
    "joint decision over the K drafts, Sun et al. ICLR 2025: exact, never fewer tokens per round)."
)
DRAFTS_MAX = 8
DRAFTS_HELP = (
    "Draft sequences per round (model or layerskip drafter, one sequence decoded): verified together "
    "in one target step, judged by SpecInfer's recursive rejection. At T = 0 they are all the same."
)
ACCEPTANCE_HELP = (
    "The dial's acceptance a in [0, 1] (--drafter dial, T = 0): an instrument, not a drafter to "
    "deploy. It proposes the target's own greedy tokens, each kept with probability a, else "
    "replaced by a wrong one: alpha = a, the tokens are AR's, drafting costs nothing."
)
K_MAX = 128  # the largest K accepted anywhere: checked before a range like 1-100000000 is expanded
BATCH_MAX = 65536
# every count has a bound that can be met: a run of REPEATS_MAX repeats of a small model takes hours
REPEATS_MAX, WARMUP_MAX, ITERS_MAX = 1000, 100, 10_000
N_TOKENS_MAX = CONTEXT_MAX = 1_000_000  # the model's context refuses less, naming its own limit
NGRAM_MAX = 16  # lookup's matching is unrolled per n-gram length at trace time
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.01, 100.0  # below 0.01 the logits / T overflow float32: use 0
SEED_MAX = 2**32 - 1


class Count(click.IntRange):
    """A whole number in [min, max], said as such: '1e12' is not a whole number, not "not a valid
    integer range"; a comma list (run's --K 2,2) is one value too many, not a bad range."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return super().convert(value, param, ctx)
        text = str(value).strip()
        if "," in text:
            parts = [v.strip() for v in text.split(",")]
            twice = [v for i, v in enumerate(parts) if v in parts[:i]]
            repeat = f" ({twice[0]} is listed twice)" if twice else ""
            self.fail(f"{text!r} is a list{repeat}: give one value here (sweep takes lists)", param, ctx)
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{text!r} is not a whole number", param, ctx)
        return super().convert(number, param, ctx)


class Finite(click.FloatRange):
    """click's FloatRange, refusing NaN and infinity (which compare False with every bound)."""

    def _describe_range(self) -> str:  # click shows "x<=None" for a range with no bounds
        return super()._describe_range() if (self.min, self.max) != (None, None) else "finite"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Temperature(Finite):
    """0 (greedy), or a temperature in [TEMPERATURE_MIN, TEMPERATURE_MAX]."""

    name = "temperature"

    def convert(self, value, param, ctx):
        t = super().convert(value, param, ctx)
        if t != 0 and not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX:
            self.fail(
                f"{t:g} is not in the range: temperatures are >= 0 (0 is greedy, else "
                f"{TEMPERATURE_MIN:g}..{TEMPERATURE_MAX:g}; below that the logits / T overflow)",
                param,
                ctx,
            )
        return t


class ListParam(click.ParamType):
    """A comma list of distinct values, with a-b ranges for integers: '1,2,4,8', '1-8', '0,0.7,1'.
    `item` checks each value (a click type); `most` bounds integers before a range is expanded."""

    def __init__(self, kind: type, item: click.ParamType | None = None, most: int | None = None):
        self.kind, self.item, self.most = kind, item, most
        self.name = f"{kind.__name__} list"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        text = str(value)
        if self.kind is int:
            try:
                return theory.parse_K_range(text, self.most)
            except ValueError as e:
                self.fail(f"{text!r} is not a comma list like 1,2,4,8 or 1-8 ({e})", param, ctx)
        parts = [v.strip() for v in text.split(",")]
        if "" in parts:
            example = "0,0.7,1" if self.kind is float else "a,b"
            self.fail(f"{text!r} is not a comma list like {example}", param, ctx)
        values = [self.item.convert(v, param, ctx) if self.item else self.kind(v) for v in parts]
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:
            self.fail(f"{twice[0]} is listed twice", param, ctx)
        return values


def peer_list(ctx, param, values) -> list[str]:
    """--peer, repeatable or a comma list: each of peers.NAMES once, in the order given."""
    from specbench.measure.peers import NAMES

    out = []
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if name not in NAMES:
                raise click.BadParameter(f"{name!r} is not a peer: use {' or '.join(NAMES)}", ctx, param)
            if name in out:
                raise click.BadParameter(f"{name} is listed twice", ctx, param)
            out.append(name)
    return out


def apply(options):
    """A decorator that adds a list of click options, in order."""

    def decorator(f):
        for option in reversed(options):
            f = option(f)
        return f

    return decorator


model = [
    click.option(
        "--draft",
        default=None,
        help="Draft model: registry name, alias or directory [default: bundled pair].",
    ),
    click.option("--target", default=None, help="Target model [default: bundled pair]."),
    click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True),
    click.option(
        "--kernels",
        type=click.Choice(KERNELS),
        default="auto",
        show_default=True,
        help=KERNELS_HELP,
    ),
]
decode = [
    click.option(
        "--n-tokens",
        "-n",
        type=Count(min=2, max=N_TOKENS_MAX),
        default=40,
        show_default=True,
        help="New tokens N (>= 2: the first comes from the prefill, the rest from rounds).",
    ),
    click.option("--top-k", type=Count(min=1), default=None, help="Keep the k most likely tokens."),
    click.option("--seed", type=Count(0, SEED_MAX), default=123, show_default=True),
]
drafter = [
    click.option(
        "--ngram",
        type=int,
        default=3,
        show_default=True,
        help="lookup: the longest suffix matched (shorter ones are tried down to 1).",
    ),
    click.option(
        "--draft-layers",
        type=int,
        default=None,
        help="layerskip: how many of the target's first blocks draft [default: a third of them].",
    ),
    click.option(
        "--dynamic-K",
        "dynamic_K",
        is_flag=True,
        help="Stop drafting when the draft's top probability falls below --draft-confidence.",
    ),
    click.option(
        "--draft-confidence",
        type=Finite(),
        default=DRAFT_CONFIDENCE,
        show_default=True,
        help="dynamic K: the threshold, in (0, 1).",
    ),
]
report = [
    click.option(
        "--quick", is_flag=True, help="A reduced battery: every section, fewer settings and repeats."
    ),
    click.option(
        "--output",
        "-o",
        default="report",
        show_default=True,
        metavar="DIR",
        help="Where the page and rows go.",
    ),
    click.option("--resume", is_flag=True, help="Complete the report in --output (same settings)."),
    click.option("--force", is_flag=True, help="Write into an --output that holds something else."),
]
peer = [
    click.option(
        "--peer",
        "peers",
        multiple=True,
        callback=peer_list,
        metavar="NAME",
        help="Time another implementation in the same run, on the same weights: transformers (generate "
        "and assisted generation; the peers extra) or numpy (the papers' algorithm, no cache). "
        "Repeatable, or a comma list.",
    ),
]
exports = [
    click.option("--export-csv", type=str, default=None, metavar="PATH", help="Write CSV ('-' = stdout)."),
    click.option("--export-json", type=str, default=None, metavar="PATH", help="Write JSON ('-' = stdout)."),
    click.option(
        "--export-markdown", type=str, default=None, metavar="PATH", help="Write Markdown ('-' = stdout)."
    ),
]
one_prompt = [
    click.option("--prompt", default=prompts.DEFAULT_PROMPT, show_default=True, help="Prompt text."),
    click.option("--prompt-id", default=None, help="A built-in prompt id instead (see `specbench prompts`)."),
]
single = [  # run and trace: one K, one warp
    click.option(
        "--K",
        "-k",
        "K",
        type=Count(1, K_MAX),
        default=4,
        show_default=True,
        help="Draft tokens per round.",
    ),
    click.option(
        "--temperature",
        "-t",
        type=Temperature(),
        default=0.0,
        show_default=True,
        help="0 = greedy (SD then gives exactly the AR tokens).",
    ),
    click.option("--top-p", type=Finite(0, 1, min_open=True), default=None, help="Nucleus mass, in (0, 1]."),
    click.option(
        "--verify",
        type=click.Choice(VERIFY_METHODS),
        default="token",
        show_default=True,
        help=VERIFY_HELP,
    ),
    click.option("--drafts", type=Count(1, DRAFTS_MAX), default=1, show_default=True, help=DRAFTS_HELP),
    click.option("--acceptance", type=Finite(0, 1), default=None, help=ACCEPTANCE_HELP),
]
dry_run = click.option(
    "--dry-run",
    is_flag=True,
    help="Check everything and print the plan and an estimate; measure and write nothing.",
)
run = [
    click.option(
        "--repeats",
        type=Count(1, REPEATS_MAX),
        default=5,
        show_default=True,
        help="Timed AR/SD pairs, each with its parts (a budget within 5% on a noisy host needs about 40).",
    ),
    click.option(
        "--warmup", type=Count(1, WARMUP_MAX), default=1, show_default=True, help="Untimed compile runs."
    ),
    click.option(
        "--host-loop",
        is_flag=True,
        help="Drive rounds from Python (one sync per round) instead of on device.",
    ),
    click.option("--save/--no-save", default=True, show_default=True, help="Write the row to results/."),
    click.option(
        "--batch",
        "-b",
        type=Count(min=1),  # the memory check bounds it, naming what a batch needs
        default=1,
        show_default=True,
        help="Sequences decoded together: the built-in prompts cycled, or --prompt/--prompt-id repeated.",
    ),
    click.option(
        "--drafter",
        default="model",
        show_default=True,
        help="Who drafts: model (the --draft model), lookup (prompt lookup), layerskip (the target's first "
        "layers), dial (the acceptance dial: see --acceptance).",
    ),
]
sweep = [
    click.option(
        "--K",
        "-k",
        "K",
        type=ListParam(int, most=K_MAX),
        default="1,2,4,8",
        show_default=True,
        help="Comma list or range.",
    ),
    click.option(
        "--temperature",
        "-t",
        type=ListParam(float, Temperature()),
        default="0",
        show_default=True,
        help="Comma list.",
    ),
    click.option(
        "--top-p",
        type=ListParam(float, Finite(0, 1, min_open=True)),
        default=None,
        help="Comma list of nucleus masses in (0, 1].",
    ),
    click.option(
        "--prompts",
        "prompt_spec",
        default=prompts.DEFAULT_PROMPT_ID,
        show_default=True,
        help="all, a category, or prompt ids, comma-separated.",
    ),
    *decode,
    click.option("--repeats", type=Count(1, REPEATS_MAX), default=3, show_default=True),
    click.option("--warmup", type=Count(1, WARMUP_MAX), default=1, show_default=True),
    click.option("--host-loop", is_flag=True, help="Drive rounds from Python instead of on device."),
    click.option(
        "--output",
        "-o",
        default=None,
        metavar="FILE.json",
        help="JSON results, rewritten after every row [default: results/sweep-TIME.json].",
    ),
    click.option("--resume", is_flag=True, help="Skip the rows already in --output."),
    click.option("--force", is_flag=True, help="Start an existing --output over (its rows are replaced)."),
    click.option(
        "--drafter",
        "drafter_kinds",
        type=ListParam(str),
        default="model",
        show_default=True,
        help="Comma list of drafters: model, lookup, layerskip, dial (see run).",
    ),
    click.option(
        "--verify",
        "verify_methods",
        type=ListParam(str, click.Choice(VERIFY_METHODS)),
        default="token",
        show_default=True,
        help="Comma list of verification methods: token, block (see run).",
    ),
    click.option(
        "--drafts",
        "drafts_list",
        type=ListParam(int, most=DRAFTS_MAX),
        default="1",
        show_default=True,
        help=f"Comma list of draft sequences per round, each 1..{DRAFTS_MAX} (see run).",
    ),
    click.option(
        "--acceptance",
        "acceptances",
        type=ListParam(float, Finite(0, 1)),
        default=None,
        help="Comma list of the dial's acceptances in [0, 1] (--drafter dial; see run).",
    ),
    click.option(
        "--batch",
        "-b",
        "batches",
        type=ListParam(int),  # the memory check bounds it
        default=None,
        help="Comma list of batch sizes. Each row then decodes B sequences together, the --prompts "
        "cycled (one prompt: repeated), instead of one row per prompt.",
    ),
]
trace = [
    click.option(
        "--drafter", default="model", show_default=True, help="model, lookup, layerskip or dial (see run)."
    ),
]
theory_cmd = [
    click.option(
        "--K",
        "-k",
        "K",
        type=ListParam(int, most=K_MAX),
        required=True,
        help="K, a range (1-8) or a list (1,2,4).",
    ),
    click.option(
        "--t-draft",
        type=Finite(min=0, min_open=True),
        required=True,
        help="Draft step time (any unit, the same as --t-target).",
    ),
    click.option("--t-target", type=Finite(min=0, min_open=True), required=True, help="Target step time."),
    click.option("--r", "r", type=Finite(0, 1), default=None, help="r = tokens per round / (K+1)."),
    click.option("--alpha", type=Finite(0, 1), default=None, help="Per-token acceptance probability."),
    click.option(
        "--t-verify",
        type=Finite(min=0, min_open=True),
        default=None,
        help="Target step over K+1 tokens, for the refined formula.",
    ),
]
roofline = [
    click.option(
        "--model",
        "-m",
        "model_names",
        multiple=True,
        default=None,
        help="Model(s) to measure: registry name, alias or directory [default: the bundled pair].",
    ),
    click.option(
        "--random-init",
        is_flag=True,
        help="Random weights of the registry shape (timing only), for sizes not on disk.",
    ),
    click.option(
        "--dtype",
        "dtypes",
        type=ListParam(str),
        default=None,
        help="Comma list of float32,bfloat16 [default: both on GPU, float32 on CPU].",
    ),
    click.option(
        "--K",
        "-k",
        "K",
        type=Count(1, K_MAX),
        default=4,
        show_default=True,
        help="Measure steps of 1 .. K+1 tokens.",
    ),
    click.option(
        "--kernels",
        "kernels",
        type=ListParam(str, click.Choice(KERNELS)),
        default="auto",
        show_default=True,
        help="Comma list of auto, cpu, xla: each model is measured with each (see run --help).",
    ),
    click.option(
        "--context", type=Count(8, CONTEXT_MAX), default=128, show_default=True, help="Cache length."
    ),
    click.option(
        "--iters", type=Count(1, ITERS_MAX), default=20, show_default=True, help="Steps per device loop."
    ),
]
