"""The training code runs end to end on a tiny corpus, and the loss goes down."""

import json

import numpy as np
import pytest

pytest.importorskip("optax")

from specbench import train
from specbench.model import tokenizer, weights
from specbench.model.gpt2 import GPT2Config

TEXT = (
    "The little fox ran over the hill and into the wood, where the old owl sat in the oak tree. "
    '"Good evening, fox," said the owl. "Where are you going so late?" '
) * 40


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for i in range(6):
        (root / f"doc{i}.txt").write_text(f"Chapter {i}. " + TEXT)
    out = root / "data"
    meta = train.prepare(root, out, val_fraction=0.34, seed=0)
    return out, meta


def test_prepare_splits_by_document_and_ends_each_with_eot(data):
    out, meta = data
    assert meta["val"]["documents"] == 2 and meta["train"]["documents"] == 4
    tokens = train.load_tokens(out, "train")
    assert tokens.dtype == np.uint16 and tokens.size == meta["train"]["tokens"]
    assert (tokens == tokenizer.EOT_ID).sum() == 4 and tokens[-1] == tokenizer.EOT_ID
    assert tokenizer.decode(tokens[:3].tolist()).startswith("Chapter")
    val = train.load_tokens(out, "val")
    assert set(json.loads((out / "meta.json").read_text())["val_documents"]) == set(meta["val_documents"])
    train.compress(out)
    (out / "val.bin").rename(out / "val.bin.moved")
    np.testing.assert_array_equal(train.load_tokens(out, "val"), val)  # read back from val.bin.xz
    (out / "val.bin.moved").rename(out / "val.bin")
    # no document is in both splits
    first_words = lambda t: {
        tokenizer.decode(t[i + 1 : i + 4].tolist()) for i in np.flatnonzero(t == tokenizer.EOT_ID)[:-1]
    }
    assert not (first_words(tokens) & first_words(val))


def test_target_then_distilled_draft_learn(data, tmp_path):
    out, _ = data
    tr, va = train.load_tokens(out, "train"), train.load_tokens(out, "val")
    tc = train.TrainConfig(steps=30, batch=4, ctx=16, lr=3e-3, warmup=3, eval_batches=2)
    target_config = GPT2Config(n_layer=1, n_head=2, n_embd=32, n_ctx=64, n_vocab=tokenizer.N_VOCAB)
    params, record = train.train(target_config, tr, va, tc, log=lambda *a: None)
    first, last = record["history"][0]["loss"], record["history"][-1]["loss"]
    assert last < first - 2.0, record["history"]  # from ~ln(50257) = 10.8 down on repetitive text
    assert np.isfinite(record["val_loss"]) and record["val_loss"] < first
    train.save_model(tmp_path / "t", params, target_config, record)
    target = weights.load_model(str(tmp_path / "t"))
    assert target.config == target_config

    draft_config = GPT2Config(n_layer=1, n_head=1, n_embd=16, n_ctx=64, n_vocab=tokenizer.N_VOCAB)
    _, drecord = train.train(
        draft_config,
        tr,
        va,
        train.TrainConfig(**{**tc.__dict__, "kd": 0.7, "lr": 1e-2}),
        teacher=target,
        log=lambda *a: None,
    )
    h = drecord["history"]
    assert h[-1]["loss"] < 0.9 * h[0]["loss"]  # the distillation objective (0.7 KL + 0.3 CE) goes down
    assert h[-1]["train_ce"] < h[0]["train_ce"] - 2.0  # and with it the draft's own cross-entropy
    assert drecord["teacher"] == str(tmp_path / "t")


def test_greedy_continuations_equal_argmax_of_the_uncached_forward():
    import jax.numpy as jnp

    from specbench.model.gpt2 import gpt2, init_params

    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=12, n_vocab=97)
    params = init_params(config, 3)
    prefixes = np.random.default_rng(0).integers(0, 97, (3, 4))
    out = train.greedy_continuations(params, config, prefixes, n_new=8, batch=2)  # fills n_ctx exactly
    assert out.shape == (3, 12)
    np.testing.assert_array_equal(out[:, :4], prefixes)
    for row in out:  # each new token is the argmax after everything before it (causal: one forward)
        logits = gpt2(params, jnp.asarray(row, jnp.int32), config)
        np.testing.assert_array_equal(np.argmax(np.asarray(logits[3:-1]), axis=-1), row[4:])


def test_sampled_softmax_keeps_every_target_once():
    rng = np.random.default_rng(0)
    corpus = rng.zipf(1.3, 5000) % tokenizer.N_VOCAB
    frequent = train.frequent_tokens(corpus, 50)
    y = np.concatenate([corpus[:40], [50000, 50001, 50001]]).reshape(1, -1)
    vocab, mapped = train.sample_vocab(frequent, y, 64, rng)
    assert vocab.size == 50 + 64 and np.unique(vocab).size == vocab.size
    np.testing.assert_array_equal(vocab[mapped], y)  # each target is in the head, at its index
    assert set(frequent) <= set(vocab.tolist())


def test_killed_run_resumes_to_the_same_parameters(data, tmp_path):
    import jax

    out, _ = data
    tr, va = train.load_tokens(out, "train"), train.load_tokens(out, "val")
    tc = train.TrainConfig(
        steps=6, batch=2, ctx=8, lr=3e-3, warmup=1, eval_batches=1, head_vocab=30, head_extra=40
    )
    config = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=tokenizer.N_VOCAB)
    quiet = lambda *a: None
    whole, _ = train.train(config, tr, va, tc, log=quiet, progress_interval=1e9)
    ckpt = tmp_path / "ck.npz"
    partial, rec = train.train(
        config,
        tr,
        va,
        tc,
        log=quiet,
        checkpoint=ckpt,
        checkpoint_every=0,
        stop_after=3,
        progress_interval=1e9,
    )
    assert rec["stopped_at"] == 3 and ckpt.exists()
    resumed, record = train.train(
        config, tr, va, tc, log=quiet, checkpoint=ckpt, resume=True, progress_interval=1e9
    )
    assert [h["step"] for h in record["history"]][-1] == 6
    for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    differs = any(
        not np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(partial))
    )
    assert differs  # the stopped run really stopped early


def test_resume_refuses_other_settings(data, tmp_path):
    from specbench.errors import TrainError

    out, _ = data
    tr, va = train.load_tokens(out, "train"), train.load_tokens(out, "val")
    tc = train.TrainConfig(steps=2, batch=2, ctx=8, warmup=1, eval_batches=1)
    config = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=tokenizer.N_VOCAB)
    ckpt = tmp_path / "ck.npz"
    train.train(config, tr, va, tc, log=lambda *a: None, checkpoint=ckpt, stop_after=1, progress_interval=1e9)
    with pytest.raises(TrainError, match="other settings"):
        train.train(
            config,
            tr,
            va,
            train.TrainConfig(**{**tc.__dict__, "lr": 0.5}),
            log=lambda *a: None,
            checkpoint=ckpt,
            resume=True,
            progress_interval=1e9,
        )


def test_missing_optax_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "optax.py"
    blocker.write_text("raise ModuleNotFoundError(\"No module named 'optax'\", name='optax')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench.train",
            "target",
            "--out",
            str(tmp_path / "m"),
            "--data",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "optax" in r.stderr and "Traceback" not in r.stderr
