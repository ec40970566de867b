"""The command line's options and their help text, declared once and shared (their parameter
types and bounds: params.py)."""

from __future__ import annotations

import click

from specbench import prompts
from specbench.cli.asked import devices, paths, serving_options
from specbench.cli.asked.helptext import (
    ACCEPTANCE_HELP,
    DRAFT_VOCAB_HELP,
    DRAFTS_HELP,
    KERNELS_HELP,
    VERIFY_HELP,
)
from specbench.cli.asked.params import (
    BATCH_MAX,
    DRAFT_CONFIDENCE,
    DRAFTER_KINDS,
    DRAFTS_MAX,
    K_MAX,
    KERNELS,
    N_TOKENS_MAX,
    REPEATS_MAX,
    SEED_MAX,
    VERIFY_METHODS,
    WARMUP_MAX,
    Count,
    DraftVocab,
    Finite,
    ListParam,
    Temperature,
    TreeShape,
    peer_list,
)


def apply(options):
    """A decorator that adds a list of click options, in order."""

    def decorator(f):
        for option in reversed(options):
            f = option(f)
        return f

    return decorator


model = [
    devices.compile_cache_option,
    click.option(
        "--draft",
        default=None,
        help="Draft model: registry name, alias or directory [default: bundled pair].",
    ),
    click.option("--target", default=None, help="Target model [default: bundled pair]."),
    click.option(
        "--random-init",
        is_flag=True,
        help="Random weights of the registry shapes of --draft and --target (timing only), offline.",
    ),
    *devices.dtype_options,
    devices.mesh_option,
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
seed = click.option(  # report's and prompts', for --sample
    "--seed", type=Count(0, SEED_MAX), default=123, show_default=True, help="The seed of --sample."
)
draft_vocab = click.option(  # run, sweep and trace's, and report's
    "--draft-vocab", type=DraftVocab(), default="auto", show_default=True, help=DRAFT_VOCAB_HELP
)
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
        "--eagle-head",
        default=None,
        metavar="DIR",
        help="eagle: the head's folder [default: gpt2_weights/<target>-eagle, bundled for tiny-target].",
    ),
    click.option(
        "--mtp-head",
        default=None,
        metavar="DIR",
        help="mtp: a folder holding an MTP layer (of its own, or speculators' mtp format) "
        "[default: the target's own, else gpt2_weights/<target>-mtp, bundled for tiny-target].",
    ),
    draft_vocab,
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
    draft_vocab,
    seed,
]
peer = [
    click.option(
        "--peer",
        "peers",
        multiple=True,
        callback=peer_list,
        metavar="NAME",
        help="Time another implementation in the same run, on the same weights: transformers (generate "
        "and assisted generation; the peers extra), numpy (the papers' algorithm, no cache; GPT-2), "
        "warfield (the seed's greedy T5 system, no cache; a T5 pair) or llamacpp (llama.cpp's "
        "speculative-simple on GGUF copies, f32 or Q8_0; T = 0; --llamacpp). Repeatable, or a comma list.",
    ),
    devices.llamacpp_option,
]
exports = paths.export_options  # run's, sweep's and roofline's
refill = serving_options.refill  # run's and sweep's
itl = click.option(  # run's and sweep's (generate.token_times)
    "--itl",
    is_flag=True,
    help="Also time each token's arrival: one generation a repeat driven from the host, a sync after every "
    "step or round, for the gaps between tokens (inter-token latency) at p50/p95/p99.",
)
placed = [itl, devices.draft_device_option]  # run's and sweep's: how the timed run is driven
prompts_file = [  # run, sweep, trace and report (prompt_files.py)
    click.option(
        "--prompts-file",
        default=None,
        metavar="FILE",
        help='Your own prompts instead of the built-in suite: JSON Lines ({"prompt": ..., "id": ..., '
        "\"category\": ...} a line), Spec-Bench's or MT-Bench's question file (the first turn), or plain "
        "text, one prompt a line (docs/workloads.md).",
    ),
    click.option(
        "--per-category", type=Count(1), default=None, help="--prompts-file: the first N of each category."
    ),
    click.option(
        "--sample", type=Count(1), default=None, help="--prompts-file: N of them drawn with --seed."
    ),
    click.option(
        "--limit", type=Count(1), default=None, help="--prompts-file: the first N (after the two above)."
    ),
]
one_prompt = [
    click.option("--prompt", default=prompts.DEFAULT_PROMPT, show_default=True, help="Prompt text."),
    click.option(
        "--prompt-id",
        default=None,
        help="A prompt id instead: built in (see `specbench prompts`) or the file's.",
    ),
]
single = [  # run and trace: one K, one warp
    click.option(
        "--K", "-k", "K", type=Count(1, K_MAX), default=4, show_default=True, help="Draft tokens per round."
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
        "--verify", type=click.Choice(VERIFY_METHODS), default="token", show_default=True, help=VERIFY_HELP
    ),
    click.option("--drafts", type=Count(1, DRAFTS_MAX), default=1, show_default=True, help=DRAFTS_HELP),
    tree := click.option(
        "--tree",
        type=TreeShape(),
        default=None,
        help="Draft a token tree, children per node at each depth (e.g. 2,2,1), verified in one "
        "step; K is its depth (model, layerskip or eagle drafter).",
    ),
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
        help="Sequences decoded together: the suite's prompts cycled (built in or --prompts-file's), "
        "or --prompt/--prompt-id repeated.",
    ),
    click.option(
        "--drafter",
        default="model",
        show_default=True,
        help="Who drafts: model (the --draft model), lookup (prompt lookup), layerskip (the target's first "
        "layers), dial (the acceptance dial: see --acceptance), eagle (a head reading the target's hidden "
        "states: --eagle-head), pard (a PARD draft, --draft: one pass proposes K), mtp (the MTP layer "
        "shipped in the target's own folder).",
    ),
]


def axis(flags: tuple[str, ...], dest: str, item: ListParam, default: str | None, help: str):
    """One of sweep's axes: a comma list of values, each a cell of the grid."""
    return click.option(*flags, dest, type=item, default=default, show_default=default is not None, help=help)


sweep = [
    axis(("--K", "-k"), "K", ListParam(int, most=K_MAX), "1,2,4,8", "Comma list or range."),
    axis(("--temperature", "-t"), "temperature", ListParam(float, Temperature()), "0", "Comma list."),
    axis(
        ("--top-p",),
        "top_p",
        ListParam(float, Finite(0, 1, min_open=True)),
        None,
        "Comma list of nucleus masses in (0, 1].",
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
        help="JSON results, rewritten after every row [default: sweep-TIME.json in the results folder].",
    ),
    click.option("--resume", is_flag=True, help="Skip the rows already in --output."),
    click.option("--force", is_flag=True, help="Start an existing --output over (its rows are replaced)."),
    axis(
        ("--drafter",),
        "drafter_kinds",
        ListParam(str),
        "model",
        f"Comma list of drafters: {', '.join(DRAFTER_KINDS)} (see run).",
    ),
    axis(
        ("--verify",),
        "verify_methods",
        ListParam(str, click.Choice(VERIFY_METHODS)),
        "token",
        "Comma list of verification methods: token, block, traversal, gbv (see run).",
    ),
    axis(
        ("--drafts",),
        "drafts_list",
        ListParam(int, most=DRAFTS_MAX),
        "1",
        f"Comma list of draft sequences per round, each 1..{DRAFTS_MAX} (see run).",
    ),
    axis(
        ("--acceptance",),
        "acceptances",
        ListParam(float, Finite(0, 1)),
        None,
        "Comma list of the dial's acceptances in [0, 1] (--drafter dial; see run).",
    ),
    axis(
        ("--batch", "-b"),
        "batches",
        ListParam(int, span_most=BATCH_MAX),  # one large size: the memory check names what it needs
        None,
        "Comma list of batch sizes. Each row then decodes B sequences together, the --prompts "
        "cycled (one prompt: repeated), instead of one row per prompt.",
    ),
    tree,
]
trace = [
    click.option(
        "--drafter", default="model", show_default=True, help=f"{', '.join(DRAFTER_KINDS)} (see run)."
    ),
]
