"""Speculative sampling as the papers write it, in NumPy: the `numpy` peer, and the suite's
independent reference forward.

Everything here follows the equations, not gpt2.py: a full GPT-2 forward over the whole sequence
for every new token (no KV cache, no device loop, one Python call per step), as the seed's blog
code and the pseudocode of Chen et al. (2023, arXiv:2302.01318, Algorithm 2) do. It is slow by
design: set beside specbench it shows what the cache and the device loop buy. No JAX here.

Notation as in sampling.py: `p` is the draft's distribution, `q` the target's.
"""

from __future__ import annotations

import numpy as np


def as_numpy(params, dtype=np.float32):
    """A nested dict of arrays (JAX or NumPy) as NumPy arrays of `dtype`: weights as loaded (the HF
    layout, layouts.as_loaded), which the reference reads."""
    if isinstance(params, dict):
        return {k: as_numpy(v, dtype) for k, v in params.items()}
    return np.asarray(params, dtype)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def forward(params, tokens, config, last: int | None = None) -> np.ndarray:
    """GPT-2 (Radford et al. 2019) over the whole sequence, no cache: [T] token ids -> [T, V]
    logits, or only the last `last` rows of them (the head is the largest product; the rest of
    the forward is the same). `params` as as_numpy gives them, HF Conv1D orientation [in, out]."""
    T, H = len(tokens), config.n_head
    hd = config.n_embd // H
    eps = config.layer_norm_epsilon
    x = params["wte"][np.asarray(tokens)] + params["wpe"][np.arange(T)]  # [T, E]
    B = params["blocks"]
    causal = np.triu(np.full((T, T), -np.inf, x.dtype), 1)
    for i in range(config.n_layer):
        h = layer_norm(x, B["ln_1"]["weight"][i], B["ln_1"]["bias"][i], eps)
        qkv = h @ B["attn"]["c_attn"]["weight"][i] + B["attn"]["c_attn"]["bias"][i]  # [T, 3E]
        q, k, v = (a.reshape(T, H, hd).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal  # [H, T, T]
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        heads = (att @ v).transpose(1, 0, 2).reshape(T, H * hd)
        x = x + heads @ B["attn"]["c_proj"]["weight"][i] + B["attn"]["c_proj"]["bias"][i]
        h = layer_norm(x, B["ln_2"]["weight"][i], B["ln_2"]["bias"][i], eps)
        f = gelu(h @ B["mlp"]["c_fc"]["weight"][i] + B["mlp"]["c_fc"]["bias"][i])
        x = x + f @ B["mlp"]["c_proj"]["weight"][i] + B["mlp"]["c_proj"]["bias"][i]
    if last is not None:
        x = x[T - last :]
    x = layer_norm(x, params["ln_f"]["weight"], params["ln_f"]["bias"], eps)
    return x @ params["wte"].T  # the head is tied to the embedding


def warp(logits, temperature: float, top_k: int | None = None, top_p: float | None = None):
    """[..., V] logits -> float64 probabilities, as sampling.probs_by_definition defines them:
    temperature 0 is the one-hot argmax; else temperature, then top-k (ties at the k-th kept),
    then top-p (the most likely tokens whose mass before each is < top_p, ties kept)."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        one_hot = np.zeros(logits.shape)
        np.put_along_axis(one_hot, np.argmax(logits, -1)[..., None], 1.0, -1)
        return one_hot
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = np.where(z < np.sort(z, -1)[..., -top_k, None], -np.inf, z)
    pr = np.exp(z - z.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        desc = -np.sort(-pr, -1)
        inside = np.cumsum(desc, -1) - desc < top_p
        threshold = np.min(np.where(inside, desc, np.inf), -1, keepdims=True)
        pr = np.where(pr >= threshold, pr, 0.0)
        pr /= pr.sum(-1, keepdims=True)
    return pr


def sample(rng: np.random.Generator, pr) -> int:
    """One token from a probability vector (inverse CDF; a one-hot vector gives its token)."""
    cdf = np.cumsum(pr)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(pr) - 1))


def autoregressive(target, prompt, n_tokens: int, rng, temperature=0.0, top_k=None, top_p=None):
    """N tokens, each from one full forward of the target over the sequence so far.
    `target` is (params, config) with as_numpy params. Returns the [N] new token ids."""
    params, config = target
    x = list(prompt)
    for _ in range(n_tokens):
        x.append(sample(rng, warp(forward(params, x, config, last=1)[0], temperature, top_k, top_p)))
    return x[len(prompt) :]


def accept_reject(rng, drafts, p, q):
    """Chen et al. (2023), Algorithm 2, inner loop: accept draft t while r < min(1, q(x_t)/p(x_t));
    at the first rejection emit a token from norm(max(q_t - p_t, 0)); when all K are accepted
    emit a bonus token from q_{K+1}. p [K, V], q [K+1, V]. Returns the emitted tokens."""
    out = []
    for t, x in enumerate(drafts):
        if rng.random() < min(1.0, q[t, x] / p[t, x]):
            out.append(x)
            continue
        residual = np.maximum(q[t] - p[t], 0.0)
        return out + [sample(rng, residual / residual.sum())]
    return out + [sample(rng, q[len(drafts)])]


def speculative(draft, target, prompt, n_tokens: int, K: int, rng, temperature=0.0, top_k=None, top_p=None):
    """Speculative sampling (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023): each round
    drafts K tokens from `draft` (a full forward each), scores them with one full forward of
    `target` over the sequence and the drafts, and keeps the accepted prefix and one more token.
    Returns ([N] new token ids, [rounds] tokens each round accepted from the draft)."""
    (dp, dc), (tp, tc) = draft, target
    x, accepted = list(prompt), []
    while len(x) - len(prompt) < n_tokens:
        drafts, p = [], []
        for _ in range(K):
            p.append(warp(forward(dp, x + drafts, dc, last=1)[0], temperature, top_k, top_p))
            drafts.append(sample(rng, p[-1]))
        q = warp(forward(tp, x + drafts, tc, last=K + 1), temperature, top_k, top_p)  # [K+1, V]
        emitted = accept_reject(rng, drafts, np.array(p), q)
        accepted.append(len(emitted) - 1)
        x += emitted
    return x[len(prompt) : len(prompt) + n_tokens], accepted
