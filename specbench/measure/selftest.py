"""Is the speculative sampler exact, here, now? A chi-square test on a model small enough to
enumerate, with a deliberately broken sampler as its control (the report runs it in seconds;
the test suite shares its parts).

The exact distribution of the first tokens is computed by enumerating every continuation of a
12-token vocabulary; N_SAMPLES speculative generations, each on its own key, are compared with it
by Pearson's chi-square. The correct sampler must pass and the broken one (on rejection it
resamples from q instead of the residual norm(max(q - p, 0))) must fail, or the test proves
nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model import generate
from specbench.model.decode import drafters, loops
from specbench.model.decode.sampling import Warp, accept_reject, probs, sample
from specbench.model.nets import network
from specbench.model.nets.gpt2 import GPT2Config, init_params
from specbench.model.nets.network import Model

SMALL_T = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_ctx=16, n_vocab=12)
SMALL_D = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=12)
N_SAMPLES = 20000
P_THRESHOLD = 1e-3  # a correct sampler fails this at most 0.1% of the time per test (fixed keys: never flaky)


def broken_accept_reject(key, draft_tokens, p, q, n_drafted=None):
    """Negative control: on rejection, resample from q instead of the residual."""
    n_accepted, _ = accept_reject(key, draft_tokens, p, q, n_drafted)
    return n_accepted, sample(jax.random.fold_in(key, 1), q[n_accepted])


def target_marginals(
    target: Model, prompt, warp: Warp, n_positions: int, chunk: int = 8192, compiler_options=None
):
    """Exact distribution of each of the first n_positions new tokens, by enumerating the target.
    compiler_options: XLA's, for the program that scores a chunk of continuations."""
    V = target.config.n_vocab
    seqs = np.zeros((1, 0), np.int32)  # all continuations so far, with their probabilities
    weights = np.ones(1)
    last = lambda s: probs(network.last_logits(target.params, prompt, s, target.config), warp)  # [V] float32
    next_q = jax.jit(jax.vmap(last), compiler_options=compiler_options)
    out = []
    for i in range(n_positions):
        chunks = [next_q(jnp.asarray(seqs[j : j + chunk])) for j in range(0, len(seqs), chunk)]
        q = np.concatenate([np.asarray(c) for c in chunks]).astype(np.float64)  # [n_seqs, V]
        joint = weights[:, None] * q
        out.append(joint.sum(0))
        if i + 1 < n_positions:
            seqs = np.concatenate([np.repeat(seqs, V, 0), np.tile(np.arange(V), len(seqs))[:, None]], 1)
            weights = joint.reshape(-1)
    return out


def chi_square_p(samples, expected_probs) -> float:
    """Pearson's chi-square p-value of integer samples against a distribution, rare cells pooled
    (expected count < 5); the p-value is the regularized upper incomplete gamma Q(df/2, x/2)."""
    observed = np.bincount(samples, minlength=len(expected_probs)).astype(float)
    expected = expected_probs / expected_probs.sum() * len(samples)
    keep = expected >= 5  # pool the rare cells so the chi-square approximation holds
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0, "sampled a token the target gives probability 0"
        observed, expected = observed[:-1], expected[:-1]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(jax.scipy.special.gammaincc((len(observed) - 1) / 2, statistic / 2))


def one_of(verdicts, index):
    """verdicts[index], chosen by a traced index (lax.switch): one compiled program runs a sampler
    and its broken control, where a verdict given as a static argument would compile one each."""
    return lambda *args: lax.switch(index, [lambda v=v: v(*args) for v in verdicts])


def sampled_tokens(
    draft,
    target,
    prompt,
    warp,
    K,
    verdicts,
    n_tokens=3,
    drafter=None,
    n_samples=N_SAMPLES,
    compiler_options=None,
) -> list[np.ndarray]:
    """For each verdict, n_samples independent speculative generations of n_tokens, each on its own
    key: [n_samples, n_tokens]. One compiled program draws them all (one_of).
    compiler_options: XLA's, for that program."""
    drafter = drafter or drafters.model_drafter(draft.config)
    buf = jnp.asarray(np.array(prompt + [0] * (8 - len(prompt)), np.int32))

    def tokens(draft_params, target_params, key, index):
        return loops.spec_generate(
            draft_params,
            target_params,
            buf,
            jnp.int32(len(prompt)),
            jnp.int32(n_tokens),
            key,
            drafter=drafter,
            target_config=target.config,
            warp=warp,
            max_len=16,
            K=K,
            verdict=one_of(verdicts, index),
        ).tokens

    draw = jax.jit(jax.vmap(tokens, in_axes=(None, None, 0, None)), compiler_options=compiler_options)
    keys = jax.random.split(jax.random.PRNGKey(2024), n_samples)
    params = generate.draft_params_for(drafter, draft, target), target.params
    first = network.decoder_prompt_length(target.config, len(prompt))  # the first new token's place
    return [
        np.asarray(draw(*params, keys, jnp.int32(i)))[:, first : first + n_tokens]
        for i in range(len(verdicts))
    ]


def small_model(config: GPT2Config, seed: int, name: str, scale: float = 30.0) -> Model:
    """GPT-2's initialisation with the matrices scaled up: sharp, context-dependent predictions
    over the tiny vocabulary, so drafts are accepted sometimes, not always."""
    params = init_params(config, seed)

    def scaled(path, x):
        names = [getattr(k, "key", "") for k in path]
        matrix = names[0] in ("wte", "wpe") or (
            names[0] == "blocks" and names[1] in ("attn", "mlp") and names[-1] == "weight"
        )
        return x * scale if matrix else x

    return Model(name, config, jax.tree_util.tree_map_with_path(scaled, params), "random")


def run(n_samples: int = N_SAMPLES, K: int = 3, n_positions: int = 2) -> dict:
    """The self-test: each of the first n_positions tokens of speculative sampling at T = 1
    against the target's exact distribution, for the real sampler and the broken control.
    Returns the smallest p-value of each and whether the test did its job."""
    draft, target = small_model(SMALL_D, 11, "small-draft"), small_model(SMALL_T, 12, "small-target")
    prompt, warp = [1, 2], Warp(1.0)
    exact = target_marginals(target, prompt, warp, n_positions)
    draws = sampled_tokens(
        draft,
        target,
        prompt,
        warp,
        K,
        (accept_reject, broken_accept_reject),
        n_positions,
        n_samples=n_samples,
    )
    p_exact, p_broken = (min(chi_square_p(t, exact[i]) for i, t in enumerate(d.T)) for d in draws)
    return {
        "n_samples": n_samples,
        "K": K,
        "positions": n_positions,
        "vocab": SMALL_T.n_vocab,
        "p_value": p_exact,
        "p_value_broken": p_broken,
        "threshold": P_THRESHOLD,
        "passed": p_exact > P_THRESHOLD and p_broken < P_THRESHOLD,
    }
