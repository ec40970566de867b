"""The training code runs end to end on a tiny corpus, and the loss goes down."""

import json

import numpy as np
import pytest

pytest.importorskip("optax")

from specbench.model.checkpoints import tokenizer, weights
from specbench.model.nets.gpt2 import GPT2Config
from specbench.train import data as tdata
from specbench.train import loop as tloop

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
    meta = tdata.prepare(root, out, val_fraction=0.34, seed=0)
    return out, meta


def test_prepare_splits_by_document_and_ends_each_with_eot(data):
    out, meta = data
    assert meta["val"]["documents"] == 2 and meta["train"]["documents"] == 4
    tokens = tdata.load_tokens(out, "train")
    assert tokens.dtype == np.uint16 and tokens.size == meta["train"]["tokens"]
    assert (tokens == tokenizer.EOT_ID).sum() == 4 and tokens[-1] == tokenizer.EOT_ID
    assert tokenizer.decode(tokens[:3].tolist()).startswith("Chapter")
    val = tdata.load_tokens(out, "val")
    assert set(json.loads((out / "meta.json").read_text())["val_documents"]) == set(meta["val_documents"])
    tdata.compress(out)
    (out / "val.bin").rename(out / "val.bin.moved")
    np.testing.assert_array_equal(tdata.load_tokens(out, "val"), val)  # read back from val.bin.xz
    (out / "val.bin.moved").rename(out / "val.bin")
    # no document is in both splits
    first_words = lambda t: {
        tokenizer.decode(t[i + 1 : i + 4].tolist()) for i in np.flatnonzero(t == tokenizer.EOT_ID)[:-1]
    }
    assert not (first_words(tokens) & first_words(val))


@pytest.mark.slow
def test_target_then_distilled_draft_learn(data, tmp_path):
    out, _ = data
    tr, va = tdata.load_tokens(out, "train"), tdata.load_tokens(out, "val")
    tc = tloop.TrainConfig(steps=30, batch=4, ctx=16, lr=3e-3, warmup=3, eval_batches=2)
    target_config = GPT2Config(n_layer=1, n_head=2, n_embd=32, n_ctx=64, n_vocab=tokenizer.N_VOCAB)
    params, record = tloop.train(target_config, tr, va, tc, log=lambda *a: None)
    first, last = record["history"][0]["loss"], record["history"][-1]["loss"]
    assert last < first - 2.0, record["history"]  # from ~ln(50257) = 10.8 down on repetitive text
    assert np.isfinite(record["val_loss"]) and record["val_loss"] < first
    tloop.save_model(tmp_path / "t", params, target_config, record)
    target = weights.load_model(str(tmp_path / "t"))
    assert target.config == target_config

    draft_config = GPT2Config(n_layer=1, n_head=1, n_embd=16, n_ctx=64, n_vocab=tokenizer.N_VOCAB)
    _, drecord = tloop.train(
        draft_config,
        tr,
        va,
        tloop.TrainConfig(**{**tc.__dict__, "kd": 0.7, "lr": 1e-2}),
        teacher=target,
        log=lambda *a: None,
    )
    h = drecord["history"]
    assert h[-1]["loss"] < 0.9 * h[0]["loss"]  # the distillation objective (0.7 KL + 0.3 CE) goes down
    assert h[-1]["train_ce"] < h[0]["train_ce"] - 2.0  # and with it the draft's own cross-entropy
    assert drecord["teacher"] == str(tmp_path / "t")


def test_greedy_continuations_equal_argmax_of_the_uncached_forward():
    import jax.numpy as jnp

    from specbench.model.nets.gpt2 import gpt2, init_params

    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=12, n_vocab=97)
    params = init_params(config, 3)
    prefixes = np.random.default_rng(0).integers(0, 97, (3, 4))
    out = tdata.greedy_continuations(params, config, prefixes, n_new=8, batch=2)  # fills n_ctx exactly
    assert out.shape == (3, 12)
    np.testing.assert_array_equal(out[:, :4], prefixes)
    for row in out:  # each new token is the argmax after everything before it (causal: one forward)
        logits = gpt2(params, jnp.asarray(row, jnp.int32), config)
        np.testing.assert_array_equal(np.argmax(np.asarray(logits[3:-1]), axis=-1), row[4:])


def test_sampled_softmax_keeps_every_target_once():
    rng = np.random.default_rng(0)
    corpus = rng.zipf(1.3, 5000) % tokenizer.N_VOCAB
    frequent = tdata.frequent_tokens(corpus, 50)
    y = np.concatenate([corpus[:40], [50000, 50001, 50001]]).reshape(1, -1)
    vocab, mapped = tdata.sample_vocab(frequent, y, 64, rng)
    assert vocab.size == 50 + 64 and np.unique(vocab).size == vocab.size
    np.testing.assert_array_equal(vocab[mapped], y)  # each target is in the head, at its index
    assert set(frequent) <= set(vocab.tolist())


def test_killed_run_resumes_to_the_same_parameters(data, tmp_path):
    import jax

    out, _ = data
    tr, va = tdata.load_tokens(out, "train"), tdata.load_tokens(out, "val")
    tc = tloop.TrainConfig(
        steps=6, batch=2, ctx=8, lr=3e-3, warmup=1, eval_batches=1, head_vocab=30, head_extra=40
    )
    config = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=tokenizer.N_VOCAB)
    quiet = lambda *a: None
    whole, _ = tloop.train(config, tr, va, tc, log=quiet, progress_interval=1e9)
    ckpt = tmp_path / "ck.npz"
    partial, rec = tloop.train(
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
    resumed, record = tloop.train(
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
    tr, va = tdata.load_tokens(out, "train"), tdata.load_tokens(out, "val")
    tc = tloop.TrainConfig(steps=2, batch=2, ctx=8, warmup=1, eval_batches=1)
    config = GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=16, n_vocab=tokenizer.N_VOCAB)
    ckpt = tmp_path / "ck.npz"
    tloop.train(config, tr, va, tc, log=lambda *a: None, checkpoint=ckpt, stop_after=1, progress_interval=1e9)
    with pytest.raises(TrainError, match="other settings"):
        tloop.train(
            config,
            tr,
            va,
            tloop.TrainConfig(**{**tc.__dict__, "lr": 0.5}),
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


@pytest.mark.slow
def test_the_t5_pair_trains_on_passages_and_what_follows_and_decodes_through_the_cli(tmp_path, monkeypatch):
    """t5-prepare trains a BPE of its own on the documents, t5-target learns to continue a
    passage, t5-draft is distilled from it, and the two folders (tokenizer.json beside the
    weights) run as a pair through `specbench run`, decoding with their tokenizer."""
    from click.testing import CliRunner

    from specbench.cli.main import cli
    from specbench.model.checkpoints import tokenizer as tok
    from specbench.train.commands import main
    from specbench.train.seq2seq import TOKENIZER_FILE

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(f"Chapter {i}. " + TEXT)
    data, runner = tmp_path / "data", CliRunner()
    train_cli = lambda *a: runner.invoke(main, [str(x) for x in a])
    r = train_cli("t5-prepare", "--corpus", corpus, "--out", data, "--vocab", 400, "--val-fraction", 0.34)
    assert r.exit_code == 0, r.output
    text = tok.from_json(str(data / TOKENIZER_FILE))
    tokens = tdata.load_tokens(data, "train")
    assert tokens.max() < 400 and text.decode(tokens[:3].tolist()).startswith("Chapter")
    assert (tokens == 1).sum() == 2  # </s> (id 1, as T5's) after each of the 2 training documents
    loop = ["--data", data, "--steps", 40, "--batch", 8, "--warmup", 4, "--checkpoint-dir", tmp_path / "ck"]
    shape = ["--source", 16, "--target", 8]
    small = ["--encoder-layers", 1, "--decoder-layers", 1, "--d-model", 32, "--n-head", 2, "--d-ff", 64]
    r = train_cli("t5-target", "--out", tmp_path / "t5t", *loop, *shape, *small)
    assert r.exit_code == 0, r.output
    record = json.loads((tmp_path / "t5t" / "train_record.json").read_text())
    h = record["history"]
    assert h[-1]["loss"] < h[0]["loss"] - 1.5, h  # from ln(400) = 6.0 down on repetitive text
    assert record["val_loss"] < h[0]["loss"]
    tiny = ["--d-model", 16, "--n-head", 2, "--d-ff", 32]
    r = train_cli("t5-draft", "--out", tmp_path / "t5d", "--teacher", tmp_path / "t5t", *loop, *shape, *tiny)
    assert r.exit_code == 0, r.output
    target, draft = weights.load_model(str(tmp_path / "t5t")), weights.load_model(str(tmp_path / "t5d"))
    # the tokenizer's own size (a 3-document corpus runs out of merges before 400)
    assert tokens.max() < target.config.n_vocab == draft.config.n_vocab <= 400 and draft.config.d_model == 16
    assert tok.for_model(target).name == tok.for_model(draft).name == text.name
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path / "results"))
    prompt = "Chapter 1. The little fox ran over the hill and into the wood, where the old owl"
    pair = ["--draft", tmp_path / "t5d", "--target", tmp_path / "t5t"]
    settings = [
        "-n",
        8,
        "--K",
        2,
        "-t",
        0,
        "--repeats",
        1,
        "--no-save",
        "--export-json",
        tmp_path / "row.json",
    ]
    r = runner.invoke(cli, [str(x) for x in ["run", *pair, "--prompt", prompt, *settings]])
    assert r.exit_code == 0, r.output
    (row,) = json.loads((tmp_path / "row.json").read_text())
    assert row["architecture"] == "t5" and row["ar_text"] == row["sd_text"]
    assert row["ar_text"] == text.decode(text.encode(row["ar_text"]))  # the pair's own tokenizer's text
