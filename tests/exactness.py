"""What the exactness tests share: the small models, and the negative controls beyond the one
the package's self-test has. The exact marginals, the chi-square test, its threshold and the
broken sampler live in specbench/selftest.py, which `specbench report` runs too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.measure.selftest import (  # noqa: F401  (re-exported for the test modules)
    N_SAMPLES,
    P_THRESHOLD,
    SMALL_D,
    SMALL_T,
    broken_accept_reject,
    chi_square_p,
    sampled_tokens,
    target_marginals,
)
from specbench.model import kernels
from specbench.model.gpt2 import GPT2Config, kernel_layout
from specbench.model.sampling import accept_reject, sample
from specbench.model.weights import Model

TARGET = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=128, n_vocab=97)
DRAFT = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=97)


def with_kernel(*models: Model) -> tuple[Model, ...]:
    """The models in the CPU kernel's layout (gpt2.kernel_layout), or a skip where it cannot run."""
    if kernels.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {kernels.unavailable()}")
    return tuple(Model(m.name, m.config, kernel_layout(m.params), m.source) for m in models)


def noisy_copy(model: Model, noise: float, seed: int) -> Model:
    """The same network with relative noise on every weight: a draft that agrees often, not always."""
    rng = np.random.default_rng(seed)
    noisy = lambda x: x + noise * jnp.std(x) * jnp.asarray(rng.normal(size=x.shape), x.dtype)
    return Model("noisy", model.config, jax.tree_util.tree_map(noisy, model.params), "random")


def wrong_bonus_accept_reject(key, draft_tokens, p, q, n_drafted=None):
    """Negative control: when every draft is accepted, the bonus token comes from q[K-1], the last
    draft's row, instead of q[K]. Positions 1..K are untouched; only the bonus position shows it."""
    n_accepted, emitted = accept_reject(key, draft_tokens, p, q, n_drafted)
    K = draft_tokens.shape[0]
    return n_accepted, jnp.where(n_accepted == K, sample(jax.random.fold_in(key, 2), q[K - 1]), emitted)
