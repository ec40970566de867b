"""Training the bundled pair: data.py (corpus, windows, sampled softmax, greedy text), loop.py
(losses, optimizer, the loop, checkpoints), __main__.py (the command line)."""

from specbench.train.data import (
    compress,
    frequent_tokens,
    greedy_continuations,
    load_tokens,
    prepare,
    sample_batch,
    sample_vocab,
)
from specbench.train.loop import TrainConfig, save_model, train

__all__ = [
    "TrainConfig",
    "compress",
    "frequent_tokens",
    "greedy_continuations",
    "load_tokens",
    "prepare",
    "sample_batch",
    "sample_vocab",
    "save_model",
    "train",
]
