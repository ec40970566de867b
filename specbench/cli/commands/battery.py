"""What a report measures: the standard battery, full or quick, section by section (the prompts,
K, temperatures, drafters, trees, batch sizes, verification methods and the dial's settings),
and what the quick one leaves out."""

from __future__ import annotations

import dataclasses

from specbench import prompts
from specbench.model.decode.sampling import Warp

TREE_SHAPE = (2, 2, 1)  # the trees section: 10 drafts of depth 3, beside chains of K = 3


@dataclasses.dataclass(frozen=True)
class Battery:
    """What one report measures. `quick` trims every section, and keeps them all."""

    quick: bool
    suite: prompts.Suite = prompts.BUILTIN  # the prompts: built in, or --prompts-file's

    @property
    def repeats(self) -> int:
        return 2 if self.quick else 5

    @property
    def categories(self) -> list[str]:
        """The suite the headline rests on: every prompt of it; quick, the first of each category."""
        return self.suite.firsts() if self.quick else list(self.suite.texts())

    @property
    def default_prompt(self) -> str:
        """The prompt of the sections that vary something else: the built-in default, or a file's first."""
        if self.suite is prompts.BUILTIN:
            return prompts.DEFAULT_PROMPT_ID
        return self.suite.prompts[0].id

    @property
    def Ks(self) -> list[int]:
        return [1, 4, 8] if self.quick else [1, 2, 3, 4, 6, 8]

    @property
    def warps(self) -> list[Warp]:
        return [Warp(0.0), Warp(1.0)] + ([] if self.quick else [Warp(1.0, top_p=0.9)])

    @property
    def drafters(self) -> list[tuple[str, bool]]:  # (kind, dynamic K)
        extra = (
            [("lookup", False)] if self.quick else [("lookup", False), ("layerskip", False), ("model", True)]
        )
        return [("model", False), *extra]

    def trees(self, eagle: bool) -> list[tuple[str, tuple[int, ...] | None, str]]:
        """(kind, tree shape or None for a chain of its depth, verify) at T = 1: each drafter's
        chain, its tree judged from the root, and judged from the leaves (traversal)."""
        shape = TREE_SHAPE
        if self.quick:  # one drafter (the EAGLE head where there is one): its chain and its tree
            return [("eagle" if eagle else "model", t, "token") for t in (None, shape)]
        kinds = ["model"] + (["eagle"] if eagle else []) + ["layerskip"]
        return [
            (k, t, v) for k in kinds for t, v in ((None, "token"), (shape, "token"), (shape, "traversal"))
        ]

    @property
    def batches(self) -> list[int]:
        return [1, 4] if self.quick else [1, 2, 4, 8]

    @property
    def repeated_prompt(self) -> bool:
        """Whether the batch section also runs one prompt repeated (the upper bound): not quick."""
        return not self.quick

    @property
    def refilled(self) -> bool:
        """Whether the batch section also runs the slots refilled from a queue: not quick."""
        return not self.quick

    QUEUE_PER_SLOT = 4  # a refilled batch's queue: requests a slot

    @property
    def methods(self) -> list[tuple[str, int]]:  # (verify, drafts) at T = 1
        if self.quick:
            return [("token", 1), ("block", 1)]
        return [("token", 1), ("block", 1), ("token", 2), ("gbv", 2), ("token", 4)]

    @property
    def acceptances(self) -> list[float]:  # the dial's settings, T = 0
        return [0.0, 0.5, 1.0] if self.quick else [0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0]

    @property
    def roofline_iters(self) -> int:
        return 10 if self.quick else 20

    def left_out(self, eagle: bool) -> str:
        """What the quick battery leaves out of the full one, for the page to say; "" for the full."""
        if not self.quick:
            return ""
        full = Battery(False, self.suite)
        trees = "the model drafter's and layer-skip's" if eagle else "layer-skip's"
        return (
            f"The quick battery left out: {len(full.categories) - len(self.categories)} of the "
            f"{len(full.categories)} prompts (one a category is kept), K = 2, 3 and 6, top-p 0.9 at T = 1, "
            f"the layer-skip and dynamic-K drafters, {trees} trees and every traversal verdict, batches "
            f"of 2 and 8, the batch of one prompt repeated and the batch refilled from a queue, k drafts "
            f"(2 and 4 sequences, by token and by gbv), "
            f"{len(full.acceptances) - len(self.acceptances)} of the dial's settings, and "
            f"{full.repeats - self.repeats} of {full.repeats} repeats. Run without --quick for them."
        )
