"""Expected accepted drafts per round, token by token against block verification, computed exactly
(over the verdict's coins) on the same real rounds of the bundled pair, so that the comparison does
not depend on which trajectory a sampled generation happened to take.

    python scripts/block_expectation.py [ROUNDS_PER_PROMPT] [T]

For each built-in prompt it follows the token-level trajectory for ROUNDS_PER_PROMPT rounds (12),
and at each round draws K = 4 drafts and scores them with the target once. Given those drafts:

    token: sum_i prod_{j<=i} min(1, q_j(x_j) / p_j(x_j))         (Leviathan et al. 2023)
    block: E[tau] = sum_i i h_i prod_{j>i} (1 - h_j)               (Sun et al. 2025, Algorithm 2)

with h from verify.block_hazards. Sun et al.'s guarantee is in expectation over the drafts too, so
the mean over many rounds must not be lower for block; a single round's can be.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench import prompts
from specbench.model import generate
from specbench.model.checkpoints import tokenizer
from specbench.model.checkpoints.weights import load_model
from specbench.model.decode import decoding, drafters, sampling, verify
from specbench.model.nets.gpt2 import step

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
WARP = sampling.Warp(float(sys.argv[2]) if len(sys.argv) > 2 else 1.0)
K, MAX_LEN = 4, 256


def expectations(drafter, draft, target, state, key):
    """(token-level, block) expected accepted drafts for one round's drafts, drawn with `key`."""
    _, drafts, p, _ = drafters.propose(
        drafter, draft.params, state.draft, state.tokens, state.n, key, WARP, K, target.config.n_vocab
    )
    verify_in = jnp.concatenate([lax.dynamic_slice(state.tokens, (state.n - 1,), (1,)), drafts])
    logits, _ = step(target.params, state.target_cache, verify_in, state.n - 1, target.config)
    q = sampling.probs(logits, WARP)
    p_x = jnp.take_along_axis(p, drafts[:, None], -1)[:, 0]
    q_x = jnp.take_along_axis(q[:K], drafts[:, None], -1)[:, 0]
    token = jnp.sum(jnp.cumprod(jnp.minimum(1.0, q_x / p_x)))
    h = verify.block_hazards(drafts, p, q)[0][1:]
    none_after = jnp.concatenate([jnp.cumprod((1 - h)[::-1])[::-1][1:], jnp.ones(1)])  # prod_{j>i} (1 - h_j)
    return token, jnp.sum(jnp.arange(1, K + 1) * h * none_after)


def main():
    target, draft = load_model("tiny-target"), load_model("tiny-draft")
    drafter = drafters.model_drafter(draft.config)
    kw = dict(drafter=drafter, target_config=target.config, warp=WARP, K=K)
    score = jax.jit(lambda s, key: expectations(drafter, draft, target, s, key))
    token, block = [], []
    for text in prompts.all_prompts().values():
        x = generate.inputs([tokenizer.encode(text)], MAX_LEN, 0)
        state = decoding.spec_start_jit(draft.params, target.params, *x, max_len=MAX_LEN, **kw)
        for r in range(ROUNDS):
            t, b = score(state, jax.random.PRNGKey(r))
            token.append(float(t))
            block.append(float(b))
            state, _ = decoding.spec_round_jit(draft.params, target.params, state, **kw)
            if int(state.n) > MAX_LEN - 2 * (K + 1):
                break
    token, block = np.array(token), np.array(block)
    gain = block - token
    print(
        f"{len(token)} rounds at T = {WARP.temperature:g}: expected accepted drafts per round, token "
        f"{token.mean():.3f}, block {block.mean():.3f}; block - token {gain.mean():+.3f} "
        f"± {gain.std(ddof=1) / np.sqrt(len(gain)):.3f} (one round's lowest {gain.min():+.3f})"
    )


if __name__ == "__main__":
    main()
