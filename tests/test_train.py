"""The training code runs end to end on a tiny corpus, and the loss goes down."""

import json

import numpy as np
import pytest

pytest.importorskip("optax")

from specbench import tokenizer, train, weights
from specbench.gpt2 import GPT2Config

TEXT = ("The little fox ran over the hill and into the wood, where the old owl sat in the oak tree. "
        "\"Good evening, fox,\" said the owl. \"Where are you going so late?\" ") * 40


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
    first_words = lambda t: {tokenizer.decode(t[i + 1: i + 4].tolist()) for i in np.flatnonzero(t == tokenizer.EOT_ID)[:-1]}
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
    _, drecord = train.train(draft_config, tr, va, train.TrainConfig(**{**tc.__dict__, "kd": 0.7, "lr": 1e-2}), teacher=target,
                             log=lambda *a: None)
    h = drecord["history"]
    assert h[-1]["loss"] < 0.9 * h[0]["loss"]  # the distillation objective (0.7 KL + 0.3 CE) goes down
    assert h[-1]["train_ce"] < h[0]["train_ce"] - 2.0  # and with it the draft's own cross-entropy
    assert drecord["teacher"] == str(tmp_path / "t")
