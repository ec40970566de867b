"""A draft that proposes only frequent tokens: its output head keeps the rows of the V' most
frequent tokens (FR-Spec: Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language
Models via Frequency-Ranked Speculative Sampling", arXiv:2502.14856).

The head of a small draft is most of its step: the bundled draft's 50,257 x 64 head is 12.9 MB of
the 13.2 MB a step reads. Restricted to V' tokens, the draft's distribution is its softmax over
those tokens and zero elsewhere. Speculative sampling is exact for any draft distribution, so the
output still follows the target; only the acceptance can change, where the target wants a token
outside the V'.

The ranking is the tokens of the corpus the bundled pair was trained on (its training split, as
`python -m specbench.train` prepares it), most frequent first: gpt2_weights/tokenizer/frequent.json,
written by scripts/token_ranking.py. It is a ranking of GPT-2's vocabulary, so it serves any GPT-2
draft, layer-skip included.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from specbench.errors import SpecbenchError
from specbench.model.checkpoints import tokenizer

RANKING_FILE = "frequent.json"
DECLARED_FILE = "drafting.json"  # in a model's directory: {"vocab": N}, what it drafts over by default


@functools.cache
def ranking() -> np.ndarray:
    """Token ids by their count in the bundled pair's training text, most frequent first."""
    path = tokenizer.default_dir() / RANKING_FILE
    try:
        ranked = np.asarray(json.loads(path.read_text())["ranked"], np.int32)
    except (OSError, ValueError, KeyError) as e:
        raise SpecbenchError(f"the token ranking {path} cannot be read ({e})") from e
    return ranked


def frequent_ids(n: int, n_vocab: int = tokenizer.N_VOCAB) -> np.ndarray:
    """The n most frequent token ids below n_vocab (a smaller vocabulary: the tests' models), in
    increasing id order, so that the restricted head's argmax breaks ties toward the lower id, as
    the full head's does."""
    ranked = ranking()
    ranked = ranked[ranked < n_vocab]
    if not 1 <= n <= ranked.size:
        raise SpecbenchError(f"the draft vocabulary must be 1..{ranked.size} tokens (got {n})")
    return np.sort(ranked[:n])


def declared(directory: str) -> int | None:
    """The draft vocabulary a model's directory declares (DECLARED_FILE), or None: its full head.
    The bundled draft declares 8,192 tokens (README, "The bundled draft's head")."""
    path = Path(directory) / DECLARED_FILE
    if not path.is_file():
        return None
    try:
        return int(json.loads(path.read_text())["vocab"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecbenchError(f"{path} does not say a draft vocabulary ({e})") from e
