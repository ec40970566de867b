"""The bundled pair in gpt2_weights/: it loads, matches its config, and decodes exactly."""

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from specbench import prompts
from specbench.model import generate
from specbench.model.checkpoints import draft_vocab, eagle_files, hf_layout, tokenizer, weights
from specbench.model.decode import drafters
from specbench.model.decode.tree import Tree
from specbench.model.generate import speculative
from specbench.model.nets import eagle
from specbench.model.nets.gpt2 import gpt2
from specbench.results import repetition

BUNDLED = Path(__file__).resolve().parent.parent / "gpt2_weights"


@pytest.fixture(scope="module")
def pair():
    for name in weights.BUNDLED_PAIR:
        assert hf_layout.is_model_dir(BUNDLED / name), f"the bundled {name} is missing from {BUNDLED}"
    return tuple(weights.load_model(str(BUNDLED / name)) for name in weights.BUNDLED_PAIR)


def test_bundled_models_match_their_config_and_give_finite_logits(pair):
    total = 0
    for model in pair:
        config = json.loads((BUNDLED / model.name / "config.json").read_text())
        assert (model.config.n_layer, model.config.n_embd, model.config.n_head, model.config.n_ctx) == (
            config["n_layer"],
            config["n_embd"],
            config["n_head"],
            config["n_positions"],
        )
        assert model.config.n_vocab == tokenizer.N_VOCAB == config["vocab_size"]
        assert model.params["wte"].shape == (tokenizer.N_VOCAB, model.config.n_embd)
        logits = gpt2(model.params, jnp.asarray(tokenizer.encode(prompts.DEFAULT_PROMPT)), model.config)
        assert bool(jnp.all(jnp.isfinite(logits)))
        total += sum(f.stat().st_size for f in (BUNDLED / model.name).glob("*.safetensors"))
    assert total <= 48 * 2**20  # the working tree must still travel to a GPU machine
    draft, target = pair
    assert draft.config.n_embd < target.config.n_embd


def test_greedy_speculative_equals_autoregressive_on_every_built_in_prompt(pair):
    draft, target = pair
    ids = [tokenizer.encode(text) for text in prompts.all_prompts().values()]
    # all prompts as one batch (batched.py: each sequence equals its prompt decoded alone)
    ar, _ = generate.autoregressive(target, ids, 24)
    sd, st = generate.speculative(draft, target, ids, 24, 4)
    for pid, a, s in zip(prompts.all_prompts(), ar, sd):
        np.testing.assert_array_equal(s, a, err_msg=pid)
    assert st.alpha > 0.3  # a trained pair agrees far more often than chance
    # the default prompt's greedy text loops (", and the door" again and again), and the suite
    # holds varied text too: why the headline must cover the suite, not that prompt alone
    texts = dict(zip(prompts.all_prompts(), np.asarray(ar).tolist()))
    assert repetition.tail_cycle(texts[prompts.DEFAULT_PROMPT_ID]) == (4, 0)
    assert min(repetition.repeated_share(t) for t in texts.values()) < repetition.HIGH
    # and one prompt alone, through the single-sequence programs
    one, _ = speculative(draft, target, ids[0], 24, 4)
    np.testing.assert_array_equal(one, ar[0])
    # and drafting over the vocabulary the bundled draft declares (what `specbench run` uses)
    vocab = draft_vocab.declared(draft.source)
    assert vocab == 8192
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), vocab=vocab)
    sd, st = generate.speculative(draft, target, ids, 24, 4, drafter=drafter)
    for pid, a, s in zip(prompts.all_prompts(), ar, sd):
        np.testing.assert_array_equal(s, a, err_msg=f"{pid}, draft vocabulary {vocab}")
    assert st.alpha > 0.3


def test_the_bundled_eagle_head_drafts_exactly_and_better_than_chance(pair):
    """gpt2_weights/tiny-target-eagle: trained on the bundled target's features (model card in
    gpt2_weights/README.md), small, declaring its drafting vocabulary; greedy SD with it equals
    AR on every built-in prompt, and its drafts are accepted far more often than the draft's."""
    _, target = pair
    folder = BUNDLED / "tiny-target-eagle"
    assert eagle_files.is_head_dir(folder), f"the bundled EAGLE head is missing from {folder}"
    assert sum(f.stat().st_size for f in folder.glob("*.safetensors")) <= 5 * 2**20
    config, params, trained_on = eagle_files.load(folder)
    assert trained_on == "tiny-target" and config == eagle.config_for(target.config)
    head = weights.Model(folder.name, config, params, str(folder))
    vocab = draft_vocab.declared(folder)
    drafter = dataclasses.replace(drafters.eagle_drafter(target.config), vocab=vocab)
    ids = [tokenizer.encode(text) for text in prompts.all_prompts().values()]
    ar, _ = generate.autoregressive(target, ids, 24)
    sd, st = generate.speculative(head, target, ids, 24, 4, drafter=drafter)
    for pid, a, s in zip(prompts.all_prompts(), ar, sd):
        np.testing.assert_array_equal(s, a, err_msg=pid)
    assert st.alpha > 0.5 and st.accepted_hist[:-1].sum() > 0  # drafts accepted, and some rejected
    tree = dataclasses.replace(drafter, tree=Tree.branching((2, 2, 1)))
    accepted = rejected = 0
    for pid in ("narrative-1", "fairy-1", "list-1"):  # a tree decodes one sequence
        one = tokenizer.encode(prompts.all_prompts()[pid])
        sd, st = generate.speculative(head, target, one, 24, 3, drafter=tree)
        np.testing.assert_array_equal(sd, generate.autoregressive(target, one, 24)[0], err_msg=f"tree, {pid}")
        accepted, rejected = accepted + st.accepted.sum(), rejected + st.accepted_hist[:-1].sum()
    assert accepted > 0 and rejected > 0  # an identity that a head rejecting everything would not pass


def test_the_bundled_pair_is_the_default(monkeypatch):
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(BUNDLED))
    assert weights.default_pair() == weights.BUNDLED_PAIR
    kinds = {row["name"]: row["kind"] for row in weights.list_models()}
    assert kinds["tiny-target"].startswith("bundled") and kinds["tiny-draft"].startswith("bundled")


def test_the_bundled_t5_pair_decodes_exactly_with_its_own_tokenizer(monkeypatch):
    """gpt2_weights/tiny-t5-target and tiny-t5-draft (model card in gpt2_weights/README.md): T5s
    with their own BPE (the same tokenizer.json in both), small enough to travel; greedy SD equals
    AR on every built-in prompt read as the source, by the draft and by lookup over the source,
    and the distilled draft's tokens are accepted far more often than chance."""
    from specbench.model.nets import network

    names = weights.BUNDLED_T5_PAIR
    for name in names:
        assert (BUNDLED / name / tokenizer.JSON_FILE).is_file(), f"the bundled {name} is missing"
    assert sum(f.stat().st_size for name in names for f in (BUNDLED / name).iterdir()) <= 6 * 2**20
    draft, target = (weights.load_model(str(BUNDLED / name)) for name in names)
    assert network.architecture(target.config) == network.architecture(draft.config) == "t5"
    text = tokenizer.for_model(target)
    assert text.name == tokenizer.for_model(draft).name != tokenizer.GPT2.name
    ids = [text.encode(t) for t in prompts.all_prompts().values()]
    assert max(max(i) for i in ids) < target.config.n_vocab
    ar, _ = generate.autoregressive(target, ids, 24)
    sd, st = generate.speculative(draft, target, ids, 24, 4)
    looked_up, _ = generate.speculative(None, target, ids, 24, 4, drafter=drafters.lookup_drafter())
    for pid, a, s, lk in zip(prompts.all_prompts(), ar, sd, looked_up):
        np.testing.assert_array_equal(s, a, err_msg=pid)
        np.testing.assert_array_equal(lk, a, err_msg=f"{pid}, lookup")
    assert st.alpha > 0.3
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(BUNDLED))
    kinds = {row["name"]: row["kind"] for row in weights.list_models()}
    assert kinds[names[0]] == kinds[names[1]] == "bundled T5 pair"


@pytest.mark.parametrize("name", weights.BUNDLED_PAIR)
def test_other_tools_read_a_bundled_gpt2_folder_as_it_is(name):
    """transformers loads the folder with AutoTokenizer and AutoModelForCausalLM (vocab.json and
    merges.txt beside the weights, as every GPT-2 folder of the hub has them): the same prompt ids
    and the same 20 greedy tokens as specbench's autoregressive decoding."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = str(BUNDLED / name)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    text = prompts.DEFAULT_PROMPT
    ids = tok(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == tokenizer.GPT2.encode(text)
    theirs = model.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=tok.eos_token_id)
    ours, _ = generate.autoregressive(weights.load_model(folder), ids[0].tolist(), 20)
    assert theirs[0, ids.shape[1] :].tolist() == np.asarray(ours).tolist()
