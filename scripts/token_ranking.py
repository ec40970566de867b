"""Write gpt2_weights/tokenizer/frequent.json: GPT-2's token ids ranked by their count in the
training split of the corpus the bundled pair was trained on (draft_vocab.py reads it).

    python scripts/token_ranking.py ../shared/corpus gpt2_weights/tokenizer/frequent.json

The split is train.data.prepare's (val_fraction 0.02, seed 0), as the bundled pair's
train_record.json records; its sha256 is checked against that record.
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from specbench.train.data import load_tokens, prepare

KEEP = 32768  # ranks kept: the corpus's tokens beyond them are 0.1% of it


def main(corpus: str, out: str) -> None:
    record = json.loads(Path("gpt2_weights/tiny-draft/train_record.json").read_text())["data"]
    with tempfile.TemporaryDirectory() as tmp:
        meta = prepare(Path(corpus), Path(tmp), record["val_fraction"], record["seed"])
        if meta["train"]["sha256"] != record["train"]["sha256"]:
            sys.exit(f"this corpus's training split differs from the bundled pair's: {meta['train']}")
        tokens = load_tokens(Path(tmp), "train")
    counts = np.bincount(tokens, minlength=50257)
    ranked = np.argsort(-counts, kind="stable")[:KEEP]  # ties: the lower id first
    covered = counts[ranked].cumsum() / tokens.size
    doc = {
        "about": "GPT-2 token ids by count in the bundled pair's training text, most frequent first",
        "corpus": record["corpus"],
        "train_sha256": record["train"]["sha256"],
        "tokens": int(tokens.size),
        "coverage": {str(n): round(float(covered[n - 1]), 4) for n in (4096, 8192, 16384, 32768)},
        "ranked": ranked.tolist(),
    }
    Path(out).write_text(json.dumps(doc) + "\n")
    print(f"{out}: {KEEP} ranks; coverage {doc['coverage']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
