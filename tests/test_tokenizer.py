import shutil

import pytest

from specbench.model.checkpoints import tokenizer
from specbench.model.checkpoints.tokenizer import TokenizerError


def test_seed_sentence_encodes_to_known_ids():
    text = "Alan Turing theorized that computers would one day become"
    assert tokenizer.encode(text) == [36235, 39141, 18765, 1143, 326, 9061, 561, 530, 1110, 1716]
    assert tokenizer.decode([36235, 39141, 18765, 1143, 326, 9061, 561, 530, 1110, 1716]) == text


@pytest.mark.parametrize(
    "text",
    [
        "naïve café, Zürich — «quotes» and emoji 🚀🤖, 日本語のテキスト, Ελληνικά, \t tabs\n\nnewlines  ",
        "x = [i**2 for i in range(10)]  # code\n",
        "<|endoftext|>Once upon a time",
    ],
)
def test_decode_encode_round_trip(text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_endoftext_is_the_special_token():
    assert tokenizer.encode("<|endoftext|>") == [tokenizer.EOT_ID] == [50256]


def test_corrupt_vocab_file_is_refused(tmp_path):
    src = tokenizer.default_dir()
    shutil.copy(src / "encoder.json", tmp_path / "encoder.json")
    data = bytearray((src / "vocab.bpe").read_bytes())
    data[5000] ^= 1  # one flipped bit
    (tmp_path / "vocab.bpe").write_bytes(bytes(data))
    with pytest.raises(TokenizerError, match="vocab.bpe is corrupt"):
        tokenizer.get_encoding(str(tmp_path))
    (tmp_path / "vocab.bpe").unlink()
    with pytest.raises(TokenizerError, match="missing"):
        tokenizer.get_encoding(str(tmp_path))
