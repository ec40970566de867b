"""Training data: the corpus tokenised into uint16 files, random windows of it, the sampled
softmax's vocabulary, and the target's own greedy text for the draft.

`prepare` tokenises every document with our GPT-2 tokenizer, `<|endoftext|>` after each, and
splits train/validation by whole document (a seeded shuffle).
"""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

import numpy as np

from specbench.errors import TrainError
from specbench.model.checkpoints import tokenizer
from specbench.model.decode.sampling import Warp
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.network import Model


def gpt2_encoder(train_texts: list[str]):
    """(encode, end-of-document id) of our GPT-2 tokenizer; what prepare uses by default."""
    enc = tokenizer.get_encoding()
    return enc.encode_ordinary, tokenizer.EOT_ID


def prepare(
    corpus: Path,
    out: Path,
    val_fraction: float = 0.02,
    seed: int = 0,
    encoder=gpt2_encoder,
    tokenizer_name: str = "gpt2",
) -> dict:
    """Tokenise every .txt under corpus/ into out/{train,val}.bin (uint16) and out/meta.json.
    encoder(the training documents' texts) -> (encode, end id) gives the tokenizer (GPT-2's by
    default; seq2seq.py's trains one on them), the end id following each document; meta.json
    records tokenizer_name ("gpt2", or "tokenizer.json": the folder's own)."""
    files = sorted(corpus.rglob("*.txt"))
    if len(files) < 2:
        found = "no .txt files" if not files else "one .txt file"
        raise TrainError(
            f"{found} under {corpus}: the split needs one document to train on and one to validate", "corpus"
        )
    texts = {}
    for f in files:
        try:
            texts[f] = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise TrainError(
                f"{f} is not UTF-8 text (byte {e.start}): convert it, or move it out", "corpus"
            ) from None
    order = np.random.default_rng(seed).permutation(len(files))
    n_val = min(len(files) - 1, max(1, round(val_fraction * len(files))))
    val_files = {files[i] for i in order[:n_val]}
    out.mkdir(parents=True, exist_ok=True)
    train_files = [f for f in files if f not in val_files]
    encode, end = encoder([texts[f] for f in train_files])
    counts = {}
    for split, chosen in (("train", train_files), ("val", sorted(val_files))):
        ids: list[np.ndarray] = []
        for f in chosen:
            ids.append(np.asarray(encode(texts[f]) + [end], np.uint16))
        tokens = np.concatenate(ids)
        tokens.tofile(out / f"{split}.bin")
        counts[split] = {
            "documents": len(chosen),
            "tokens": int(tokens.size),
            "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()[:16],
        }
    meta = {
        "corpus": str(corpus),
        "tokenizer": tokenizer_name,  # GPT-2's, or the folder's own tokenizer.json (options.check_tokenizer)
        "seed": seed,
        "val_fraction": val_fraction,
        **counts,
        "val_documents": sorted(str(f.relative_to(corpus)) for f in val_files),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def load_tokens(data: Path, split: str) -> np.ndarray:
    """data/{split}.bin, or its xz-compressed copy {split}.bin.xz (what travels to a GPU machine)."""
    raw = data / f"{split}.bin"
    if raw.exists():
        return np.fromfile(raw, dtype=np.uint16)
    with lzma.open(data / f"{split}.bin.xz") as f:
        return np.frombuffer(f.read(), dtype=np.uint16)


def compress(data: Path) -> list[Path]:
    """Write {train,val}.bin.xz beside the .bin files: 65 MB of tokens become about 31 MB."""
    out = []
    for split in ("train", "val"):
        with lzma.open(data / f"{split}.bin.xz", "wb", preset=6) as f:
            f.write((data / f"{split}.bin").read_bytes())
        out.append(data / f"{split}.bin.xz")
    return out


def sample_batch(tokens: np.ndarray, batch: int, ctx: int, rng: np.random.Generator):
    """Random windows: inputs [batch, ctx] and next-token targets [batch, ctx]."""
    starts = rng.integers(0, tokens.size - ctx - 1, batch)
    window = np.stack([tokens[s : s + ctx + 1] for s in starts]).astype(np.int32)
    return window[:, :-1], window[:, 1:]


# ---------------------------------------------------------------------------------------------
# A sampled softmax for the CPU, where the 50,257-wide head is most of a small GPT-2's training
# step (README, performance notes). Each step's softmax runs over the corpus's most frequent
# tokens (16,384 cover 98.7% of it), every rarer token that is a target in the batch, and random
# rarer tokens as negatives, so that no target is dropped and every row of the head is still
# pushed down where it does not belong (Jean et al. 2015, "On Using Very Large Target Vocabulary").


def frequent_tokens(tokens: np.ndarray, n: int, n_vocab: int = tokenizer.N_VOCAB) -> np.ndarray:
    """The n most frequent token ids of a corpus, sorted by id."""
    counts = np.bincount(tokens, minlength=n_vocab)
    return np.sort(np.argsort(-counts, kind="stable")[:n])


def sample_vocab(
    frequent: np.ndarray,
    y: np.ndarray,
    n_extra: int,
    rng: np.random.Generator,
    n_vocab: int = tokenizer.N_VOCAB,
):
    """(vocab ids [len(frequent) + n_extra], y re-indexed into them): the frequent tokens, the
    batch's rarer targets, then distinct random rarer tokens to fill up to a fixed size."""
    is_frequent = np.zeros(n_vocab, bool)
    is_frequent[frequent] = True
    rare_targets = np.unique(y[~is_frequent[y]])[:n_extra]
    taken = is_frequent.copy()
    taken[rare_targets] = True
    rest = np.flatnonzero(~taken)
    negatives = rng.choice(rest, n_extra - rare_targets.size, replace=False)
    vocab = np.concatenate([frequent, rare_targets, negatives]).astype(np.int32)
    index = np.full(n_vocab, -1, np.int32)
    index[vocab] = np.arange(vocab.size, dtype=np.int32)
    mapped = index[y]
    if (mapped < 0).any():  # more rare targets than n_extra slots: only possible with tiny n_extra
        raise ValueError(f"sampled softmax: {rare_targets.size} rare targets for {n_extra} extra slots")
    return vocab, mapped


# ---------------------------------------------------------------------------------------------
# The target's own greedy text, for the draft (sequence-level distillation, Kim & Rush 2016):
# at T = 0 the draft is judged along the target's greedy continuations, so it trains on them.


def greedy_continuations(
    params, config: GPT2Config, prefixes: np.ndarray, n_new: int, batch: int = 256, log=None
) -> np.ndarray:
    """[n, P] prompt tokens -> [n, P + n_new]: each prefix continued greedily by the model, a
    batch at a time through the decoding front door (generate.autoregressive at T = 0)."""
    from specbench.model import generate

    model = Model("teacher", config, params, "training")
    out = []
    for i in range(0, len(prefixes), batch):
        chunk = np.asarray(prefixes[i : i + batch])
        padded = np.pad(chunk, ((0, batch - len(chunk)), (0, 0)))  # one compiled program for every chunk
        new, _ = generate.autoregressive(model, padded.tolist(), n_new, Warp(0.0))
        new = np.asarray(new)
        out.append(np.concatenate([chunk, new[: len(chunk)]], axis=1))
        if log:
            log(f"greedy continuations: {min(i + batch, len(prefixes))}/{len(prefixes)}")
    return np.concatenate(out).astype(np.uint16)
