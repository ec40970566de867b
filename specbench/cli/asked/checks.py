"""The checks a plan is built from: the settings' own (check_settings, run once where a
settings.Settings is built: drafters, methods, trees, refill, placement, flags that would have no
effect), then what needs the models (prompts and sizes, memory). Models: loading.py; paths and
resume files: paths.py. Each failure is BadInput, one line naming the flag. `s` is always a
settings.Settings, which imports this module (and not the other way round)."""

from __future__ import annotations

from specbench.cli.asked.console import BadInput, bad_input
from specbench.cli.asked.params import NGRAM_MAX, VERIFY_SHAPES, DynamicTree, tree_depth
from specbench.errors import DecodeError

# ---------------------------------------------------------------------------------------------
# Drafters


def kinds_that(trait: str) -> tuple[str, ...]:
    """drafters.kinds_that, imported when a plan is checked (not for --help)."""
    from specbench.model.decode import drafters

    return drafters.kinds_that(trait)


def either(trait: str) -> str:
    """The kinds with a trait, as prose lists them: 'model, layerskip or eagle'."""
    *most, last = kinds_that(trait)
    return f"{', '.join(most)} or {last}" if most else last


def check_settings(s) -> None:
    """Every setting of a grid, before any model is loaded (settings.Settings builds through here,
    once)."""
    check_no_effect(s)
    check_drafter_flags(s)
    check_method_flags(s)
    check_tree(s)
    check_refill(s)
    check_placement(s)


def check_drafter_flags(s) -> None:
    """The drafter flags."""
    from specbench.model.decode.drafters import KINDS

    kinds, d = s.kinds, s.drafting
    for kind in kinds:
        if kind not in KINDS:
            raise BadInput("--drafter", f"{kind!r} is not a drafter; use {', '.join(KINDS)}")
    if s.models.draft is not None and not any(KINDS[k].draft_model for k in kinds):
        raise BadInput(
            "--draft", f"only the model drafter uses a draft model ({', '.join(kinds)} draft without one)"
        )
    if not 1 <= d.ngram <= NGRAM_MAX:
        raise BadInput("--ngram", f"must be >= 1 and <= {NGRAM_MAX} (got {d.ngram})")
    if d.draft_layers is not None and d.draft_layers < 1:
        raise BadInput("--draft-layers", f"must be >= 1 and below the target's depth (got {d.draft_layers})")
    if not 0 < d.draft_confidence < 1:
        raise BadInput("--draft-confidence", f"must be in (0, 1) (got {d.draft_confidence:g})")
    if d.dynamic_K and not set(kinds) & set(kinds_that("network")):
        raise BadInput(
            "--dynamic-K", f"needs a drafter with probabilities ({either('network')}), not {kinds[0]}"
        )


def check_tree(s) -> None:
    """--tree: a drafter that proposes trees, judged by the tree's own rule, one sequence (its
    depth is K: settings.checked sets it, and check_no_effect refuses a --K that says otherwise)."""
    widths = s.drafting.tree
    if not widths:
        return
    without = [k for k in s.kinds if k not in kinds_that("trees")]
    if without:
        raise BadInput(
            "--tree",
            f"the {without[0]} drafter proposes no trees: use --drafter {' or '.join(kinds_that('trees'))}",
        )
    for flag, setting in (("--drafts", max(s.drafts) > 1), ("--dynamic-K", s.drafting.dynamic_K)):
        if setting:
            raise BadInput(flag, "a tree is judged by its own rule: leave it out with --tree")
    if s.most_batch > 1 or s.peers:
        raise BadInput("--tree", "decodes one sequence, without peers: use --batch 1 and no --peer")
    if isinstance(widths, DynamicTree) and "traversal" in s.verifies:
        raise BadInput("--verify", "traversal judges a fixed tree: a dynamic one is judged from its root")


def check_method_flags(s) -> None:
    """--verify, --drafts and --acceptance against the drafters, the temperature, the batch and the peers."""
    kinds, drafts = s.kinds, s.drafts
    dial = set(kinds) & set(kinds_that("acceptance"))
    if s.acceptances is not None and not dial:
        raise BadInput("--acceptance", "only the dial drafter uses it (--drafter dial)")
    if dial:
        if s.acceptances is None:
            raise BadInput(
                "--acceptance", "the dial needs one: the acceptance per draft, in [0, 1] (e.g. 0.5)"
            )
        if any(t != 0 for t in s.temperatures):
            raise BadInput("--temperature", "the dial proposes the target's greedy tokens: it runs at -t 0")
    if max(drafts) > 1:
        if set(kinds) - set(kinds_that("k_drafts")):
            other = sorted(set(kinds) - set(kinds_that("k_drafts")))[0]
            raise BadInput("--drafts", f"several drafts need a {either('k_drafts')} drafter, not {other}")
    shapes = {"tree"} if s.drafting.tree else {"drafts" if k > 1 else "chain" for k in drafts}
    names = {
        "chain": "one draft sequence",
        "tree": "a token tree (--tree)",
        "drafts": "k drafts (--drafts 2 or more)",
    }
    for v in s.verifies:
        for shape in sorted(shapes - set(VERIFY_SHAPES[v])):
            allowed = " or ".join(names[shape_] for shape_ in VERIFY_SHAPES[v])
            raise BadInput(
                "--verify", f"{v} judges {allowed}, not {names[shape]} (sweep them in separate runs)"
            )
    if "gbv" in s.verifies and s.drafting.dynamic_K:
        raise BadInput("--dynamic-K", "gbv ranks k whole sequences: leave out --dynamic-K")
    if s.most_batch > 1 and (dial or max(drafts) > 1):
        what = "the dial decodes" if dial else "several drafts (themselves a batch of k) decode"
        raise BadInput("--batch", f"{what} one sequence: use --batch 1")
    if s.peers and (list(s.verifies) != ["token"] or max(drafts) > 1 or dial):
        raise BadInput(
            "--peer", "peers verify one draft model's drafts token by token: leave out --peer here"
        )


def check_refill(s) -> None:
    """--queue, --itl and --refill: a refilled batch runs on the device loop, one drafter for every
    slot, and no peer; --itl times one sequence."""
    if s.queue is not None and not s.refill:
        raise BadInput("--queue", "sets --refill's queue of requests: give --refill too")
    arrivals = any(r is not None for r in s.request_rates)
    if "request_rates" in s.given and not s.refill:
        raise BadInput("--request-rate", "serves --refill's queue as requests arriving: give --refill too")
    if s.slo and not arrivals:
        raise BadInput("--slo", "bounds the requests served at a --request-rate: give one")
    if s.itl and (s.refill or s.most_batch > 1):
        raise BadInput("--itl", "times one sequence's tokens as they arrive: use --batch 1, without --refill")
    if not s.refill:
        return
    if s.batches is None:
        raise BadInput("--refill", "serves a queue on --batch slots: give --batch")
    if s.host_loop:
        raise BadInput(
            "--host-loop", "drives one sequence; --refill serves its queue in the device loop only"
        )
    if set(s.kinds) & set(kinds_that("acceptance")):
        raise BadInput("--refill", "the dial drives one sequence at T = 0: it serves no queue")
    if s.peers:
        raise BadInput("--peer", "peers decode one sequence at a time: leave out --refill")
    for batch in s.batches:
        if s.queue is not None and s.queue < batch:
            raise BadInput(
                "--queue",
                f"a queue of {s.queue} cannot keep --batch {batch}'s slots busy: "
                f"give at least {batch} requests",
            )
    for rate in (r for r in s.request_rates if r is not None):
        check_arrivals(rate, max(s.queue_for(b) for b in s.batches), s.repeats)


# The longest a run may spend waiting for its arrivals, all repeats and both methods together.
ARRIVALS_MAX_S = 3600.0


def arrivals_span(rate: float, queue: int) -> float:
    """The expected seconds between a queue's first and last arrival at `rate` a second (Poisson:
    queue - 1 exponential gaps of mean 1/rate)."""
    return (queue - 1) / rate


def check_arrivals(rate: float, queue: int, repeats: int) -> None:
    """--request-rate: the queue's arrivals, AR's and SD's each repeat, end within ARRIVALS_MAX_S
    (a rate so low that they would not, or whose gaps overflow the clock, is refused)."""
    span = arrivals_span(rate, queue)
    total = 2 * repeats * span
    if not total <= ARRIVALS_MAX_S:  # also inf and nan, from a rate near 0
        lowest = 2 * repeats * (queue - 1) / ARRIVALS_MAX_S
        over = (
            f"{queue} requests arrive over about {fmt_seconds(span)}, {fmt_seconds(total)} for AR and SD "
            f"over {repeats} repeat(s)"
            if total < 1e12
            else f"{queue} requests never all arrive"
        )
        raise BadInput(
            "--request-rate",
            f"at {rate:g}/s {over}; a run waits at most {fmt_seconds(ARRIVALS_MAX_S)} for its arrivals: "
            f"use at least {lowest:.3g}/s, or a smaller --queue or --repeats",
        )


def fmt_seconds(s: float) -> str:
    """3600 -> '1.0 h', 90 -> '1.5 min', 2.5 -> '2.5 s'."""
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s"


def check_placement(s) -> None:
    """A draft on a device of its own (--draft-device) is a draft model's, drafting one chain for
    one sequence, in one process: its rounds are driven from the host (decode/placed.py)."""
    if s.draft_device is None:
        return
    if set(s.kinds) - set(kinds_that("draft_model")):
        raise BadInput("--draft-device", "places a draft model: it takes --drafter model only")
    tree = s.drafting.tree is not None
    for flag, refused in (
        ("--batch", s.most_batch > 1),
        ("--refill", s.refill),
        ("--itl", s.itl),
        ("--peer", s.peers),
        ("--processes", s.processes),
        ("--tree" if tree else "--drafts", tree or max(s.drafts) > 1),
    ):
        if refused:
            raise BadInput(
                flag, "a draft on a device of its own (--draft-device) drafts one chain of one sequence"
            )


# ---------------------------------------------------------------------------------------------
# Prompts, sizes and memory


def check_decodable(
    prompt_ids, n_tokens: int, K: int, models: list, reach: str = "K", origin: str | None = None
) -> None:
    """The prompt, N and K (what a round writes: `reach` names its setting, K or tree) fit every
    model; else BadInput blaming the setting the DecodeError names. `origin`, FILE:LINE of a
    prompt file's prompt, is blamed for the prompt (--prompts-file)."""
    from specbench.model.decode.sizing import validate

    try:
        validate(prompt_ids, n_tokens, K, models, None, reach)
    except DecodeError as e:
        if origin is not None and e.setting == "prompt":
            raise BadInput("--prompts-file", f"{origin}: prompt: {e}") from None
        raise bad_input(e, "--n-tokens") from None


def check_batch(
    batch: int, host_loop: bool, drafter, d, t, encoded: list[list[int]], n_tokens: int, K: int
) -> None:
    """A batch runs on the device loop, and its caches must fit the device. `encoded` are the
    batch's distinct prompts (the longest sets the cache length)."""
    from specbench.measure import device
    from specbench.model import generate
    from specbench.model.decode import batched
    from specbench.model.nets import network
    from specbench.model.nets.layouts import resident_bytes

    if batch == 1:
        return
    if host_loop:
        raise BadInput(
            "--host-loop", f"drives one sequence; a batch (--batch {batch}) runs in the device loop only"
        )
    configs = [t.config] + ([drafter.config] if drafter.config is not None else [])  # lookup runs no network
    max_len = generate.plan(encoded, n_tokens, drafter.reach(K), [m for m in (d, t) if m is not None])
    itemsize = network.dtype_of(t.params, t.config).itemsize
    weights = resident_bytes(t.params) + (
        resident_bytes(d.params) if d is not None and drafter.spec.draft_model else 0
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


def check_no_effect(s) -> None:
    """A flag that would change nothing in this configuration is refused, not silently ignored."""
    given = s.given
    if {"prompt", "prompt_id"} <= given:
        raise BadInput("--prompt/--prompt-id", "give one of them: a text, or the id of a built-in prompt")
    greedy = all(t == 0 for t in s.temperatures)
    for name, setting in (("top_k", s.top_k), ("top_p", s.top_ps != (None,))):
        if name in given and setting and greedy:
            flag = "--" + name.replace("_", "-")
            raise BadInput(
                flag, "has no effect at temperature 0 (greedy decoding): set -t > 0, or leave it out"
            )
    from specbench.model.decode.drafters import KINDS

    for name in dict.fromkeys(flag for kind in KINDS.values() for flag in kind.flags):
        owner = next(k for k in KINDS.values() if name in k.flags).name
        if name in given and not any(name in KINDS[k].flags for k in s.kinds if k in KINDS):
            raise BadInput(
                "--" + name.replace("_", "-"), f"only the {owner} drafter uses it (--drafter {owner})"
            )
    if "draft_vocab" in given and not set(s.kinds) & set(kinds_that("network")):
        raise BadInput("--draft-vocab", f"only a network drafter has a head (--drafter {either('network')})")
    tree = s.drafting.tree
    if tree and "K" in given and s.Ks != (tree_depth(tree),):
        depth = tree_depth(tree)
        raise BadInput("--K", f"a tree of depth {depth} drafts K = {depth}: leave out --K")
    if "draft_confidence" in given and not s.drafting.dynamic_K:
        raise BadInput("--draft-confidence", "is dynamic K's threshold: it needs --dynamic-K")
    if sum(path == "-" for _, path in s.output.exports) > 1:
        raise BadInput(
            "--export-*", "only one export can go to standard output ('-'); write the others to files"
        )
