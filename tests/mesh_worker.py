"""The mesh checks, run by test_mesh.py in a process of its own: JAX reads the host device count
(XLA_FLAGS=--xla_force_host_platform_device_count=4) once, at its start, as a user sets it.

Each check prints one line starting "ok"; a failed one raises, and the process exits non-zero.
"""

import dataclasses
import json
import re
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_llama import SMALL, llama_model  # noqa: E402
from test_t5 import CONFIG as T5_CONFIG  # noqa: E402
from test_t5 import t5_model  # noqa: E402

from specbench.measure import collectives  # noqa: E402
from specbench.model.decode import drafters, placed  # noqa: E402
from specbench.model.decode.sampling import Warp, accept_reject  # noqa: E402
from specbench.model.generate import autoregressive, speculative  # noqa: E402
from specbench.model.nets import mesh, network  # noqa: E402
from specbench.model.nets.gpt2 import GPT2Config  # noqa: E402
from specbench.model.nets.network import Model  # noqa: E402

from conftest import invoke, make_small_target, random_model, save_model_dirs  # noqa: E402
from exactness import (  # noqa: E402
    P_THRESHOLD,
    SMALL_D,
    SMALL_T,
    assert_follows_target,
    broken_accept_reject,
    noisy_copy,
    role_p_values,
    round_samples,
)


def sharded(model: Model, tp: int) -> Model:
    return network.shard(model, mesh.make_mesh(mesh.MeshSpec(tp)))


def replicated(model: Model, like: Model) -> Model:
    return dataclasses.replace(model, params=mesh.replicate(model.params, mesh.split_over(like.params)))


def logits_equal_unsharded(*targets: Model) -> None:
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70, 12], jnp.int32)
    for model in targets:
        step = jax.jit(lambda p, c, t, config=model.config: network.step(p, c, t, 0, config))
        cache = network.init_cache(model.config, 32, jnp.float32)
        whole, _ = step(model.params, cache, tokens)
        for tp in (2, 4):
            split = sharded(model, tp)
            logits, cache_out = step(split.params, cache, tokens)
            np.testing.assert_allclose(logits, whole, atol=1e-5)
            assert cache_out["k"].sharding.spec[1] == mesh.AXIS  # the cache split by head
            gap = float(jnp.max(jnp.abs(logits - whole)))
            print(f"ok logits {type(model.config).__name__} {model.name} tp={tp}: {gap:.1e}")


def sd_equals_ar_sharded(draft: Model, target: Model) -> None:
    prompt, n = [5, 17, 2, 88, 40, 3, 5, 17], 20
    ar, _ = autoregressive(target, prompt, n)
    for tp in (2, 4):
        split = sharded(target, tp)
        ar_split, _ = autoregressive(split, prompt, n)
        np.testing.assert_array_equal(ar_split, ar)
        for name, drafter, d in (
            ("model", drafters.model_drafter(draft.config), replicated(draft, split)),
            ("layerskip", drafters.layerskip_drafter(target.config, 1), None),
        ):
            sd, stats = speculative(d, split, prompt, n, 3, drafter=drafter)
            np.testing.assert_array_equal(sd, ar, err_msg=f"{name} tp={tp}")
            assert 0 < stats.alpha < 1, (name, tp, stats.alpha)
        batch, _ = speculative(replicated(draft, split), split, [prompt, prompt[:5]], n, 3)
        np.testing.assert_array_equal(batch[0], ar)
        print(f"ok SD = AR tp={tp} {type(target.config).__name__} {target.name}")


def padded_heads(target: Model) -> None:
    """A GPT-2 of 3 heads split 2 and 4 ways pads them to 4 (gpt2.pad_heads): the same logits, and
    SD = AR at T = 0 on the padded target."""
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70, 12], jnp.int32)
    step = jax.jit(
        lambda p, t, config: network.step(p, network.init_cache(config, 32, jnp.float32), t, 0, config)[0],
        static_argnames="config",
    )
    whole = step(target.params, tokens, target.config)
    prompt, n = [5, 17, 2, 88, 40, 3, 5, 17], 20
    ar, _ = autoregressive(target, prompt, n)
    draft = noisy_copy(target, 0.5, 4)
    for tp in (2, 4):
        split = sharded(target, tp)
        assert split.config.heads == 4 and split.config.n_head == 3, split.config
        np.testing.assert_allclose(step(split.params, tokens, split.config), whole, atol=1e-5)
        sd, stats = speculative(replicated(draft, split), split, prompt, n, 3)
        np.testing.assert_array_equal(sd, ar, err_msg=f"padded tp={tp}")
        assert 0 < stats.alpha < 1, stats.alpha
    print("ok padded heads: 3 heads as 4 at tp=2 and 4, the same logits and SD = AR")


def t5_sharded() -> None:
    """A T5 split 2 and 4 ways (its encoder and decoder): the decoder step's logits equal the
    unsplit ones, and SD = AR at T = 0 with a replicated T5 draft, drafts accepted and rejected."""
    target = t5_model(T5_CONFIG, 1, "t5-target", scale=2.0)
    rng = np.random.default_rng(4)
    noisy = lambda a: a + 0.3 * jnp.std(a) * jnp.asarray(rng.normal(size=a.shape), a.dtype)
    draft = Model("t5-draft", T5_CONFIG, jax.tree_util.tree_map(noisy, target.params), "random")
    src, n = [60, 3, 3, 17], 14
    buf = jnp.asarray(src + [0] * 12, jnp.int32)
    step = jax.jit(
        lambda p, t: network.step(p, network.start_cache(p, buf, len(src), T5_CONFIG, 16), t, 1, T5_CONFIG)[0]
    )
    tokens = jnp.asarray([0, 7, 3], jnp.int32)
    whole, (ar, _) = step(target.params, tokens), autoregressive(target, src, n)
    for tp in (2, 4):
        split = sharded(target, tp)
        assert mesh.name(split.params) == f"tp={tp}"
        np.testing.assert_allclose(step(split.params, tokens), whole, atol=1e-5)
        np.testing.assert_array_equal(autoregressive(split, src, n)[0], ar)
        sd, stats = speculative(replicated(draft, split), split, src, n, 3)
        np.testing.assert_array_equal(sd, ar, err_msg=f"t5 tp={tp}")
        assert 0 < stats.alpha < 1, stats.alpha
    print("ok T5 split 2 and 4 ways: the same logits, SD = AR")


def collectives_counted() -> None:
    """The compiled split step of a one-layer GPT-2 and of a T5 decoder block pays exactly
    collectives.all_reduces(config) collectives, all-reduces of [n, width], and nothing else; the
    collectives alone take time on a mesh, none on one device."""
    kinds = r"(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
    gpt = random_model(GPT2Config(n_layer=1, n_head=4, n_embd=32, n_ctx=64, n_vocab=97), 3, "g1")
    t5_one = t5_model(dataclasses.replace(T5_CONFIG, n_decoder_layer=1), 1, "t5-1")
    tokens = jnp.asarray([5, 9, 1, 44, 3], jnp.int32)
    for model in (gpt, t5_one):
        split, c = sharded(model, 2), model.config
        cache = jax.jit(lambda p: network.start_cache(p, jnp.arange(8), 8, c, 16))(split.params)
        step = jax.jit(lambda p, cache, t, c=c: network.step(p, cache, t, 0, c))
        text = step.lower(split.params, cache, tokens).compile().as_text()
        found = re.findall(rf"= (\S+) {kinds}\(", text)
        assert found == [(f"f32[5,{collectives.width(c)}]{{1,0}}", "all-reduce")] * collectives.all_reduces(
            c
        ), found
        assert collectives.comm_seconds(split, 5, repeats=2).min() > 0
        assert not collectives.comm_seconds(model, 5, repeats=2).any()
    print("ok the split step's collectives: all_reduces of [n, width], as counted")


def placed_draft(draft: Model, target: Model) -> None:
    """A draft on a device of its own (3, beside a target split over devices 0 and 1), on one
    device of the target's mesh (1), and beside an unsplit target (on 2): each round two programs
    (placed.py), the tokens the one-program round gives at T = 0 (AR's, drafts accepted and
    rejected) and at T = 1 (the same keys, so the same samples: that round's chi-square tests hold
    for this one), through the device loop's and the host loop's drivers."""
    prompt, n, devices = [5, 17, 2, 88, 40, 3, 5, 17], 16, jax.devices()
    on_device = lambda model, i: dataclasses.replace(model, params=jax.device_put(model.params, devices[i]))
    split = sharded(target, 2)
    for t, i in ((split, 3), (split, 1), (target, 2)):
        d, together = on_device(draft, i), replicated(draft, t) if t is split else draft
        assert placed.apart(d.params, t.params) and not placed.apart(together.params, t.params)
        ar, _ = autoregressive(t, prompt, n)
        for warp in (Warp(), Warp(1.0)):
            alone, stats = speculative(d, t, prompt, n, 3, warp, seed=7)
            np.testing.assert_array_equal(alone, speculative(together, t, prompt, n, 3, warp, seed=7)[0])
            host, _ = speculative(d, t, prompt, n, 3, warp, seed=7, device_loop=False)
            np.testing.assert_array_equal(host, alone)
            if warp.temperature == 0:
                np.testing.assert_array_equal(alone, ar)
                assert 0 < stats.alpha < 1, stats.alpha
        print(
            f"ok a draft placed on device {i}, the target on {sorted(x.id for x in placed.devices(t.params))}"
        )
    # a head restricted to some tokens is made after the draft is placed: it goes there too
    restricted = dataclasses.replace(drafters.model_drafter(draft.config), vocab=48)
    together = speculative(replicated(draft, split), split, prompt, n, 3, drafter=restricted)[0]
    np.testing.assert_array_equal(
        speculative(on_device(draft, 3), split, prompt, n, 3, drafter=restricted)[0], together
    )


def follows_target_sharded() -> None:
    """At T = 1 on a target split 2 ways: SD's first tokens follow the target's exact marginals, and
    every role of a round (each draft position, the bonus, the token after a bonus or a rejection)
    follows the target given its own prefix (the oracle: the unsplit target's forward), each with a
    broken verdict that the test catches."""
    draft, whole = random_model(SMALL_D, 11, "small-draft", scale=30), make_small_target()
    target = sharded(whole, 2)
    assert_follows_target(replicated(draft, target), target, [3, 7, 1])
    draft_params = replicated(noisy_copy(whole, 0.3, 13), target).params
    drafter, warp, prompt = drafters.model_drafter(SMALL_T), Warp(1.0), [3, 7, 1]
    verdicts = (accept_reject, broken_accept_reject)
    exact, broken = round_samples(draft_params, target, prompt, warp, 3, drafter, verdicts)
    p_values = role_p_values(whole, prompt, warp, *exact, 3)
    assert {"draft 1", "draft 2", "draft 3", "bonus", "after bonus", "after rejection"} <= set(p_values)
    assert min(p_values.values()) > P_THRESHOLD, p_values
    assert min(role_p_values(whole, prompt, warp, *broken, 3).values()) < P_THRESHOLD
    print("ok chi-square tp=2, first tokens and every role, with their broken controls failing")


def command_line(models: Path) -> None:
    with tempfile.TemporaryDirectory() as out:
        row_file = Path(out) / "row.json"
        args = [
            "--target",
            models / "t",
            "--draft",
            models / "d",
            "-n",
            "8",
            "--repeats",
            "1",
            "--no-save",
        ]
        result = invoke("run", *args, "--mesh", "tp=2", "--export-json", row_file)
        assert result.exit_code == 0, result.output
        (row,) = json.loads(row_file.read_text())
        assert row["mesh"] == "tp=2" and row["devices"] == 2 and row["identical"] is True, row
        assert (
            0 < row["t_comm_target_s"] < row["t_target_s"] and 0 < row["t_comm_verify_s"] < row["t_verify_s"]
        )
        assert "collectives on tp=2, timed alone" in result.output and row["draft_device"] is None
        result = invoke("run", *args, "--mesh", "tp=2", "--draft-device", "3", "--export-json", row_file)
        assert result.exit_code == 0, result.output
        (row,) = json.loads(row_file.read_text())
        assert row["draft_device"] == 3 and row["identical"] is True and row["t_round_s"] > 0, row
        sweep = [
            "sweep",
            *args[:4],
            "-n",
            "8",
            "--repeats",
            "1",
            "--K",
            "4",
            "--mesh",
            "tp=2",
        ]  # run's programs
        result = invoke(*sweep, "--draft-device", "3", "-o", Path(out) / "sweep.json")
        assert result.exit_code == 0, result.output
        rows = json.loads((Path(out) / "sweep.json").read_text())
        assert [(r["K"], r["draft_device"], r["identical"]) for r in rows] == [(4, 3, True)], rows
    for flags, words in (
        (["--mesh", "tp=3"], "do not split 3 ways"),
        (["--mesh", "tp=8"], "needs 8 devices"),
        (["--mesh", "dp=2"], "must be tp=N"),
        (["--mesh", "tp=2", "--kernels", "cpu"], "XLA's products"),
        (["--draft-device", "4"], "JAX sees 4"),
        (["--draft-device", "0"], "is the target's"),
        (["--draft-device", "1", "--drafter", "lookup"], "--drafter model only"),
        (["--draft-device", "1", "--batch", "2"], "one chain of one sequence"),
    ):
        draft = [] if "lookup" in flags else ["--draft", "random-draft"]
        result = invoke("run", "--target", "random-target", *draft, *flags, "--dry-run")
        assert result.exit_code == 2 and words in result.output, (flags, result.output)
    print("ok run --mesh tp=2 records its mesh; bad meshes are one line each")


def roofline_per_device(models: Path) -> None:
    """roofline --mesh tp=2 times a split step, and counts one device's bytes and FLOPs: less than
    the whole model's, more than half (the embeddings and the head are replicated)."""
    rows = {}
    with tempfile.TemporaryDirectory() as out:
        for split in ([], ["--mesh", "tp=2"]):
            path = Path(out) / f"roof{len(split)}.json"
            args = ["-m", models / "t", "--K", "1", "--iters", "2", "--context", "32"]
            result = invoke("roofline", *args, *split, "--export-json", path)
            assert result.exit_code == 0, result.output
            rows[bool(split)] = json.loads(path.read_text())[0]
    whole, split = rows[False], rows[True]
    assert split["mesh"] == "tp=2" and whole["mesh"] is None
    assert 0 < split["comm_share"] < 1 and whole["t_comm_s"] is None
    assert whole["bytes_per_step"] / 2 < split["bytes_per_step"] < whole["bytes_per_step"]
    assert whole["flops_per_step"] / 2 < split["flops_per_step"] < whole["flops_per_step"]
    print("ok roofline --mesh tp=2: one device's bytes and FLOPs")


if __name__ == "__main__":
    assert len(jax.devices()) == 4, jax.devices()
    gpt2_target = random_model(
        GPT2Config(n_layer=2, n_head=4, n_embd=32, n_ctx=128, n_vocab=97), 3, "t", scale=5
    )
    llama_target = llama_model(dataclasses.replace(SMALL, n_kv_head=4), 0, "l", 8.0)
    # Qwen3: norms over each head's queries and keys, a head_dim of its own (16, not 32 / 4)
    qwen3 = dataclasses.replace(
        SMALL, n_kv_head=4, qkv_bias=False, family="qwen3", qk_norm=True, explicit_head_dim=16
    )
    qwen3_target = llama_model(qwen3, 0, "q3", 8.0)
    logits_equal_unsharded(gpt2_target, llama_target, qwen3_target)
    sd_equals_ar_sharded(noisy_copy(gpt2_target, 0.5, 4), gpt2_target)
    placed_draft(noisy_copy(gpt2_target, 0.5, 4), gpt2_target)
    llama_draft = Model(
        "ld", llama_target.config, jax.tree_util.tree_map(lambda a: a * 1.05, llama_target.params), "random"
    )
    sd_equals_ar_sharded(llama_draft, llama_target)
    sd_equals_ar_sharded(noisy_copy(qwen3_target, 0.05, 4), qwen3_target)  # alpha 0.37 unsplit
    padded_heads(
        random_model(GPT2Config(n_layer=2, n_head=3, n_embd=24, n_ctx=128, n_vocab=97), 5, "p", scale=5)
    )
    t5_sharded()
    collectives_counted()
    follows_target_sharded()
    with tempfile.TemporaryDirectory() as models:  # conftest's small pair, as `model_dirs` saves it
        command_line(save_model_dirs(Path(models)))
        roofline_per_device(Path(models))
