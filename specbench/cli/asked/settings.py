"""The settings a measurement is made of, typed once from the command line, in the manner of
llama-bench's parameter vectors: every axis is a tuple, and a configuration is one value of each.
`run` and `trace` give one value an axis (a grid of one cell), `sweep` lists, and `report` one
Settings a job. Every setting is checked where the Settings is built (checks.check_settings),
before any model is loaded; what needs the models (a prompt's length, the memory) is checked by
the plan once they are, and nothing is checked inside a timed region."""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

from specbench.cli.asked.checks import check_settings
from specbench.cli.asked.params import DRAFT_CONFIDENCE, DynamicTree, tree_depth
from specbench.measure.prepared import RunConfig


@dataclasses.dataclass(frozen=True)
class Drafting:
    """What the drafters of every configuration share: their kinds' own settings (--ngram,
    --draft-layers, dynamic K), the head's vocabulary and the tree."""

    ngram: int = 3
    draft_layers: int | None = None
    draft_confidence: float = DRAFT_CONFIDENCE
    dynamic_K: bool = False
    draft_vocab: int | str | None = "auto"  # a number of tokens, "auto" (the folder's), None (all)
    tree: tuple[int, ...] | DynamicTree | None = None


class Method(NamedTuple):
    """How the target judges: the verify method, the draft sequences a round, the dial's acceptance."""

    verify: str = "token"
    drafts: int = 1
    acceptance: float | None = None


@dataclasses.dataclass(frozen=True)
class Models:
    """The pair and how it runs: names (or folders), random weights, dtype, kernels, the mesh a
    target is split over, and an EAGLE head's folder."""

    draft: str | None = None
    target: str | None = None
    random_init: bool = False
    dtype: str = "float32"
    kernels: str = "auto"
    mesh: str | None = None
    eagle_head: str | None = None
    mtp_head: str | None = None
    target_dtype: str | None = None  # each model's own --dtype, where given
    draft_dtype: str | None = None


@dataclasses.dataclass(frozen=True)
class PromptChoice:
    """Which prompts: run's and trace's one (--prompt, --prompt-id), sweep's selection (--prompts),
    a --prompts-file and its choosers."""

    text: str = ""
    id: str | None = None
    spec: str | None = None  # sweep's --prompts
    file: str | None = None
    per_category: int | None = None
    sample: int | None = None
    limit: int | None = None


@dataclasses.dataclass(frozen=True)
class Output:
    """What is written: run's saved row, sweep's and report's --output, and the exports
    ({format: path or '-'}, as pairs: a Settings is frozen)."""

    save: bool = False
    path: str | None = None
    resume: bool = False
    force: bool = False
    exports: tuple[tuple[str, str | None], ...] = ()

    @property
    def export_paths(self) -> dict[str, str | None]:
        return dict(self.exports)


@dataclasses.dataclass(frozen=True)
class Processes:
    """A run over several processes: --coordinator, --processes, --process-id, --join-timeout."""

    coordinator: str | None = None
    count: int | None = None
    index: int | None = None
    join_timeout: float = 60.0


class Cell(NamedTuple):
    """One configuration of a grid, less its prompts: what a result row varies."""

    kind: str
    method: Method
    temperature: float
    top_p: float | None
    K: int


@dataclasses.dataclass(frozen=True)
class Settings:
    """A grid of configurations and what they all share. `batches` None: each prompt alone."""

    kinds: tuple[str, ...] = ("model",)
    Ks: tuple[int, ...] = (4,)
    temperatures: tuple[float, ...] = (0.0,)
    top_ps: tuple[float | None, ...] = (None,)
    verifies: tuple[str, ...] = ("token",)
    drafts: tuple[int, ...] = (1,)
    acceptances: tuple[float, ...] | None = None  # the dial's; None for every other drafter
    batches: tuple[int, ...] | None = None
    top_k: int | None = None
    drafting: Drafting = Drafting()
    n_tokens: int = RunConfig.n_tokens  # a benchmark's own defaults (measure/prepared.py)
    seed: int = RunConfig.seed
    repeats: int = RunConfig.repeats
    warmup: int = RunConfig.warmup
    host_loop: bool = False
    itl: bool = False
    refill: bool = False
    queue: int | None = None  # --refill's requests [default: 4 x the batch]
    request_rates: tuple[float | None, ...] = (None,)  # --request-rate, a second; None: the closed queue only
    slo: tuple[tuple[str, float], ...] = ()  # --slo's bounds (s), as (metric, bound)
    peers: tuple[str, ...] = ()
    draft_device: int | None = None
    processes: int | None = None
    models: Models = Models()
    prompts: PromptChoice = PromptChoice()
    output: Output = Output()
    dry_run: bool = False
    given: frozenset[str] = frozenset()  # the flags the user set (console.given), for check_no_effect

    @classmethod
    def of_run(cls, f: dict, given: set[str]) -> Settings:
        """run's (and trace's) flags, one value each, checked: a grid of one configuration."""
        one = lambda name, default=None: (f.get(name, default),)
        a = f.get("acceptance")
        s = cls(
            kinds=one("drafter", "model"),
            Ks=one("K"),
            temperatures=one("temperature"),
            top_ps=one("top_p"),
            verifies=one("verify", "token"),
            drafts=one("drafts", 1),
            acceptances=None if a is None else (a,),
            batches=one("batch", 1),
            **shared(f, given),
        )
        if len(s.request_rates) > 1:
            from specbench.cli.asked.console import BadInput

            raise BadInput("--request-rate", "run serves at one rate: sweep takes a list")
        return checked(s)

    @classmethod
    def of_sweep(cls, f: dict, given: set[str]) -> Settings:
        """sweep's flags, a list an axis, checked."""
        a, b = f["acceptances"], f["batches"]
        s = cls(
            kinds=tuple(f["drafter_kinds"]),
            Ks=tuple(f["K"]),
            temperatures=tuple(f["temperature"]),
            top_ps=tuple(f["top_p"] or [None]),
            verifies=tuple(f["verify_methods"]),
            drafts=tuple(f["drafts_list"]),
            acceptances=None if a is None else tuple(a),
            batches=None if b is None else tuple(b),
            **shared(f, given),
        )
        return checked(s)

    @classmethod
    def of_report(cls, f: dict, given: set[str]) -> Settings:
        """report's flags: the pair, the prompts and the output; the battery makes its own grid."""
        return cls(**shared(f, given))

    @property
    def most_batch(self) -> int:
        """The largest batch of the grid (1 without a batch axis)."""
        return max(self.batches or (1,))

    def queue_for(self, batch: int) -> int | None:
        """--refill's queue for a batch of this size (--queue, else 4 x the batch); None without --refill."""
        return (self.queue or 4 * batch) if self.refill else None

    def methods(self, acceptance: bool) -> list[Method]:
        """Every verify method with every draft count; for the dial (acceptance), each acceptance too."""
        dial = self.acceptances if acceptance and self.acceptances else (None,)
        return [Method(v, k, a) for a in dial for v in self.verifies for k in self.drafts]

    def cells(self, kind: str, method: Method) -> list[Cell]:
        """This drafter's and method's configurations: every temperature, top-p and K."""
        grid = itertools.product(self.temperatures, self.top_ps, self.Ks)
        return [Cell(kind, method, t, p, k) for t, p, k in grid]

    def timing(self) -> dict:
        """The RunConfig fields that every configuration of the grid shares."""
        fields = ("n_tokens", "seed", "repeats", "warmup", "itl", "slo")
        return {k: getattr(self, k) for k in fields} | {"device_loop": not self.host_loop}


def shared(f: dict, given: set[str]) -> dict:
    """The Settings fields run's, sweep's and report's flags give alike: all but the grid's axes.
    The one place the flags become typed options."""
    drafting = Drafting(
        f.get("ngram", 3),
        f.get("draft_layers"),
        f.get("draft_confidence", DRAFT_CONFIDENCE),
        bool(f.get("dynamic_K")),
        f.get("draft_vocab", "auto"),
        f.get("tree"),
    )
    return dict(
        top_k=f.get("top_k"),
        drafting=drafting,
        n_tokens=f.get("n_tokens", RunConfig.n_tokens),
        seed=f.get("seed", RunConfig.seed),
        repeats=f.get("repeats", 1),
        warmup=f.get("warmup", 1),
        host_loop=bool(f.get("host_loop")),
        itl=bool(f.get("itl")),
        refill=bool(f.get("refill")),
        queue=f.get("queue"),
        request_rates=tuple(None if r == float("inf") else r for r in f.get("request_rates") or [None]),
        slo=tuple((f.get("slo") or {}).items()),
        peers=tuple(f.get("peers") or ()),
        draft_device=f.get("draft_device"),
        processes=f.get("processes"),
        models=Models(
            *(f.get(k) for k in ("draft", "target")),
            bool(f.get("random_init")),
            f.get("dtype", "float32"),
            f.get("kernels", "auto"),
            f.get("mesh"),
            f.get("eagle_head"),
            f.get("mtp_head"),
            f.get("target_dtype"),
            f.get("draft_dtype"),
        ),
        prompts=PromptChoice(
            f.get("prompt", ""),
            f.get("prompt_id"),
            f.get("prompt_spec"),
            *(f.get(k) for k in ("prompts_file", "per_category", "sample", "limit")),
        ),
        output=Output(
            bool(f.get("save")),
            f.get("output"),
            bool(f.get("resume")),
            bool(f.get("force")),
            tuple((fmt, f.get(f"export_{fmt}")) for fmt in ("csv", "json", "markdown")),
        ),
        dry_run=bool(f.get("dry_run")),
        given=frozenset(given),
    )


@dataclasses.dataclass(frozen=True)
class Roofline:
    """roofline's options: the models, dtypes and kernels to time, a step's K and cache, and the exports."""

    models: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ("auto",)
    random_init: bool = False
    mesh: str | None = None
    K: int = 4
    context: int = 128
    exports: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def of_flags(cls, f: dict) -> Roofline:
        exports = tuple((fmt, f.get(f"export_{fmt}")) for fmt in ("csv", "json", "markdown"))
        names, dtypes = tuple(f["model_names"] or ()), tuple(f["dtypes"] or ())
        return cls(
            names,
            dtypes,
            tuple(f["kernels"]),
            bool(f["random_init"]),
            f["mesh"],
            f["K"],
            f["context"],
            exports,
        )


def processes_of(f: dict) -> Processes:
    """run's --coordinator, --processes, --process-id and --join-timeout."""
    return Processes(
        f.get("coordinator"), f.get("processes"), f.get("process_id"), f.get("join_timeout", 60.0)
    )


def checked(s: Settings) -> Settings:
    """The settings, every one checked once (checks.check_settings); a tree sets K to its depth."""
    check_settings(s)
    tree = s.drafting.tree
    return dataclasses.replace(s, Ks=(tree_depth(tree),)) if tree else s
