"""The mesh checks, run by test_mesh.py in a process of its own: JAX reads the host device count
(XLA_FLAGS=--xla_force_host_platform_device_count=4) once, at its start, as a user sets it.

Each check prints one line starting "ok"; a failed one raises, and the process exits non-zero.
"""

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_llama import SMALL, llama_model  # noqa: E402

from specbench.model.decode import drafters  # noqa: E402
from specbench.model.generate import autoregressive, speculative  # noqa: E402
from specbench.model.nets import mesh, network  # noqa: E402
from specbench.model.nets.gpt2 import GPT2Config  # noqa: E402
from specbench.model.nets.network import Model  # noqa: E402

from conftest import invoke, random_model  # noqa: E402
from exactness import SMALL_D, SMALL_T, assert_follows_target, noisy_copy  # noqa: E402


def sharded(model: Model, tp: int) -> Model:
    return dataclasses.replace(
        model, params=network.shard(model.params, model.config, mesh.make_mesh(mesh.MeshSpec(tp)))
    )


def replicated(model: Model, like: Model) -> Model:
    return dataclasses.replace(model, params=mesh.replicate(model.params, mesh.as_weights(like.params).mesh))


def logits_equal_unsharded(gpt2_target: Model, llama_target: Model) -> None:
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70, 12], jnp.int32)
    for model in (gpt2_target, llama_target):
        step = jax.jit(lambda p, c, t, config=model.config: network.step(p, c, t, 0, config))
        cache = network.init_cache(model.config, 32, jnp.float32)
        whole, _ = step(model.params, cache, tokens)
        for tp in (2, 4):
            split = sharded(model, tp)
            logits, cache_out = step(split.params, cache, tokens)
            np.testing.assert_allclose(logits, whole, atol=1e-5)
            assert cache_out["k"].sharding.spec[1] == mesh.AXIS  # the cache split by head
            gap = float(jnp.max(jnp.abs(logits - whole)))
            print(f"ok logits {type(model.config).__name__} tp={tp}: {gap:.1e}")


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
        print(f"ok SD = AR tp={tp} {type(target.config).__name__}")


def follows_target_sharded() -> None:
    draft = random_model(SMALL_D, 11, "small-draft", scale=30)
    target = sharded(random_model(SMALL_T, 12, "small-target", scale=30), 2)
    assert_follows_target(replicated(draft, target), target, [3, 7, 1])
    print("ok chi-square tp=2 with its broken control failing")


def command_line() -> None:
    with tempfile.TemporaryDirectory() as out:
        row_file = Path(out) / "row.json"
        args = [
            "--target",
            "random-target",
            "--draft",
            "random-draft",
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
    for flags, words in (
        (["--mesh", "tp=3"], "do not split 3 ways"),
        (["--mesh", "tp=8"], "needs 8 devices"),
        (["--mesh", "dp=2"], "must be tp=N"),
        (["--mesh", "tp=2", "--kernels", "cpu"], "XLA's products"),
    ):
        result = invoke("run", "--target", "random-target", "--draft", "random-draft", *flags, "--dry-run")
        assert result.exit_code == 2 and words in result.output, (flags, result.output)
    print("ok run --mesh tp=2 records its mesh; bad meshes are one line each")


def roofline_per_device() -> None:
    """roofline --mesh tp=2 times a split step, and counts one device's bytes and FLOPs: less than
    the whole model's, more than half (the embeddings and the head are replicated)."""
    rows = {}
    with tempfile.TemporaryDirectory() as out:
        for split in ([], ["--mesh", "tp=2"]):
            path = Path(out) / f"roof{len(split)}.json"
            args = ["-m", "random-target", "--random-init", "--K", "1", "--iters", "2", "--context", "32"]
            result = invoke("roofline", *args, *split, "--export-json", path)
            assert result.exit_code == 0, result.output
            rows[bool(split)] = json.loads(path.read_text())[0]
    whole, split = rows[False], rows[True]
    assert split["mesh"] == "tp=2" and whole["mesh"] is None
    assert whole["bytes_per_step"] / 2 < split["bytes_per_step"] < whole["bytes_per_step"]
    assert whole["flops_per_step"] / 2 < split["flops_per_step"] < whole["flops_per_step"]
    print("ok roofline --mesh tp=2: one device's bytes and FLOPs")


if __name__ == "__main__":
    assert len(jax.devices()) == 4, jax.devices()
    gpt2_target = random_model(
        GPT2Config(n_layer=2, n_head=4, n_embd=32, n_ctx=128, n_vocab=97), 3, "t", scale=5
    )
    llama_target = llama_model(dataclasses.replace(SMALL, n_kv_head=4), 0, "l", 8.0)
    logits_equal_unsharded(gpt2_target, llama_target)
    sd_equals_ar_sharded(noisy_copy(gpt2_target, 0.5, 4), gpt2_target)
    llama_draft = Model(
        "ld", llama_target.config, jax.tree_util.tree_map(lambda a: a * 1.05, llama_target.params), "random"
    )
    sd_equals_ar_sharded(llama_draft, llama_target)
    follows_target_sharded()
    command_line()
    roofline_per_device()
