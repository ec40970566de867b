"""What the exactness tests share: the small models, the exact marginals of a target, the
chi-square test, its threshold, and the deliberately broken samplers it must fail."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scipy_stats

from specbench import decoding, drafters
from specbench.gpt2 import GPT2Config, gpt2
from specbench.sampling import Warp, accept_reject, probs, sample
from specbench.weights import Model

TARGET = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=128, n_vocab=97)
DRAFT = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=97)
SMALL_T = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_ctx=16, n_vocab=12)
SMALL_D = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=12)
N_SAMPLES = 20000
P_THRESHOLD = 1e-3  # a correct sampler fails this at most 0.1% of the time per test (fixed keys: never flaky)


def noisy_copy(model: Model, noise: float, seed: int) -> Model:
    """The same network with relative noise on every weight: a draft that agrees often, not always."""
    rng = np.random.default_rng(seed)
    noisy = lambda x: x + noise * jnp.std(x) * jnp.asarray(rng.normal(size=x.shape), x.dtype)
    return Model("noisy", model.config, jax.tree_util.tree_map(noisy, model.params), "random")


def broken_accept_reject(key, draft_tokens, p, q, greedy=False, n_drafted=None):
    """Negative control: on rejection, resample from q instead of the residual."""
    n_accepted, _ = accept_reject(key, draft_tokens, p, q, greedy, n_drafted)
    return n_accepted, sample(jax.random.fold_in(key, 1), q[n_accepted])


def wrong_bonus_accept_reject(key, draft_tokens, p, q, greedy=False, n_drafted=None):
    """Negative control: when every draft is accepted, the bonus token comes from q[K-1], the last
    draft's row, instead of q[K]. Positions 1..K are untouched; only the bonus position shows it."""
    n_accepted, emitted = accept_reject(key, draft_tokens, p, q, greedy, n_drafted)
    K = draft_tokens.shape[0]
    return n_accepted, jnp.where(n_accepted == K, sample(jax.random.fold_in(key, 2), q[K - 1]), emitted)


def target_marginals(target: Model, prompt, warp: Warp, n_positions: int, chunk: int = 8192):
    """Exact distribution of each of the first n_positions new tokens, by enumerating the target."""
    V = target.config.n_vocab
    seqs = np.array(prompt)[None, :]  # all continuations so far, with their probabilities
    weights = np.ones(1)
    last = jax.jit(jax.vmap(lambda s: gpt2(target.params, s, target.config)[-1]))
    out = []
    for i in range(n_positions):
        logits = np.concatenate([last(jnp.asarray(seqs[j : j + chunk])) for j in range(0, len(seqs), chunk)])
        q = np.asarray(probs(jnp.asarray(logits), warp), np.float64)  # [n_seqs, V]
        joint = weights[:, None] * q
        out.append(joint.sum(0))
        if i + 1 < n_positions:
            seqs = np.concatenate([np.repeat(seqs, V, 0), np.tile(np.arange(V), len(seqs))[:, None]], 1)
            weights = joint.reshape(-1)
    return out


def chi_square_p(samples, expected_probs):
    """Pearson's chi-square p-value of integer samples against a distribution, rare cells pooled."""
    observed = np.bincount(samples, minlength=len(expected_probs)).astype(float)
    expected = expected_probs / expected_probs.sum() * len(samples)
    keep = expected >= 5  # pool the rare cells so the chi-square approximation holds
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0, "sampled a token the target gives probability 0"
        observed, expected = observed[:-1], expected[:-1]
    return float(scipy_stats.chisquare(observed, expected).pvalue)  # a plain float: reports cross processes


def sampled_tokens(draft, target, prompt, warp, K, verdict, n_tokens=3, drafter=None):
    """N_SAMPLES independent speculative generations of n_tokens, each on its own key:
    [N_SAMPLES, n_tokens]."""
    drafter = drafter or drafters.model_drafter(draft.config)
    buf = jnp.asarray(np.array(prompt + [0] * (8 - len(prompt)), np.int32))
    run = functools.partial(
        decoding.spec_generate,
        decoding.draft_params_for(drafter, draft, target),
        target.params,
        buf,
        jnp.int32(len(prompt)),
        jnp.int32(n_tokens),
        drafter=drafter,
        target_config=target.config,
        warp=warp,
        max_len=16,
        K=K,
        verdict=verdict,
    )
    keys = jax.random.split(jax.random.PRNGKey(2024), N_SAMPLES)
    tokens = jax.jit(jax.vmap(lambda k: run(k).tokens))(keys)
    return np.asarray(tokens)[:, len(prompt) : len(prompt) + n_tokens]
