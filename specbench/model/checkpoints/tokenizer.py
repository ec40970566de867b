"""GPT-2's byte-level BPE (Radford et al., 2019), run by tiktoken.

The ranks are built from OpenAI's original `encoder.json` and `vocab.bpe`, vendored in
gpt2_weights/tokenizer/ and checked against the sha256 digests that tiktoken itself checks,
so a corrupted or substituted file is refused rather than silently mis-tokenising.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

from specbench.errors import TokenizerError

VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# GPT-2's pre-tokeniser: contractions, letters, numbers, other symbols, whitespace runs
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT_TOKEN = "<|endoftext|>"
EOT_ID = 50256
N_VOCAB = 50257


def default_dir() -> Path:
    """gpt2_weights/tokenizer/ of the checkout this package lives in, else of weights_dir()."""
    beside_package = Path(__file__).resolve().parents[3] / "gpt2_weights" / "tokenizer"
    if beside_package.is_dir():
        return beside_package
    from specbench.model.checkpoints.weights import weights_dir

    return weights_dir() / "tokenizer"


def _checked(path: Path, sha256: str) -> str:
    if not path.is_file():
        raise TokenizerError(f"tokenizer file {path} is missing")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise TokenizerError(
            f"tokenizer file {path} is corrupt (sha256 {digest[:12]}…, expected {sha256[:12]}…)"
        )
    return str(path)


@functools.lru_cache(maxsize=4)
def get_encoding(directory: str | None = None) -> tiktoken.Encoding:
    """The GPT-2 encoding; `directory` holds encoder.json and vocab.bpe (default: the vendored copy)."""
    d = Path(directory) if directory else default_dir()
    vocab_bpe, encoder_json = (
        _checked(d / "vocab.bpe", VOCAB_BPE_SHA256),
        _checked(d / "encoder.json", ENCODER_JSON_SHA256),
    )
    # tiktoken caches files it reads in $TMPDIR/data-gym-cache and reads that copy next time; an
    # empty TIKTOKEN_CACHE_DIR is its documented way to read the checked files themselves instead
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json)
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return tiktoken.Encoding(
        "gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT_TOKEN: EOT_ID}
    )


def encode(text: str, directory: str | None = None) -> list[int]:
    """Text -> token ids. `<|endoftext|>` in the text is treated as the special token."""
    return get_encoding(directory).encode(text, allowed_special={EOT_TOKEN})


def decode(ids, directory: str | None = None) -> str:
    return get_encoding(directory).decode([int(i) for i in ids])


# ---------------------------------------------------------------------------------------------
# A model's own tokenizer: GPT-2's above, or the tokenizer.json a checkpoint carries (T5's
# SentencePiece vocabulary, the bundled T5 pair's BPE), run by Hugging Face `tokenizers`.

JSON_FILE = "tokenizer.json"


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """Text <-> token ids for one model; `name` says which (two models draft for each other only
    when their names are equal: a file's sha256, or "gpt2")."""

    name: str
    encode: Callable[[str], list[int]]
    decode: Callable[[Iterable[int]], str]


GPT2 = Tokenizer("gpt2", encode, decode)


@functools.lru_cache(maxsize=8)
def from_json(path: str) -> Tokenizer:
    """A tokenizer.json (Hugging Face `tokenizers`' format), named by its sha256. The source is
    encoded as the file says, without the special tokens a post-processor would add (T5's </s>):
    specbench's prompts are text to continue, not finished sentences."""
    from tokenizers import Tokenizer as HFTokenizer

    try:
        data = Path(path).read_bytes()
        tok = HFTokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 -- OSError, UnicodeDecodeError, and tokenizers' plain Exception
        problem = f"cannot read the tokenizer {path}: {str(e).splitlines()[0][:200]}"
        raise TokenizerError(problem, "draft") from None  # the model folder's: --draft/--target
    return Tokenizer(
        f"sha256:{hashlib.sha256(data).hexdigest()[:16]}",
        lambda text: tok.encode(text, add_special_tokens=False).ids,
        lambda ids: tok.decode([int(i) for i in ids], skip_special_tokens=False),
    )


def for_model(model) -> Tokenizer:
    """The tokenizer of a loaded model (network.Model): the tokenizer.json in its folder, else
    GPT-2's (every GPT-2 checkpoint, a T5 saved without one), folded onto the vocabulary of random
    weights whose vocabulary is not GPT-2's (folded)."""
    from specbench.model.nets.network import vocabulary  # a PARD draft's appended mask is no text

    path = Path(model.source) / JSON_FILE
    if model.source != "random" and path.is_file():
        return from_json(str(path))
    n_vocab = vocabulary(model.config)
    return GPT2 if n_vocab == N_VOCAB else folded(n_vocab)


@functools.lru_cache(maxsize=8)
def folded(n_vocab: int) -> Tokenizer:
    """GPT-2's tokenizer for random weights of another vocabulary (a Llama's, a small test model's):
    token ids taken modulo n_vocab; ids GPT-2 has no text for are decoded as <id>. Timing only,
    as the weights are."""

    def decode_ids(ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        return "".join(decode([i]) if i < N_VOCAB else f"<{i}>" for i in ids)

    return Tokenizer(
        f"gpt2 folded to {n_vocab} ids", lambda text: [i % n_vocab for i in encode(text)], decode_ids
    )
