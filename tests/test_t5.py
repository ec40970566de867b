"""T5 in JAX (t5.py) and its Hugging Face layout (t5_layout.py): the logits equal transformers'
T5ForConditionalGeneration's on the same weights, the cached decoder step equals the uncached
forward, and a checkpoint with a missing or misshapen tensor is refused naming it."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.errors import WeightsError
from specbench.measure import timing
from specbench.model.checkpoints import hf_layout, t5_layout
from specbench.model.nets import t5
from specbench.model.nets.t5 import T5Config

CONFIG = T5Config(
    n_vocab=97,
    d_model=32,
    d_kv=8,
    d_ff=48,
    n_layer=2,
    n_decoder_layer=3,
    n_head=4,
    num_buckets=8,
    max_distance=20,
)


def hf_model(tmp_path, gated: bool, tied: bool):
    """A random transformers T5, saved as safetensors in tmp_path: (the torch model, its folder)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=97,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=tied,
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    model = transformers.T5ForConditionalGeneration(config).eval()
    if not tied:  # transformers 5 ties every T5's head to the embedding; v1.1 and Flan were saved untied
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(0.2 * torch.randn(97, 32))
    with torch.no_grad():  # norms away from 1, so that a norm read from the wrong place shows
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.mul_(1 + 0.3 * torch.randn_like(p))
    folder = tmp_path / f"t5-{gated}-{tied}"
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


@pytest.mark.parametrize(
    "gated, tied", [(True, False), (False, True)], ids=["v1.1-gated-untied", "original-relu-tied"]
)
def test_logits_equal_transformers_on_the_same_weights(tmp_path, gated, tied):
    import torch

    model, folder = hf_model(tmp_path, gated, tied)
    config, params = t5_layout.load_dir(folder)
    assert config.gated == gated and config.scale_decoder_outputs == tied, config
    assert ("lm_head" in params) == (not tied)
    rng = np.random.default_rng(1)
    src, tgt = (
        rng.integers(0, 97, 30),
        np.concatenate([[0], rng.integers(0, 97, 24)]),
    )  # offsets past max_distance
    with torch.no_grad():
        want = (
            model(input_ids=torch.tensor(src[None]), decoder_input_ids=torch.tensor(tgt[None]))
            .logits[0]
            .numpy()
        )
    got = np.asarray(
        jax.jit(t5.t5, static_argnames="config")(params, jnp.asarray(src), jnp.asarray(tgt), config)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_relative_buckets_equal_transformers():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    offsets = np.arange(-300, 301)
    for bidirectional in (True, False):
        for buckets, distance in ((32, 128), (8, 20)):
            want = bucket(torch.tensor(offsets), bidirectional, buckets, distance).numpy()
            got = np.asarray(t5.relative_bucket(jnp.asarray(offsets), bidirectional, buckets, distance))
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gated", [True, False])
def test_the_cached_decoder_step_equals_the_uncached_forward(gated):
    config = T5Config(**{**CONFIG.__dict__, "gated": gated, "scale_decoder_outputs": not gated})
    params = t5.init_params(config, seed=3)
    rng = np.random.default_rng(2)
    src, tgt = jnp.asarray(rng.integers(0, 97, 12)), jnp.asarray(rng.integers(0, 97, 20))
    want = t5.t5(params, src, tgt, config)
    # the source padded to 16: its padding must change nothing
    padded = jnp.concatenate([src, jnp.zeros(4, src.dtype)])
    step = jax.jit(t5.step, static_argnames="config")
    cache, pos, got = t5.start_cache(params, padded, 12, config, 32), 0, []
    for n in (1, 1, 5, 3, 1, 9):  # a decode step, a verify step, a longer one
        logits, cache = step(params, cache, tgt[pos : pos + n], jnp.int32(pos), config)
        got.append(logits)
        pos += n
    np.testing.assert_allclose(jnp.concatenate(got), want, rtol=1e-5, atol=1e-5)


def test_a_missing_or_misshapen_tensor_is_refused_naming_it(tmp_path):
    from safetensors.numpy import load_file, save_file

    _, folder = hf_model(tmp_path, True, False)
    tensors = load_file(str(folder / hf_layout.SAFETENSORS_FILE))
    config = t5_layout.config_from_hf(json.loads((folder / "config.json").read_text()))
    key = "decoder.block.1.layer.1.EncDecAttention.k.weight"
    for broken, fragment in (
        ({k: v for k, v in tensors.items() if k != key}, f"missing ['{key}']"),
        (tensors | {key: tensors[key][:, :-1].copy()}, f"tensor {key} has shape (32, 31), expected (32, 32)"),
    ):
        with pytest.raises(WeightsError) as e:
            t5_layout.params_from_hf(broken, config)
        assert fragment in str(e.value)
        assert "\n" not in str(e.value)
    save_file({k: v for k, v in tensors.items() if k != key}, str(folder / hf_layout.SAFETENSORS_FILE))
    with pytest.raises(WeightsError, match="missing"):
        t5_layout.load_dir(folder)
    with pytest.raises(WeightsError, match="d_kv is missing"):
        t5_layout.config_from_hf({"vocab_size": 9, "d_model": 8, "d_ff": 8, "num_layers": 1, "num_heads": 1})


# ---------------------------------------------------------------------------------------------
# Decoding: the prompt is the source; the round, the drafters and the verdicts are GPT-2's.


def t5_model(config: T5Config, seed: int, name: str, scale: float = 1.0):
    """A random T5 with its matrices scaled by `scale` (sharper predictions)."""
    from specbench.model.nets.network import Model

    params = t5.init_params(config, seed)
    params = jax.tree_util.tree_map(lambda a: a * scale if a.ndim == 3 else a, params)
    return Model(name, config, params, "random")


def greedy_reference(model, src, n: int) -> list[int]:
    """n greedy tokens by the uncached forward over the whole decoder sequence each time: the
    seed's own loop (Warfield), the slowest and plainest. The sequence is padded to its final
    length, so that one program serves every step: the decoder is causal, so the padding after
    the last token changes nothing before it."""
    forward = jax.jit(t5.t5, static_argnames="config")
    out = [model.config.decoder_start]
    for _ in range(n):
        padded = jnp.asarray(out + [0] * (n + 1 - len(out)))
        out.append(int(forward(model.params, jnp.asarray(src), padded, model.config)[len(out) - 1].argmax()))
    return out[1:]


def test_greedy_speculative_and_autoregressive_equal_the_uncached_greedy_decode():
    from specbench.model.generate import autoregressive, speculative
    from specbench.model.nets.network import Model

    target = t5_model(CONFIG, 1, "t5-target", scale=2.0)
    rng = np.random.default_rng(4)  # a draft that agrees often, not always: the target, perturbed
    noisy = lambda a: a + 0.3 * jnp.std(a) * jnp.asarray(rng.normal(size=a.shape), a.dtype)
    draft = Model("t5-draft", CONFIG, jax.tree_util.tree_map(noisy, target.params), "random")
    sources = [[5, 9, 2, 44, 13, 7, 81], [60, 3, 3, 17]]
    n, alphas = 14, []
    for src in sources:
        ar, _ = autoregressive(target, src, n)
        assert list(ar) == greedy_reference(target, src, n)
        for K in (1, 3):
            sd, stats = speculative(draft, target, src, n, K)
            np.testing.assert_array_equal(sd, ar, err_msg=f"source {src}, K={K}")
            alphas.append(stats.alpha)
        host, _ = speculative(draft, target, src, n, 3, device_loop=False)
        np.testing.assert_array_equal(host, ar)
        copy, stats = speculative(target, target, src, n, 3)  # the target drafting for itself
        np.testing.assert_array_equal(copy, ar)
        assert stats.alpha == 1.0
    assert 0.2 < np.mean(alphas) < 0.95, alphas  # accepted and rejected drafts both tested
    # a batch: each sequence its own source, the cross-attention entries in its own cache
    batch_ar, _ = autoregressive(target, sources, n)
    batch_sd, _ = speculative(draft, target, sources, n, 3)
    for i, src in enumerate(sources):
        np.testing.assert_array_equal(batch_ar[i], autoregressive(target, src, n)[0])
        np.testing.assert_array_equal(batch_sd[i], batch_ar[i])


def test_every_drafter_and_verification_a_t5_takes_gives_ar_s_tokens_at_t0():
    """T = 0 over the bundled T5 pair (a random T5's greedy text is one token repeated, on which
    every draft is all or nothing): the dial (a = 0.5, its drafts the target's greedy tokens or
    wrong ones), block verification, and k = 2 draft sequences each give AR's tokens, with drafts
    both accepted and rejected (the model drafter and lookup: the tests beside this one)."""
    import dataclasses
    from pathlib import Path

    from specbench import prompts
    from specbench.model.checkpoints import tokenizer, weights
    from specbench.model.decode import drafters
    from specbench.model.generate import autoregressive, speculative

    bundled = Path(__file__).resolve().parent.parent / "gpt2_weights"
    draft, target = (weights.load_model(str(bundled / name)) for name in weights.BUNDLED_T5_PAIR)
    src = tokenizer.for_model(target).encode(prompts.DEFAULT_PROMPT)
    ar, _ = autoregressive(target, src, 12)
    model = drafters.model_drafter(draft.config)
    for name, d, drafter in (
        ("dial", None, drafters.dial_drafter(0.5)),
        ("block", draft, dataclasses.replace(model, verify="block")),
        ("2 drafts", draft, dataclasses.replace(model, drafts=2)),
    ):
        sd, stats = speculative(d, target, src, 12, 3, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=name)
        assert 0 < stats.alpha < 1, (name, stats.alpha)


def test_prompt_lookup_over_a_t5_copies_from_the_source_and_stays_exact():
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.generate import autoregressive, speculative

    lookup = drafters.lookup_drafter(ngram=2)
    source = jnp.asarray([5, 9, 2, 44, 13, 0, 0, 0], jnp.int32)  # 5 real, padded to its bucket
    tokens = jnp.asarray([0, 9, 2, 0, 0, 0], jnp.int32)  # <pad> (the start), then "9 2" decoded
    propose = lambda state: drafters.propose(lookup, None, state, tokens, 3, None, Warp(0.0), 3, 97)
    over_source = drafters.start(lookup, None, source, 5, 16, source=True)
    _, drafts, _, n_drafted = propose(over_source)
    assert int(n_drafted) == 3 and list(np.asarray(drafts)) == [44, 13, 0]  # what followed "9 2" there
    _, _, _, n_drafted = propose(drafters.start(lookup, None, source, 5, 16))  # no source: no match
    assert int(n_drafted) == 0
    target = t5_model(CONFIG, 1, "t5-target", scale=2.0)
    for src in ([5, 9, 2, 44, 13, 7, 81], [60, 3, 3, 17, 3, 3]):
        ar, _ = autoregressive(target, src, 12)
        sd, _ = speculative(None, target, src, 12, 3, drafter=lookup)
        np.testing.assert_array_equal(sd, ar)


SMALL = T5Config(
    n_vocab=12,
    d_model=16,
    d_kv=16,
    d_ff=32,
    n_layer=1,
    n_decoder_layer=2,
    n_head=1,
    num_buckets=8,
    max_distance=16,
)


@pytest.mark.slow
def test_speculative_sampling_follows_the_t5_target_and_a_broken_verdict_fails(shared):
    from exactness import assert_follows_target

    target = t5_model(SMALL, 11, "small-t5-target", scale=4.0)
    draft = t5_model(T5Config(**{**SMALL.__dict__, "n_decoder_layer": 1}), 12, "small-t5-draft", scale=4.0)
    assert_follows_target(draft, target, [3, 7, 1])


def test_the_step_timers_run_a_t5_through_the_same_interface():
    from specbench.measure import timing

    model = t5_model(CONFIG, 1, "t5")
    for rows in (1, 5):
        seconds = timing.step_seconds(model, rows, 32, iters=2, repeats=2)
        assert seconds.shape == (2,) and (seconds > 0).all()
    assert (timing.step_seconds(model, 1, 32, iters=2, repeats=1, batch=2) > 0).all()
    assert (timing.plain_step_seconds(model, 32, iters=2, repeats=1) > 0).all()


def test_a_t5_folder_loads_by_path_and_decodes_as_transformers_generates(tmp_path, env):
    import torch

    from specbench.model.checkpoints import weights
    from specbench.model.generate import autoregressive

    model, folder = hf_model(tmp_path, True, False)
    loaded = weights.load_model(str(folder))
    assert isinstance(loaded.config, T5Config) and loaded.source == str(folder)
    src = [5, 9, 2, 44, 13, 7, 81, 30]
    model.generation_config.eos_token_id = None  # 12 tokens whatever they are, as specbench decodes
    with torch.no_grad():
        hf = model.generate(torch.tensor([src]), max_new_tokens=12, do_sample=False, use_cache=False)
    ours, _ = autoregressive(loaded, src, 12)
    assert list(ours) == hf[0, 1:].tolist()  # transformers' greedy generation, after its start token
    rows = weights.list_models()
    assert not any(r["path"] == str(folder) for r in rows)  # not in the weights folder: not listed
    link = weights.weights_dir() / "my-t5"
    link.symlink_to(folder)
    row = next(r for r in weights.list_models() if r["name"] == "my-t5")
    assert row["kind"] == "T5 (encoder-decoder)" and row["layers_x_width"] == "2+3x32"


def t5_pair_folders(tmp_path) -> dict:
    """A random T5 target (2+3 blocks: a decoder deeper than its encoder, as the bundled
    tiny-t5-target's) and draft (1+1) over GPT-2's vocabulary, saved by transformers: what the
    command line takes by folder."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folders = {}
    for name, layers, decoder in (("t5-target", 2, 3), ("t5-draft", 1, 1)):  # GPT-2's vocabulary
        torch.manual_seed(layers)
        config = transformers.T5Config(
            vocab_size=50257,
            d_model=32,
            d_kv=8,
            d_ff=48,
            num_layers=layers,
            num_decoder_layers=decoder,
            num_heads=4,
            feed_forward_proj="gated-gelu",
        )
        folders[name] = tmp_path / name
        transformers.T5ForConditionalGeneration(config).save_pretrained(
            folders[name], safe_serialization=True
        )
    return folders


def test_run_sweep_and_trace_take_a_t5_pair_and_the_rest_refuse_it_in_one_line(tmp_path, env):
    from conftest import assert_one_line_error, invoke

    folders = t5_pair_folders(tmp_path)
    pair = ["--target", folders["t5-target"], "--draft", folders["t5-draft"], "-n", 8]
    out = tmp_path / "row.json"
    result = invoke("run", *pair, "--K", 2, "--repeats", 1, "--no-save", "--export-json", out)
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())[0]
    assert row["architecture"] == "t5" and row["ar_text"] == row["sd_text"]  # T = 0: identical
    assert "t5-target (2+3x32)" in result.output
    result = invoke("trace", *pair, "--K", 2)
    assert result.exit_code == 0 and "rounds" in result.output, result.output
    lines = result.output.splitlines()  # the seed's example in structure: the source, then the rounds
    source = next(i for i, line in enumerate(lines) if line.startswith("source: It was a dark"))
    assert lines[source + 1].startswith("output: ") and "│" in lines[source + 1]
    saved = tmp_path / "sweep.json"
    result = invoke("sweep", *pair, "--K", 2, "--repeats", 1, "-o", saved)
    assert result.exit_code == 0, result.output
    assert [r["architecture"] for r in json.loads(saved.read_text())] == ["t5"]
    assert_one_line_error(invoke("run", *pair, "--tree", "2,1"), "--tree", "is a T5")
    assert_one_line_error(invoke("run", *pair[:2], "--drafter", "layerskip"), "--drafter", "is a T5")
    assert_one_line_error(invoke("run", *pair[:2], "--drafter", "eagle"), "--drafter", "is a T5")
    assert_one_line_error(
        invoke("roofline", "-m", folders["t5-target"], "--kernels", "cpu"), "--kernels", "is a T5"
    )
    roof = tmp_path / "roofline.json"
    result = invoke(
        "roofline", "-m", folders["t5-target"], "--K", 1, "--context", 64, "--iters", 2, "--export-json", roof
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(roof.read_text())
    assert [r["n_tokens_per_step"] for r in rows] == [1, 2] and rows[0]["kernels"] == "xla"
    # a decoder step reads the decoder, the head (tied: the embedding) and its caches, not the encoder
    c = T5Config(n_vocab=50257, d_model=32, d_kv=8, d_ff=48, n_layer=2, n_decoder_layer=3, n_head=4)
    decoder = 3 * (8 * 32 * 32 + 3 * 32 * 48 + 3 * 32) + 32 * 4 + 32  # blocks, bias table, final norm
    caches = 2 * 3 * (64 + timing.SOURCE_TOKENS) * c.inner  # self over the context, cross over the source
    assert rows[0]["bytes_per_step"] == 4 * (decoder + c.n_vocab * c.d_model + caches)
    result = invoke("report", "--quick", *pair[:4], "-o", tmp_path / "r", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "lookup(n=3) K=4" in result.output and "layerskip" not in result.output  # a T5's drafters
    assert "traversal" not in result.output and not (tmp_path / "r").exists()  # chains only


def multiply_adds(jaxpr) -> int:
    """Multiply-adds of every matrix product (dot_general) a traced program runs, nested programs
    included (a scan's body times its length): an oracle independent of roofline's formula."""
    from jax.extend import core

    total = 0
    for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
            (contracted, _), _ = e.params["dimension_numbers"]
            left = e.invars[0].aval.shape
            total += int(np.prod(e.outvars[0].aval.shape)) * int(np.prod([left[i] for i in contracted]))
        times = e.params.get("length", 1) if e.primitive.name == "scan" else 1
        for value in e.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(sub, (core.ClosedJaxpr, core.Jaxpr)):
                    total += times * multiply_adds(getattr(sub, "jaxpr", sub))
    return total


def test_a_t5_steps_flops_are_its_traced_matrix_products():
    """step_costs.step_flops for a T5 decoder step of 1 and 5 tokens equals twice the multiply-adds
    of the step's traced matrix products: self-attention's four matrices, cross-attention's q and
    o, the gated or plain feed-forward, attention over the cache and the source, the head."""
    from specbench.measure import step_costs
    from specbench.model.nets import network
    from specbench.model.nets.network import Model

    for gated in (True, False):
        c = T5Config(
            n_vocab=2000, d_model=128, d_kv=32, d_ff=512, n_layer=1, n_decoder_layer=2, n_head=4, gated=gated
        )
        m = Model("t", c, t5.init_params(c), "random")
        step = lambda p, cache, tokens: network.step(p, cache, tokens, jnp.int32(10), c)[0]
        for n in (1, 5):
            traced = jax.make_jaxpr(step)(m.params, timing.step_cache(m, 64), jnp.zeros(n, jnp.int32))
            assert step_costs.step_flops(m, n, 64) == 2 * multiply_adds(traced.jaxpr)


@pytest.mark.slow
def test_the_seeds_own_system_and_transformers_run_beside_specbench_on_a_t5_pair(tmp_path, env):
    from conftest import assert_one_line_error, invoke

    folders = t5_pair_folders(tmp_path)
    pair = ["--target", folders["t5-target"], "--draft", folders["t5-draft"], "-n", 8, "--K", 3]
    out = tmp_path / "rows.json"
    result = invoke(
        "run", *pair, "--repeats", 1, "--no-save", "--peer", "warfield,transformers", "--export-json", out
    )
    assert result.exit_code == 0, result.output
    rows = {r["implementation"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"specbench", "warfield", "transformers"}
    for peer in ("warfield", "transformers"):  # the same T = 0 tokens, AR and SD, as specbench's
        assert rows[peer]["same_as_specbench"] is True, rows[peer]
    assert "no cache" in rows["warfield"]["implementation_version"]
    assert_one_line_error(invoke("run", *pair, "--peer", "numpy"), "--peer", "GPT-2")
    assert_one_line_error(invoke("run", *pair, "--peer", "warfield", "-t", "1"), "--peer", "greedy")
    assert_one_line_error(invoke("run", *env, "--peer", "warfield"), "--peer", "T5 pair")


def test_a_draft_with_another_tokenizer_is_refused_in_one_line(tmp_path, env):
    """Drafts are token ids: a draft whose tokenizer.json differs from the target's (here one
    special token renamed) cannot draft for it, whatever its vocabulary size."""
    import shutil
    from pathlib import Path

    from conftest import assert_one_line_error, invoke

    bundled = Path(__file__).resolve().parent.parent / "gpt2_weights"
    draft = tmp_path / "other-draft"
    shutil.copytree(bundled / "tiny-t5-draft", draft)
    spec = json.loads((draft / "tokenizer.json").read_text())
    spec["added_tokens"][0]["content"] = "<PAD>"
    (draft / "tokenizer.json").write_text(json.dumps(spec))
    target = bundled / "tiny-t5-target"
    result = invoke("run", "--target", target, "--draft", draft, "--dry-run")
    assert_one_line_error(result, "--draft/--target", "must share the tokenizer")
    assert invoke("run", "--target", target, "--draft", bundled / "tiny-t5-draft", "--dry-run").exit_code == 0
