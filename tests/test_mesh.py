"""A target split over a device mesh (nets/mesh.py): on 4 host devices, in a process of its own
(mesh_worker.py), sharded logits equal unsharded ones (GPT-2 and the Llama family, tp 2 and 4),
SD = AR at T = 0 with drafts accepted and rejected, the chi-square test passes with its broken
control failing, and `run --mesh` records its mesh. Here: the pieces that need one device only."""

import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model.nets import mesh
from specbench.model.nets.gpt2 import GPT2Config, ungroup


def test_four_host_devices_run_the_sharded_target_exactly():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    worker = Path(__file__).resolve().parent / "mesh_worker.py"
    done = subprocess.run([sys.executable, str(worker)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    oks = [line for line in done.stdout.splitlines() if line.startswith("ok")]
    assert len(oks) == 4 + 4 + 1 + 1, done.stdout  # logits and SD = AR: 2 nets x 2 meshes; chi-square; run


def test_the_regrouped_columns_are_undone_by_the_step():
    """mesh.grouped puts each device's heads' q, k and v together; gpt2.ungroup takes them apart
    again, and with one group both are the identity."""
    config = GPT2Config(n_layer=1, n_head=4, n_embd=8, n_ctx=8, n_vocab=5)
    qkv = jnp.arange(3 * 8, dtype=jnp.float32)[None]  # one row: q 0..7, k 8..15, v 16..23
    plain = ungroup(qkv, config.n_head, 1)
    for tp in (1, 2, 4):
        regrouped = mesh.grouped(qkv, tp, (8, 8, 8))
        np.testing.assert_array_equal(ungroup(regrouped, config.n_head, tp), plain)
    np.testing.assert_array_equal(
        mesh.grouped(qkv, 2, (8, 8, 8))[0, :12], [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]
    )


def test_mesh_specs_are_parsed_or_refused():
    assert mesh.MeshSpec.parse("tp=4") == mesh.MeshSpec(4) and str(mesh.MeshSpec(2)) == "tp=2"
    for text in ("tp=0", "tp=x", "dp=2", "4"):
        with pytest.raises(ValueError, match="tp=N"):
            mesh.MeshSpec.parse(text)
    with pytest.raises(ValueError, match="do not split 3 ways"):
        mesh.check_divides(GPT2Config(n_layer=1, n_head=4, n_embd=8), 3)
