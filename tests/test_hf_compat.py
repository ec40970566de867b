"""Cross-check with Hugging Face transformers, where the peers extra is installed (CI installs it).

pip install torch==2.13.0 && pip install -e '.[peers]' && python -m pytest tests/test_hf_compat.py
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp

from specbench.model.checkpoints import hf_layout
from specbench.model.nets.gpt2 import GPT2Config, gpt2

from conftest import random_model

CONFIG = GPT2Config(n_layer=3, n_head=4, n_embd=64, n_ctx=128, n_vocab=1000)


@pytest.mark.parametrize("max_shard_bytes", [None, 100_000])
def test_our_checkpoint_loads_in_transformers_with_the_same_logits(tmp_path, max_shard_bytes):
    model = random_model(CONFIG, 0, scale=5)
    hf_layout.save(tmp_path / "ours", model.params, CONFIG, max_shard_bytes=max_shard_bytes)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "ours")).eval()
    tokens = np.random.default_rng(0).integers(0, CONFIG.n_vocab, 20)
    with torch.no_grad():
        reference = hf(torch.tensor(tokens)[None]).logits[0].numpy()
    np.testing.assert_allclose(gpt2(model.params, jnp.asarray(tokens), CONFIG), reference, atol=1e-4)
    hf.save_pretrained(str(tmp_path / "theirs"))  # and transformers' own checkpoint loads here
    config, params = hf_layout.load_dir(tmp_path / "theirs")
    assert config == CONFIG
    np.testing.assert_allclose(gpt2(params, jnp.asarray(tokens), CONFIG), reference, atol=1e-4)
