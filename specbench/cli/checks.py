"""Flag by flag, the checks a plan is built from: drafters, prompts and sizes, memory, and flags
that would have no effect (models: loading.py; paths and resume files: paths.py). Each failure is
BadInput, one line naming the flag."""

from __future__ import annotations

from pathlib import Path

from specbench.cli.console import BadInput, bad_input
from specbench.cli.params import NGRAM_MAX, VERIFY_SHAPES, DynamicTree, tree_depth, tree_label
from specbench.cli.paths import FORMATS
from specbench.errors import DecodeError

# ---------------------------------------------------------------------------------------------
# Drafters


def kinds_that(trait: str) -> tuple[str, ...]:
    """drafters.kinds_that, imported when a plan is checked (not for --help)."""
    from specbench.model.decode import drafters

    return drafters.kinds_that(trait)


def check_drafter_flags(kinds: list[str], f: dict) -> None:
    """The drafter flags, checked before any model is loaded."""
    from specbench.model.decode.drafters import KINDS

    for kind in kinds:
        if kind not in KINDS:
            raise BadInput("--drafter", f"{kind!r} is not a drafter; use {', '.join(KINDS)}")
    if f["draft"] is not None and not any(KINDS[k].draft_model for k in kinds):
        raise BadInput(
            "--draft", f"only the model drafter uses a draft model ({', '.join(kinds)} draft without one)"
        )
    if not 1 <= f["ngram"] <= NGRAM_MAX:
        raise BadInput("--ngram", f"must be >= 1 and <= {NGRAM_MAX} (got {f['ngram']})")
    if f["draft_layers"] is not None and f["draft_layers"] < 1:
        raise BadInput(
            "--draft-layers", f"must be >= 1 and below the target's depth (got {f['draft_layers']})"
        )
    if not 0 < f["draft_confidence"] < 1:
        raise BadInput("--draft-confidence", f"must be in (0, 1) (got {f['draft_confidence']:g})")
    if f["dynamic_K"] and not set(kinds) & set(kinds_that("network")):
        raise BadInput(
            "--dynamic-K", f"needs a drafter with probabilities (model or layerskip), not {kinds[0]}"
        )
    check_method_flags(kinds, f)
    check_tree(kinds, f)


def check_tree(kinds: list[str], f: dict) -> None:
    """--tree: a drafter that proposes trees, judged by the tree's own rule, one sequence; it sets
    K to the tree's depth (check_no_effect refuses a --K that says otherwise)."""
    widths = f.get("tree")
    if not widths:
        return
    without = [k for k in kinds if k not in kinds_that("trees")]
    if without:
        raise BadInput(
            "--tree",
            f"the {without[0]} drafter proposes no trees: use --drafter {' or '.join(kinds_that('trees'))}",
        )
    for flag, setting in (("--drafts", max(method_flags(f)[1]) > 1), ("--dynamic-K", f["dynamic_K"])):
        if setting:
            raise BadInput(flag, "a tree is judged by its own rule: leave it out with --tree")
    if max(f.get("batches") or [f.get("batch") or 1]) > 1 or f.get("peers"):
        raise BadInput("--tree", "decodes one sequence, without peers: use --batch 1 and no --peer")
    depth = tree_depth(widths)
    f["K"] = [depth] if isinstance(f["K"], list) else depth  # sweep's K is a list
    if isinstance(widths, DynamicTree) and "traversal" in method_flags(f)[0]:
        raise BadInput("--verify", "traversal judges a fixed tree: a dynamic one is judged from its root")


def method_flags(f: dict) -> tuple[list[str], list[int], list[float] | None]:
    """(verify methods, draft counts, the dial's acceptances or None), from run's single values
    or sweep's lists."""
    if "verify_methods" in f:
        return f["verify_methods"], f["drafts_list"], f["acceptances"]
    return [f["verify"]], [f["drafts"]], None if f["acceptance"] is None else [f["acceptance"]]


def check_method_flags(kinds: list[str], f: dict) -> None:
    """--verify, --drafts and --acceptance against the drafters, the temperature, the batch and the peers."""
    verifies, drafts, acceptances = method_flags(f)
    temperatures = f["temperature"] if isinstance(f["temperature"], list) else [f["temperature"]]
    batches = f.get("batches") or [f.get("batch") or 1]
    dial = set(kinds) & set(kinds_that("acceptance"))
    if acceptances is not None and not dial:
        raise BadInput("--acceptance", "only the dial drafter uses it (--drafter dial)")
    if dial:
        if acceptances is None:
            raise BadInput(
                "--acceptance", "the dial needs one: the acceptance per draft, in [0, 1] (e.g. 0.5)"
            )
        if any(t != 0 for t in temperatures):
            raise BadInput("--temperature", "the dial proposes the target's greedy tokens: it runs at -t 0")
    if max(drafts) > 1:
        if set(kinds) - set(kinds_that("k_drafts")):
            other = sorted(set(kinds) - set(kinds_that("k_drafts")))[0]
            raise BadInput("--drafts", f"several drafts need a model or layerskip drafter, not {other}")
    shapes = {"tree"} if f.get("tree") else {"drafts" if k > 1 else "chain" for k in drafts}
    names = {
        "chain": "one draft sequence",
        "tree": "a token tree (--tree)",
        "drafts": "k drafts (--drafts 2 or more)",
    }
    for v in verifies:
        for shape in sorted(shapes - set(VERIFY_SHAPES[v])):
            allowed = " or ".join(names[s] for s in VERIFY_SHAPES[v])
            raise BadInput(
                "--verify", f"{v} judges {allowed}, not {names[shape]} (sweep them in separate runs)"
            )
    if "gbv" in verifies and f["dynamic_K"]:
        raise BadInput("--dynamic-K", "gbv ranks k whole sequences: leave out --dynamic-K")
    if max(batches) > 1 and (dial or max(drafts) > 1):
        what = "the dial" if dial else "several drafts (themselves a batch of k)"
        raise BadInput("--batch", f"{what} decode one sequence: use --batch 1")
    if f.get("peers") and (verifies != ["token"] or max(drafts) > 1 or dial):
        raise BadInput(
            "--peer", "peers verify one draft model's drafts token by token: leave out --peer here"
        )


def make_drafter(kind: str, draft, target, f: dict):
    """(Drafter, the name result rows give its draft), for run's and trace's --verify, --drafts
    and --acceptance (sweep varies them with method_variants)."""
    drafter, name = network_drafter(kind, draft, target, f)
    return method_variants(drafter, name, [f["verify"]], [f["drafts"]], [f["acceptance"]])[0]


def method_variants(drafter, name: str, verifies, drafts, acceptances) -> list[tuple]:
    """The drafter with each verify method, draft count and (the dial) acceptance: [(Drafter, name)]."""
    import dataclasses

    out = []
    for a in acceptances if drafter.spec.acceptance else [None]:
        for v in verifies:
            for k in drafts:
                d = dataclasses.replace(drafter, verify=v, drafts=k, acceptance=a)
                suffix = f"(a={a:g})" if a is not None else ""
                out.append((d, name + suffix + (f" x{k}" if k > 1 else "")))
    return out


def drafts_for(kind: str, target) -> bool:
    """Whether a drafter of this kind drafts for this target: any for a GPT-2; for a T5 not yet
    layer-skip (the target's first layers) nor a kind that reads the target's features (EAGLE)
    (docs/encoder-decoders.md)."""
    from specbench.model.decode import drafters
    from specbench.model.nets import network

    spec = drafters.KINDS[kind]
    return not network.encoder_decoder(target.config) or not ("draft_layers" in spec.flags or spec.features)


def network_drafter(kind: str, draft, target, f: dict):
    """(Drafter, its name): what drafts, before the verify method and the draft count."""
    import dataclasses

    from specbench.model.decode import drafters
    from specbench.model.nets import network

    spec = drafters.KINDS[kind]
    conf = f["draft_confidence"] if f["dynamic_K"] and spec.network else None
    if network.encoder_decoder(target.config):  # what a T5 does not do yet (docs/encoder-decoders.md)
        if not drafts_for(kind, target):
            raise BadInput(
                "--drafter", f"{target.name} is a T5: it drafts with a model, lookup or the dial so far"
            )
        if f.get("tree"):
            raise BadInput("--tree", f"{target.name} is a T5: it verifies chains so far")
    setup = drafters.Setup(f["ngram"], f["draft_layers"], conf)
    try:  # its kind's own settings (drafters.KINDS): n-gram, layers, dynamic K
        drafter = spec.make(setup, draft.config if draft is not None else None, target.config)
    except ValueError as e:
        raise BadInput("--" + (spec.flags or ("drafter",))[0].replace("_", "-"), str(e)) from None
    name = spec.label(drafter, draft.name if draft is not None else None, target.name)
    if not spec.network:  # lookup and the dial: no head to restrict, no tree
        return drafter, name
    network = draft if spec.draft_model or spec.features else target
    drafter = dataclasses.replace(drafter, vocab=draft_vocabulary(f, network))
    if f.get("tree"):
        from specbench.model.decode.tree import Dynamic, Tree

        shape = f["tree"]
        tree = Dynamic(*shape) if isinstance(shape, DynamicTree) else Tree.branching(shape)
        drafter = dataclasses.replace(drafter, tree=tree)
        name += f" tree {tree_label(shape)}"
    return drafter, name


def draft_vocabulary(f: dict, network) -> int | None:
    """--draft-vocab for this drafting network: the tokens its head covers (None: all of them).
    A peer drafts over the whole vocabulary whatever this says (docs/peers.md)."""
    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import draft_vocab, eagle_files, tokenizer

    choice = f.get("draft_vocab", "auto")
    # a folder's own drafting.json is the folder's fault, not --draft-vocab's
    head = network.source is not None and eagle_files.is_head_dir(Path(network.source))
    folder = "--eagle-head" if head else "--draft/--target"
    try:
        n = draft_vocab.declared(network.source) if choice == "auto" else choice
    except SpecbenchError as e:
        raise BadInput(folder, str(e)) from None
    try:
        if n is not None:
            draft_vocab.frequent_ids(n, network.config.n_vocab)  # refused here, before any work
    except SpecbenchError as e:
        raise BadInput("--draft-vocab" if choice != "auto" else folder, str(e)) from None
    if n is not None and not tokenizer.for_model(network).name.startswith(tokenizer.GPT2.name):
        raise BadInput(  # a checkpoint's own tokenizer (T5's, a real Llama's): other ids, other counts
            "--draft-vocab" if choice != "auto" else folder,
            f"the ranking counts GPT-2's tokens of the bundled text; {network.name} reads text with its "
            "own tokenizer: use --draft-vocab full",
        )
    return n


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


def check_no_effect(f: dict, given: set[str], kinds: list[str], temperatures: list[float]) -> None:
    """A flag that would change nothing in this configuration is refused, not silently ignored."""
    if {"prompt", "prompt_id"} <= given:
        raise BadInput("--prompt/--prompt-id", "give one of them: a text, or the id of a built-in prompt")
    for name in ("top_k", "top_p"):
        if name in given and f[name] is not None and all(t == 0 for t in temperatures):
            flag = "--" + name.replace("_", "-")
            raise BadInput(
                flag, "has no effect at temperature 0 (greedy decoding): set -t > 0, or leave it out"
            )
    from specbench.model.decode.drafters import KINDS

    for name in dict.fromkeys(flag for kind in KINDS.values() for flag in kind.flags):
        owner = next(k for k in KINDS.values() if name in k.flags).name
        if name in given and not any(name in KINDS[k].flags for k in kinds if k in KINDS):
            raise BadInput(
                "--" + name.replace("_", "-"), f"only the {owner} drafter uses it (--drafter {owner})"
            )
    if "draft_vocab" in given and not set(kinds) & set(kinds_that("network")):
        raise BadInput("--draft-vocab", "only a network drafter has a head (--drafter model or layerskip)")
    if f.get("tree") and "K" in given and f["K"] != tree_depth(f["tree"]):
        depth = tree_depth(f["tree"])
        raise BadInput("--K", f"a tree of depth {depth} drafts K = {depth}: leave out --K")
    if "draft_confidence" in given and not f["dynamic_K"]:
        raise BadInput("--draft-confidence", "is dynamic K's threshold: it needs --dynamic-K")
    if sum(f.get(flag) == "-" for flag in FORMATS) > 1:
        raise BadInput(
            "--export-*", "only one export can go to standard output ('-'); write the others to files"
        )
