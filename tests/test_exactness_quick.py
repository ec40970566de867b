"""The default tier's exactness at T = 1: one chi-square per verification family, every role of a
round against the target, at the smallest draw count at which the family's broken control still
fails (QUICK_DRAWS, chosen in docs/internals.md, "Tiers"). The full batteries, at 20,000 draws
with every control, are the slow tier's (tests/test_verify.py, test_tree.py and the others)."""

import dataclasses

import pytest

from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Tree
from specbench.model.decode.verify import (
    accept_reject,
    block_verdict,
    gbv_verdict,
    multi_draft_verdict,
)
from specbench.model.decode.verify_trees import traversal_verdict, tree_verdict

from conftest import make_small_target
from exactness import P_THRESHOLD, broken_accept_reject, noisy_copy, role_p_values, round_samples
from test_tree import broken_tree_verdict, skipped_correction
from test_verify import broken_block_verdict, broken_multi_draft_verdict, unskewed_gbv_verdict

# family: (the drafter's settings, the exact verdict, its broken control, draws)
FAMILIES = {
    "token": (dict(), accept_reject, broken_accept_reject, 500),
    "block": (dict(verify="block"), block_verdict, broken_block_verdict, 20000),
    "drafts": (dict(drafts=3), multi_draft_verdict, broken_multi_draft_verdict, 500),
    "gbv": (dict(drafts=3, verify="gbv"), gbv_verdict, unskewed_gbv_verdict, 500),
    "tree": (dict(tree=Tree.branching((2, 1, 1))), tree_verdict, broken_tree_verdict, 5000),
    "traversal": (
        dict(tree=Tree.branching((2, 2, 1)), verify="traversal"),
        traversal_verdict,
        skipped_correction,
        500,
    ),
}


def family_p_values(family: str, n_samples: int) -> tuple[dict, dict]:
    """(exact, broken) p-values by role of one family's draws, both drawn by one program."""
    settings, exact, broken, _ = FAMILIES[family]
    target = make_small_target()
    draft = noisy_copy(target, 0.3, 13)
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), **settings)
    prompt, warp, K = [3, 7, 1], Warp(1.0), 3
    draws = round_samples(
        draft.params, target, prompt, warp, K, drafter, (exact, broken), n_samples=n_samples
    )
    return tuple(role_p_values(target, prompt, warp, *d, K) for d in draws)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_verification_family_follows_the_target_and_its_broken_control_does_not(family):
    exact, broken = family_p_values(family, FAMILIES[family][3])
    print(f"\n{family}: exact {min(exact.values()):.2g}, broken {min(broken.values()):.2g}")
    assert {"draft 1", "draft 2", "draft 3", "after rejection"} <= set(exact)
    assert min(exact.values()) > P_THRESHOLD, exact
    assert min(broken.values()) < P_THRESHOLD, broken
