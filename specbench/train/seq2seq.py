"""Training the bundled T5 pair (model/nets/t5.py) on the corpus: the encoder reads a passage, the
decoder writes what follows it.

The pair has its own tokenizer, as every T5 does: a byte-level BPE of VOCAB tokens trained on the
training documents with Hugging Face `tokenizers`, saved as the `tokenizer.json` T5 checkpoints
carry, with T5's special tokens first (<pad> = 0, also the decoder's start, </s> = 1, <unk> = 2).
Its 4,096 tokens keep the pair small: GPT-2's 50,257 would make the embedding alone 13 MB at a
width of 128.

A training example is a window of the token stream cut in two: `source` tokens for the encoder,
then the `target` tokens that follow for the decoder, read with teacher forcing (the decoder's
input is <pad> and the target shifted right; T5's own recipe, Raffel et al. 2020, section 3.1).
The target trains on cross-entropy; the draft is distilled from it as loop.py's GPT-2 draft is:
kd * KL(q_target || p_draft) + (1 - kd) * CE.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.checkpoints import t5_layout
from specbench.model.nets import t5
from specbench.train.loop import Task, TrainConfig

VOCAB = 4096
SPECIAL = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2, as T5's SentencePiece vocabulary has them
TOKENIZER_FILE = "tokenizer.json"


def bpe_encoder(out: Path, vocab_size: int = VOCAB, max_chars: int = 40_000_000):
    """data.prepare's encoder: trains a byte-level BPE on (the first max_chars characters of) the
    training documents, saves it as out/tokenizer.json, and returns (encode, </s> id)."""

    def encoder(texts: list[str]):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )

        def sample():
            left = max_chars
            for text in texts:
                if left <= 0:
                    return
                yield text[:left]
                left -= len(text)

        tok.train_from_iterator(sample(), trainer)
        out.mkdir(parents=True, exist_ok=True)
        tok.save(str(out / TOKENIZER_FILE))
        return (lambda text: tok.encode(text).ids), SPECIAL.index("</s>")

    return encoder


@dataclasses.dataclass(frozen=True)
class Split:
    """How a window of the token stream is cut: `source` tokens for the encoder, then `target`."""

    source: int = 64
    target: int = 32


def sample_pairs(tokens: np.ndarray, batch: int, split: Split, rng: np.random.Generator):
    """(source [batch, S], decoder input [batch, T], target [batch, T]) from random windows."""
    n = split.source + split.target
    starts = rng.integers(0, tokens.size - n, batch)
    window = np.stack([tokens[s : s + n] for s in starts]).astype(np.int32)
    src, tgt = window[:, : split.source], window[:, split.source :]
    start = np.zeros((batch, 1), np.int32)  # T5 starts its decoder from <pad>
    return src, np.concatenate([start, tgt[:, :-1]], axis=1), tgt


def logits_fn(params, src, dec_in, config: t5.T5Config):
    """[B, S], [B, T] -> [B, T, V] float32 logits, matmuls in bfloat16 (t5.t5, batched)."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
    return jax.vmap(lambda s, d: t5.t5(half, s, d, config))(src, dec_in).astype(jnp.float32)


def loss_fn(params, src, dec_in, tgt, config, teacher=None, kd: float = 0.0):
    """Cross-entropy, or kd * KL(teacher || model) + (1 - kd) * CE, with the CE as the metric."""
    logp = jax.nn.log_softmax(logits_fn(params, src, dec_in, config))
    ce = -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], axis=-1))
    if teacher is None or kd == 0:
        return ce, ce
    t_params, t_config = teacher
    q = jax.nn.softmax(jax.lax.stop_gradient(logits_fn(t_params, src, dec_in, t_config)))
    kl = jnp.mean(jnp.sum(q * (jnp.log(q + 1e-9) - logp), axis=-1))
    return kd * kl + (1 - kd) * ce, ce


def t5_task(
    config: t5.T5Config, tc: TrainConfig, split: Split, train_tokens, val_tokens, teacher=None
) -> Task:
    """loop.train's Task for a T5: fresh parameters, the update, the batches, the validation CE.
    `teacher` is (params, config) of the target the draft is distilled from."""
    import optax

    kd = tc.kd if teacher is not None else 0.0

    def make_update(opt):
        @jax.jit
        def update(params, opt_state, src, dec_in, tgt):
            (loss, ce), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, src, dec_in, tgt, config, teacher, kd
            )
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, ce

        return update

    def evaluate(params) -> float:
        ce = jax.jit(lambda p, s, d, t: loss_fn(p, s, d, t, config)[1])
        rng = np.random.default_rng(1234)
        return float(
            np.mean(
                [ce(params, *sample_pairs(val_tokens, tc.batch, split, rng)) for _ in range(tc.eval_batches)]
            )
        )

    return Task(
        init=lambda: t5.init_params(config, tc.seed),
        make_update=make_update,
        next_batch=lambda rng: sample_pairs(train_tokens, tc.batch, split, rng),
        evaluate=evaluate,
    )


def save_model(out: Path, params, config: t5.T5Config, record: dict, tokenizer_json: Path) -> None:
    """float16 weights in Hugging Face's T5 layout, the tokenizer beside them, and the record."""
    t5_layout.save(out, params, config, np_dtype=np.float16)
    (out / TOKENIZER_FILE).write_bytes(tokenizer_json.read_bytes())
    (out / "train_record.json").write_text(json.dumps(record, indent=1) + "\n")
