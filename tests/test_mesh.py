"""A target split over a device mesh (nets/mesh.py): on 4 host devices, in a process of its own
(mesh_worker.py), sharded logits equal unsharded ones (GPT-2, padded GPT-2, the Llama family and
T5, tp 2 and 4), SD = AR at T = 0 with drafts accepted and rejected, a draft placed on a device of
its own gives the one-program round's tokens, the split step pays the collectives counted, the
chi-square tests (first tokens, every role) pass with their broken controls failing, and `run`,
`sweep` and `roofline` record the mesh, the placement and the communication term. Here: the pieces
that need one device only."""

import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model.nets import mesh
from specbench.model.nets.gpt2 import GPT2Config, ungroup


@pytest.mark.slow
@pytest.mark.first  # a worker process of about 3 minutes: started before the other files
def test_four_host_devices_run_the_sharded_target_exactly():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    worker = Path(__file__).resolve().parent / "mesh_worker.py"
    done = subprocess.run([sys.executable, str(worker)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    oks = [line for line in done.stdout.splitlines() if line.startswith("ok")]
    # logits, SD = AR: 3 nets (GPT-2, Llama, Qwen3) x 2 meshes; 3 placed drafts; padded heads; T5;
    # collectives; chi-square; run; roofline
    assert len(oks) == 6 + 6 + 3 + 1 + 1 + 1 + 1 + 1 + 1, done.stdout


@pytest.mark.slow
def test_two_processes_joined_by_jax_distributed_give_one_process_s_tokens(model_dirs, tmp_path):
    """`run --mesh tp=2` over 2 processes of one CPU device each (jax.distributed, gloo) decodes the
    tokens one process with 2 host devices decodes; process 0 alone writes its row."""
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        "--target",
        model_dirs / "t",
        "--draft",
        model_dirs / "d",
        "--mesh",
        "tp=2",
        "-n",
        "8",
        "--K",
        "3",
    ]
    args = [sys.executable, "-m", "specbench", "run", *map(str, args), "--repeats", "1", "--no-save"]
    flags = os.environ.get("XLA_FLAGS", "")
    joined = ["--coordinator", f"127.0.0.1:{port}", "--processes", "2"]
    env = dict(os.environ, XLA_FLAGS=flags)
    procs = [
        subprocess.Popen(
            [*args, "--export-json", str(tmp_path / f"p{i}.json"), *joined, "--process-id", str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not (tmp_path / "p1.json").exists()  # the follower writes nothing
    one = dict(os.environ, XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=2")
    single = subprocess.run(
        [*args, "--export-json", str(tmp_path / "one.json")], env=one, capture_output=True, text=True
    )
    assert single.returncode == 0, single.stdout + single.stderr
    (two,), (ref,) = (json.loads((tmp_path / f).read_text()) for f in ("p0.json", "one.json"))
    assert two["devices"] == ref["devices"] == 2 and two["mesh"] == "tp=2"
    assert two["ar_token_ids"] == ref["ar_token_ids"] and two["sd_token_ids"] == ref["sd_token_ids"]


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


def test_the_process_flags_go_together_or_are_one_line(env):
    from conftest import assert_one_line_error, invoke

    joined = ["--coordinator", "127.0.0.1:9"]
    assert_one_line_error(invoke("run", *env, *joined), "--coordinator/--processes/--process-id", "all three")
    many = [*joined, "--processes", "2"]
    assert_one_line_error(
        invoke("run", *env, *many, "--process-id", "2", "--mesh", "tp=2"), "--process-id", "0..1"
    )
    assert_one_line_error(invoke("run", *env, *many, "--process-id", "0"), "--processes", "--mesh tp=N")
