"""The result row: one schema that builds every row and drives every output of it.

Each Field says what a column is and where it shows: in CSV (the scalars), at which place in the
Markdown export and in the sweep table (with its header), whether it keys a sweep row (a
setting; `old` is its value in rows written before it existed), whether `specbench plot` needs
it, and how many decimals a table gives it. export.py, plot.py, the sweep table and its resume
key all read this list; nothing else names the columns. No JAX here: plot, theory and the
exports start fast.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: type = float
    csv: bool = True  # a scalar column of CSV and Markdown; False: JSON only
    md: int = 0  # place in the Markdown export (0: not there)
    table: int = 0  # place in the sweep table (0: not there)
    header: str = ""  # its sweep-table header
    key: bool = False  # a setting that tells sweep rows apart
    old: object = None  # a key's value in rows written before the field existed
    plot: bool = False  # `specbench plot` needs it
    fmt: str = ".2f"  # table cells: a format spec, "ms" (seconds shown in ms) or "%"


F = Field
FIELDS = [
    # context
    F("specbench_version", str),
    F("git_commit", str),
    F("jax_version", str),
    F("device", str),
    F("timestamp", str),
    F("implementation", str, md=1, table=1, header="implementation", key=True, old="specbench"),
    F("implementation_version", str),
    F("dtype", str, key=True),
    F("target_weights", str, key=True),  # each model's weight format: float32, bfloat16, q8_0 (--dtype int8)
    F("draft_weights", str, key=True),  # None where no draft model drafts
    F("kernels", str, key=True, old="xla"),
    F("pallas_backend", str, key=True),  # with the Pallas kernels: their products' triton or mosaic
    F("verdict", str, key=True, old="lazy"),  # how a T > 0 verdict was computed (verify.KINDS)
    F("sampler", str, key=True, old="cdf"),  # how a T > 0 draw picked its token (sampling.SAMPLERS)
    F("xla_loops", str),  # how the device loops were compiled (model/kernels/programs.py)
    F("architecture", str, key=True, old="gpt2"),  # the target's: gpt2, llama, qwen2, t5
    F("mesh", str, key=True),  # the target's split over devices ("tp=2"), or None: one device
    F("devices", int, old=1),  # the devices the target's weights are on
    F("draft_device", int, key=True),  # --draft-device: the draft's own device; None: with the target
    F("draft", str, md=3, table=2, header="drafter", key=True),
    F("target", str, md=4, key=True),
    F("drafter", str, md=2, key=True, old="model"),
    F("draft_cost", str),  # the drafter's cost shape: sequential, one-pass or free (draft_cost.py)
    F("draft_pass_rows", int),  # a one-pass drafter's: the rows of its one step at this K (PARD: 2K)
    F("ngram", int, key=True),
    F("draft_layers", int, key=True),
    F("dynamic_K", bool, key=True, old=False),
    F("draft_confidence", float, key=True),
    F("draft_vocab", int, key=True),  # tokens the draft's head covers; empty: all (draft_vocab.py)
    F("tree_nodes", int),  # a token tree's nodes (--tree; its depth is K)
    F(
        "eagle_format", str, key=True
    ),  # an EAGLE head's format: eagle (specbench's), eagle3 (published) or mtp
    F("eagle_taps", str),  # the target layers whose inputs an EAGLE-3 head reads: "2,16,29"
    F("mtp_format", str, key=True),  # an MTP head's layout: deepseek, mimo, qwen3_next, speculators
    F("mtp_layers", int),  # the MTP layers its folder ships (it drafts with the first)
    # how the round drafts and is judged (their table places tie with K's: shown where they vary)
    F("verify", str, md=7, table=5, header="verify", key=True, old="token"),  # token or block (verify.py)
    F("drafts", int, md=7, table=5, header="drafts", key=True, old=1),  # draft sequences per round
    # the dial's setting: an instrument, not a drafter one would deploy (drafters.py)
    F("acceptance", float, md=7, table=5, header="dial a", key=True, fmt="g"),
    F("K", int, md=7, table=5, header="K", key=True, plot=True),
    F("temperature", float, md=8, table=6, header="T", key=True, plot=True, fmt="g"),
    F("top_k", int, key=True),
    F("top_p", float, md=9, table=7, header="top-p", key=True, fmt="g"),
    F("seed", int, key=True),
    F("prompt_id", str, md=5, table=3, header="prompt", key=True),
    F("prompt_sha", str),
    F(
        "category", str
    ),  # the prompt's category (its suite's: built in or --prompts-file); "all": a batch of them
    F("n_tokens", int, key=True),
    F("repeats", int),
    F("warmup", int),
    F("loop", str, key=True),
    F("batch", int, md=6, table=4, header="batch", key=True, old=1),
    F(
        "queue", int, key=True
    ),  # a refilled batch's requests, served on its `batch` slots; empty: a fixed batch
    F("batch_prompts", int),  # distinct prompts in a batch: 1 when one prompt is repeated
    # wall times of the repeats (mean ± σ, range, median), AR then SD
    *[F(f"ar_{s}") for s in ("mean_s", "std_s", "min_s", "max_s", "median_s")],
    F("ar_tokens_per_s", md=10, table=8, header="AR tok/s", fmt=".1f"),
    *[F(f"sd_{s}") for s in ("mean_s", "std_s", "min_s", "max_s", "median_s")],
    F("sd_tokens_per_s", md=11, table=9, header="SD tok/s", fmt=".1f"),
    # per request (requests.py): p50, p95, p99 of TTFT, TPOT, E2E, (--itl) the gaps between tokens,
    # and (a refilled queue) the time before each request's prefill
    *[
        F(f"{m}_{x}_p{p}_s", fmt="ms")
        for m in ("ar", "sd")
        for x in ("ttft", "tpot", "e2e", "itl", "queued")
        for p in (50, 95, 99)
    ],
    # AIPerf's run-level acceptance over the requests' rounds pooled (requests.pooled_acceptance)
    F("token_weighted_acceptance_length"),
    F("overall_draft_acceptance_rate", fmt=".3f"),
    # a queue served as requests arrive (--request-rate; serving.py): the rate, the SLO and, per
    # method, the requests a second served, those that met the SLO a second, and their share
    F("request_rate", float, md=6, table=4, header="req/s", key=True, fmt="g"),  # empty: a closed queue
    F("slo", str, key=True),  # "ttft=1s,tpot=0.05s": the bounds a request met to count as goodput
    *[F(f"{m}_{x}") for m in ("ar", "sd") for x in ("served_rps", "goodput_rps", "slo_attainment")],
    F("speedup", md=12, table=10, header="speedup", plot=True),
    F("speedup_std", table=11, header="±"),
    # a peer's row (peers.py): its times over specbench's own on the same method, same run
    F("ar_over_specbench"),
    F("sd_over_specbench"),
    # acceptance
    F("n_rounds", int),
    F("tokens_per_round", md=13, table=12, header="tok/round", plot=True),
    F("mean_drafted"),
    F("r", fmt=".3f"),
    F("alpha", md=14, table=15, header="α", plot=True, fmt=".3f"),
    F("accept_rate_drafted"),
    F("batch_rounds", int),
    F("tokens_per_batch_round", table=13, header="tok/batch-round"),
    F("idle_fraction", table=14, header="idle", fmt="%"),
    # step times and theory
    F("t_draft_s", plot=True, fmt="ms"),
    F("t_target_s", table=16, header="t_target", plot=True, fmt="ms"),
    F("t_verify_s", table=17, header="t_verify", fmt="ms"),
    F("t_comm_target_s", fmt="ms"),  # on a mesh: the collectives of t_target, timed alone
    F("t_comm_verify_s", fmt="ms"),  # and of t_verify (measure/collectives.py)
    F("t_round_s", fmt="ms"),
    F("t_overhead_s", fmt="ms"),
    F("t_overhead_err_s", fmt="ms"),
    F("t_ar_token_s", fmt="ms"),
    # the time budget: each wall time as the parts measured on their own, and what they leave
    F("t_ar_start_s", fmt="ms"),
    F("t_sd_start_s", fmt="ms"),
    F(
        "ar_starts", float
    ),  # batched starts' worth and steps the budget counts: 1 and N - 1, or a refilled queue's
    F("ar_steps", int),
    F("sd_starts", float),
    F("ar_accounted_s", fmt="ms"),
    F("sd_accounted_s", fmt="ms"),
    F("ar_residual_s", fmt="ms"),
    F("sd_residual_s", fmt="ms"),
    F("theory_speedup", md=15, table=18, header="theory"),
    F("refined_speedup", md=16, table=19, header="refined", plot=True),
    F("round_model_speedup"),
    F("accounted_speedup", md=18),
    F("measured_over_theory"),
    F("measured_over_refined", md=17),
    F("measured_over_accounted", md=19),
    F("measured_over_accounted_err"),
    F("budget_closed", bool),  # budget.closes: measured / accounted within 10%, each residual within 10%
    F("tokens_per_round_iid"),
    F("tokens_per_round_positional"),
    F("best_K_predicted", int),
    F("compile_s"),
    F("programs_cached", int),  # of the programs compile_s made, those read from the persistent cache
    # how busy the machine was while the row was measured (load.py): other processes, in cores
    F("other_load", fmt=".2f"),
    F("under_load", bool),
    # a GPU card's state at the start and the end of the timed repeats (measure/card.py): clocks, power,
    # temperature and the reasons its clocks were held
    *(
        F(f"card_{what}_{end}", float)
        for end in ("before", "after")
        for what in ("sm_mhz", "mem_mhz", "power_w", "temperature_c")
    ),
    F("card_reasons_before", list, csv=False),
    F("card_reasons_after", list, csv=False),
    F("report_job", str),  # `specbench report`: the battery's name of the job
    F("identical", bool, table=20, header="T=0 same"),
    # how much SD's text repeats itself (repetition.py): α on a loop overstates a draft's worth
    F("repetition", fmt="%"),
    F("repeat_cycle", int),
    F("repeat_from", int),
    F("same_as_specbench", bool),
    F("first_difference", str),
    # JSON only; for a batch (B > 1) prompt, token ids and texts are lists, one entry per sequence
    F("prompt", object, csv=False),
    F("ar_times_s", list, csv=False),
    F("sd_times_s", list, csv=False),
    F("accepted_hist", list, csv=False),
    F("accepted_hist_per_seq", list, csv=False),  # a batch: each sequence's accepted_hist
    F("per_position_acceptance", list, csv=False),
    F("drafted_hist", list, csv=False),
    F("ar_token_ids", list, csv=False),
    F("sd_token_ids", list, csv=False),
    F("batch_prompt_ids", list, csv=False),
    F("requests", list, csv=False),  # every request's times and speculative block (requests.records)
    F("ar_text", object, csv=False),
    F("sd_text", object, csv=False),
]
BY_NAME = {f.name: f for f in FIELDS}

# A roofline row (measure/roofline.py, `specbench roofline`, the report's roofline section): one
# step shape of one model, against both roofs. `table` places a column in the command's table and
# the report's.
CONTEXT = FIELDS[:5]
ROOFLINE_FIELDS = [
    *CONTEXT,
    F("model", str, table=1, header="model"),
    F("mesh", str),  # the model's split over devices ("tp=2"): then bytes and FLOPs are one device's
    F("part", str),  # "step", or one fused Pallas kernel of a layer (roofline.PARTS)
    F("weights", str),
    F("dtype", str, table=2, header="dtype"),
    F("kernels", str, table=3, header="kernels"),
    F("pallas_backend", str),  # the Pallas kernels' products: triton or mosaic (SPECBENCH_PALLAS_BACKEND)
    F("layout", str),
    F("layout_extra_bytes", int, table=4, header="+MB", fmt="MB"),
    F("context", int),
    F("n_tokens_per_step", int, table=5, header="tokens"),
    F("t_step_s", table=6, header="t_step", fmt="ms"),
    F("bound_s", table=7, header="memory roof", fmt="ms"),
    F("compute_s", table=8, header="compute roof", fmt="ms"),
    F("limit_s", fmt="ms"),
    F("limited_by", str),
    F("t_over_limit", table=9, header="t/limit"),
    F("fraction_of_bound", fmt="%"),
    F("t_over_t1", table=10, header="t(n)/t(1)"),
    F("bytes_per_step", int, fmt="MB"),
    F("flops_per_step", fmt="G"),
    F("achieved_gbps", table=11, header="GB/s", fmt=".1f"),
    F("achieved_gflops", fmt=".1f"),
    F("peak_gbps", fmt=".0f"),
    F("measured_gbps", fmt=".1f"),
    F("read_gbps_xla", fmt=".1f"),
    F("read_gbps_kernel", fmt=".1f"),
    F("bound_gbps", fmt=".1f"),
    F("bound_source", str),
    F("matmul_gflops", fmt=".0f"),
    F("t_plain_step_s", fmt="ms"),
    F("plain_over_loop", table=12, header="plain/loop"),
    F("t_comm_s", fmt="ms"),  # on a mesh: the step's collectives, timed alone (measure/collectives.py)
    F("comm_share", table=13, header="comm", fmt="%"),  # t_comm_s / t_step_s
]
ROOFLINE_BY_NAME = {f.name: f for f in ROOFLINE_FIELDS}
ROOFLINE_COLUMNS = [f.name for f in ROOFLINE_FIELDS]
ROOFLINE_TABLE = [f for f in sorted((f for f in ROOFLINE_FIELDS if f.table), key=lambda f: f.table)]
PARTS_TABLE = [  # the table of a Pallas layout's kernels alone (roofline.kernel_parts)
    dataclasses.replace(ROOFLINE_BY_NAME["part"], header="kernel"),
    *(ROOFLINE_BY_NAME[name] for name in ("model", "dtype", "n_tokens_per_step", "t_step_s", "bound_s")),
    *(ROOFLINE_BY_NAME[name] for name in ("t_over_limit", "t_over_t1", "bytes_per_step", "achieved_gbps")),
]


def filled(fields: list[Field], rows: list[dict]) -> list[Field]:
    """The fields that some row gives a value: a table's columns (comm only on a mesh)."""
    return [f for f in fields if any(r.get(f.name) is not None for r in rows)]


CSV_COLUMNS = [f.name for f in FIELDS if f.csv]
MARKDOWN_COLUMNS = [f.name for f in sorted((f for f in FIELDS if f.md), key=lambda f: f.md)]
TABLE_COLUMNS = [f.name for f in sorted((f for f in FIELDS if f.table), key=lambda f: f.table)]
SWEEP_KEY = tuple(f.name for f in FIELDS if f.key)
SETTINGS = [f.name for f in FIELDS[: [f.name for f in FIELDS].index("batch") + 1]]  # context and settings
PLOT_FIELDS = tuple(f.name for f in FIELDS if f.plot)


def as_row(values: dict) -> dict:
    """values as a row: in FIELDS' order, fields without a value left out. A key that is not a
    field is an error (ValueError naming it), not a column silently dropped."""
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise ValueError(f"not fields of a row (schema.FIELDS): {', '.join(unknown)}")
    return {f.name: values[f.name] for f in FIELDS if f.name in values}


def sweep_key(row: dict) -> tuple:
    """The settings that tell a sweep row apart (rows of older versions read with each key's `old`)."""
    return tuple(row.get(name, BY_NAME[name].old) for name in SWEEP_KEY)


def varying(rows: list[dict], exclude: tuple[str, ...] = ()) -> list[str]:
    """The settings (SWEEP_KEY fields) that take more than one value across the rows."""
    return [
        n for n in SWEEP_KEY if n not in exclude and len({str(r.get(n, BY_NAME[n].old)) for r in rows}) > 1
    ]


def cell(column: str, value, fields: dict | None = None) -> str:
    """A table cell with the decimals its column deserves (tokens/s 1, speedups 2, alpha 3), its
    Field found in `fields` (default: the result row's)."""
    if value is None:
        return ""
    field = (BY_NAME if fields is None else fields).get(column)
    fmt = field.fmt if field else ".2f"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, int) and fmt != "MB")
    ):
        return str(value)
    if fmt == "ms":
        return f"{value * 1e3:.2f} ms"
    if fmt == "%":
        return f"{value:.0%}"
    if fmt == "MB":
        return f"{value / 1e6:.1f}"
    if fmt == "G":
        return f"{value / 1e9:.2f}"
    return format(value, fmt)


def missing_for_plot(rows: list[dict]) -> str | None:
    """Why these rows cannot be plotted, or None: no rows, or rows without the fields a plot needs."""
    if not rows:
        return "no rows"
    for i, r in enumerate(rows):
        gone = [f for f in PLOT_FIELDS if f not in r]
        if gone:
            return f"row {i + 1} has no {', '.join(gone)}"
        # alpha is null where no draft was ever tested (dynamic K that never drafted): no theory curve
        bad = [f for f in PLOT_FIELDS if not _is_number(r[f]) and not (f == "alpha" and r[f] is None)]
        if bad or not isinstance(r["K"], int) or isinstance(r["K"], bool):
            return f"row {i + 1} has {', '.join(bad or ['K'])} that is not a number"
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN != NaN
