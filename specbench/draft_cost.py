"""How a drafter spends its time drafting K tokens a round: its cost shape, which each drafter kind
declares (model/decode/drafter.py's Kind.draft_cost) and the theory, the best K, the prediction for
another device and the rows read (results/). A module of its own at the top, as both layers read it.

    SEQUENTIAL  K t_D(1): a chain, one draft step a token (a draft model, layer-skip, an EAGLE
                head, an MTP head reused K times): the cost theory has always assumed.
    ONE_PASS    t_D(K): one forward proposes all K (PARD, arXiv 2504.18583; DFlash, arXiv
                2602.06036), over the rows its kind says (Kind.pass_rows: PARD's 2K, which
                t_draft_of counts in); nearly flat in K while the draft's step is memory-bound.
    FREE        0: no network drafts (prompt lookup, the acceptance dial).
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class DraftCost(enum.Enum):
    """A drafter's cost shape; its value is what rows and `--draft-cost` say."""

    SEQUENTIAL = "sequential"
    ONE_PASS = "one-pass"
    FREE = "free"

    def seconds(self, K: int, t_draft_of: Callable[[int], float]) -> float:
        """What drafting K tokens costs a round, t_draft_of(n) being the draft's step over n rows."""
        if self is DraftCost.SEQUENTIAL:
            return K * t_draft_of(1)
        if self is DraftCost.ONE_PASS:
            return t_draft_of(K)
        return 0.0


def flat(t_draft: float) -> Callable[[int], float]:
    """t_D(n) where only one draft step's time is known: t_D(1) for every n (a memory-bound step)."""
    return lambda n: t_draft
