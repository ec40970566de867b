"""Peers: the NumPy algorithm of the papers (no cache) and Hugging Face transformers, on the same
weights as specbench: the same tokens at T = 0, the target's distribution at T > 0, and rows
that carry what specbench's rows carry."""

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from specbench.measure import peers
from specbench.model import generate
from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp
from specbench.model.nets import layouts, reference

from conftest import TARGET as CLI_TARGET
from conftest import assert_one_line_error, invoke
from exactness import P_THRESHOLD, chi_square_p, target_marginals


def numpy_models(draft, target):
    return (reference.as_numpy(layouts.as_loaded(draft.params)), draft.config), (
        reference.as_numpy(layouts.as_loaded(target.params)),
        target.config,
    )


@pytest.mark.parametrize("K", [1, 3, 5])
def test_numpy_peer_gives_specbench_tokens_at_T0(pair, K):
    draft, target = pair
    d, t = numpy_models(draft, target)
    rounds = []
    for prompt in ([5, 17, 3], [1], list(range(20, 32))):
        ar, _ = generate.autoregressive(target, prompt, 24, Warp(), 0)
        sd, _ = generate.speculative(draft, target, prompt, 24, K, Warp(), 0)
        np_ar = reference.autoregressive(t, prompt, 24, np.random.default_rng(0))
        np_sd, accepted = reference.speculative(d, t, prompt, 24, K, np.random.default_rng(0))
        assert np_ar == ar.tolist() == sd.tolist() == np_sd
        rounds += accepted
    assert 0 < np.mean(rounds) < K  # the draft is neither always right nor always wrong: both paths ran


def broken_accept_reject(rng, drafts, p, q):
    """Negative control: on rejection, resample from q instead of norm(max(q - p, 0))."""
    out = []
    for t, x in enumerate(drafts):
        if rng.random() < min(1.0, q[t, x] / p[t, x]):
            out.append(x)
            continue
        return out + [reference.sample(rng, q[t])]
    return out + [reference.sample(rng, q[len(drafts)])]


N_FIRST = 3000
"""Samples of the first token, a few seconds of NumPy. Enough: at 3,000 the broken control's
chi-square statistic was 445 on 9 degrees of freedom, where p = 1e-3 is 27.9 (the correct
sampler's p-value 0.75)."""


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True])
def test_numpy_peer_first_token_follows_the_target_at_T1(small_pair, monkeypatch, broken):
    draft, target = small_pair
    d, t = numpy_models(draft, target)
    prompt, warp = [1, 2], Warp(1.0)
    if broken:
        monkeypatch.setattr(reference, "accept_reject", broken_accept_reject)
    rng = np.random.default_rng(7)
    first = [reference.speculative(d, t, prompt, 1, 3, rng, 1.0)[0][0] for _ in range(N_FIRST)]
    p = chi_square_p(np.array(first), target_marginals(target, prompt, warp, 1)[0])
    if broken:
        assert p < P_THRESHOLD, f"the broken sampler passed the chi-square test (p={p:.3g})"
    else:
        assert p > P_THRESHOLD, f"first token is not the target's distribution (p={p:.3g})"


def test_warp_equals_specbench_probs():
    from specbench.model.decode.sampling import probs_by_definition

    logits = np.random.default_rng(0).normal(size=(3, 50)) * 3
    for warp in (Warp(0.0), Warp(1.0), Warp(0.7, top_k=5), Warp(1.3, top_p=0.8), Warp(1.0, 10, 0.5)):
        ours = reference.warp(logits, warp.temperature, warp.top_k, warp.top_p)
        np.testing.assert_allclose(ours, probs_by_definition(logits, warp), atol=1e-6)


def test_layerskip_draft_model_is_the_targets_first_layers(pair):
    _, target = pair
    drafter = drafters.layerskip_drafter(target.config, 1)
    net = peers.draft_model(drafter, None, target)
    assert net.config.n_layer == 1 and net.params["blocks"]["ln_1"]["weight"].shape[0] == 1
    tokens = [4, 9, 2, 7]
    skip, _ = generate.speculative(None, target, tokens, 12, 3, Warp(), 0, drafter=drafter)
    sd, _ = reference.speculative(*numpy_models(net, target), tokens, 12, 3, np.random.default_rng(0))
    assert sd == skip.tolist()


def test_first_difference_names_the_position():
    assert peers.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert peers.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert peers.first_difference([1, 2, 3], [1, 2]) == 2


# ---------------------------------------------------------------------------------------------
# The command line


def test_run_with_the_numpy_peer_writes_a_row_per_implementation(env):
    result = invoke("run", *env, "-n", 8, "--repeats", 2, "--peer", "numpy", "--export-json", "rows.json")
    assert result.exit_code == 0, result.output
    rows = json.load(open("rows.json"))
    assert [r["implementation"] for r in rows] == ["specbench", "numpy"]
    ours, theirs = rows
    for field in (
        "device",
        "git_commit",
        "jax_version",
        "dtype",
        "draft",
        "target",
        "K",
        "seed",
        "prompt_sha",
    ):
        assert theirs[field] == ours[field]
    assert theirs["implementation_version"] == np.__version__
    assert theirs["ar_token_ids"] == theirs["sd_token_ids"] == ours["ar_token_ids"]
    assert theirs["same_as_specbench"] is True and theirs["first_difference"] is None
    assert theirs["ar_over_specbench"] == pytest.approx(theirs["ar_mean_s"] / ours["ar_mean_s"])
    assert len(theirs["ar_times_s"]) == 2
    assert "numpy AR and SD gave the same tokens as specbench" in result.output


@pytest.mark.slow
def test_sweep_with_a_peer_resumes_cell_by_cell(env, tmp_path):
    out = tmp_path / "s.json"
    args = ("sweep", *env, "-n", 6, "--repeats", 1, "-k", "1,2", "--peer", "numpy", "-o", out)
    assert invoke(*args).exit_code == 0
    rows = json.loads(out.read_text())
    assert sorted((r["implementation"], r["K"]) for r in rows) == [
        ("numpy", 1),
        ("numpy", 2),
        ("specbench", 1),
        ("specbench", 2),
    ]
    out.write_text(json.dumps([r for r in rows if not (r["implementation"] == "numpy" and r["K"] == 2)]))
    result = invoke(*args, "--resume")
    assert result.exit_code == 0, result.output
    again = json.loads(out.read_text())
    assert sorted((r["implementation"], r["K"]) for r in again) == sorted(
        (r["implementation"], r["K"]) for r in rows
    )


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (["--peer", "pytorch"], ["--peer", "'pytorch' is not a peer"]),
        (["--peer", "numpy,numpy"], ["--peer", "listed twice"]),
        (["--peer", "numpy", "--drafter", "lookup"], ["--peer", "lookup drafter has no peer"]),
        (["--peer", "numpy", "--batch", "2"], ["--peer", "--batch 1"]),
        (["--peer", "numpy", "--dynamic-K"], ["--peer", "--dynamic-K"]),
        (["--peer", "numpy", "--dtype", "bfloat16"], ["--peer", "float32"]),
    ],
)
def test_peer_flags_that_cannot_work_are_one_line_errors(env, tmp_path, extra, fragments):
    models = env[2:] if "lookup" in extra else env  # lookup drafts without a draft model
    result = invoke("run", *models, "-n", 4, "--export-json", "rows.json", *extra)
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "rows.json").exists() and not (tmp_path / "results").exists()


def test_transformers_without_the_extra_is_one_line_naming_it(env, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    assert_one_line_error(invoke("run", *env, "-n", 4, "--peer", "transformers"), "--peer", "peers extra")


# ---------------------------------------------------------------------------------------------
# transformers, where the peers extra is installed (CI installs it)


@pytest.mark.slow
def test_transformers_peer_gives_specbench_tokens_at_T0(env, model_dirs, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import tempfile

    from specbench.model.checkpoints import weights

    scratch, mkdtemp = [], tempfile.mkdtemp  # the folders of weights saved for the worker...
    monkeypatch.setattr(peers.tempfile, "mkdtemp", lambda **kw: scratch.append(mkdtemp(**kw)) or scratch[-1])

    target = weights.load_model(str(model_dirs / "t"))
    draft = weights.load_model(str(model_dirs / "d"))
    assert target.config == CLI_TARGET
    for drafter, net in ((drafters.model_drafter(draft.config), draft), (None, None)):
        drafter = drafter or drafters.layerskip_drafter(target.config, 1)
        (hf,) = peers.make_peers(["transformers"], drafter, net, target, 1, on_gpu=False)
        weights_saved = [s for s in scratch if "caches" not in s]
        assert weights_saved and not any(Path(s).exists() for s in weights_saved)  # ...gone once loaded
        for prompt, K in (([464, 3290, 318], 2), ([15496, 11, 995, 0, 314, 716], 4)):
            ar, _ = generate.autoregressive(target, prompt, 16, Warp(), 0)
            assert hf.autoregressive(prompt, 16, Warp(), 0)[0] == ar.tolist()
            assert hf.speculative(prompt, 16, K, Warp(), 0)[0] == ar.tolist()
        hf.close()  # torch's compile caches too: no empty specbench-peer-caches-* is left behind
        assert not any(Path(s).exists() for s in scratch)


@pytest.mark.slow
def test_run_with_the_transformers_peer(env):
    pytest.importorskip("transformers")
    result = invoke("run", *env, "-n", 8, "--repeats", 1, "--peer", "transformers", "--export-json", "r.json")
    assert result.exit_code == 0, result.output
    ours, theirs = json.load(open("r.json"))
    assert theirs["implementation"] == "transformers" and "torch" in theirs["implementation_version"]
    assert theirs["same_as_specbench"] is True
    assert {k: theirs[k] for k in ("device", "dtype", "K", "n_tokens")} == {
        k: ours[k] for k in ("device", "dtype", "K", "n_tokens")
    }


# ---------------------------------------------------------------------------------------------
# A peer in a process of its own: nothing of it runs in specbench's process or while it times


def test_a_peer_runs_in_its_own_process_and_is_idle_when_its_call_returns(pair):
    import os
    import time

    from specbench.measure.load import process_cpu_seconds

    draft, target = pair
    (worker,) = peers.make_peers(["numpy"], drafters.model_drafter(draft.config), draft, target, 1, False)
    try:
        assert worker.pid != os.getpid() and worker._process.is_alive()
        tokens, accepted, seconds = worker.speculative([5, 17, 3], 24, 3, Warp(), 0)
        ar, _ = generate.autoregressive(target, [5, 17, 3], 24, Warp(), 0)
        assert tokens == ar.tolist() and len(accepted) > 0 and seconds > 0
        before = process_cpu_seconds(worker.pid)
        time.sleep(0.1)  # settled: in the tenth of a second after a call, the worker uses no CPU
        assert process_cpu_seconds(worker.pid) - before < 0.02
    finally:
        worker.close()
    assert not worker._process.is_alive()


def test_a_peer_that_fails_in_its_worker_is_one_error_naming_it(pair):
    draft, target = pair
    with pytest.raises(peers.PeerError, match="numpy could not start") as e:
        peers.PeerProcess("numpy", {"draft": None})  # a spec its worker cannot build a peer from
    assert e.value.setting == "peer"


def test_a_worker_that_died_between_calls_is_an_error_and_starting_one_keeps_the_signals_blocked(pair):
    # a dead worker's pipe breaks on the next call: that is the peer's failure, never a closed stdout
    # (which ends specbench quietly with exit 0); and multiprocessing's resource tracker, which
    # unblocks SIGINT and SIGTERM as it starts, must leave __main__'s mask as it was
    draft, target = pair
    drafter = drafters.model_drafter(draft.config)
    blocked = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        (worker,) = peers.make_peers(["numpy"], drafter, draft, target, 1, False)
        assert blocked <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    try:
        worker.autoregressive([5, 17], 4, Warp(), 0)
        worker._process.kill()
        worker._process.join()
        with pytest.raises(peers.PeerError, match="numpy failed: its worker process ended") as e:
            worker.autoregressive([5, 17], 4, Warp(), 0)
        assert e.value.setting == "peer"
    finally:
        worker.close()


def test_a_dry_run_checks_its_peers_and_starts_none(env, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a dry run started a peer's worker")

    monkeypatch.setattr(peers, "PeerProcess", refuse)
    for command in (["run", "-n", 4], ["sweep", "-n", 4, "--K", "1,2"]):
        result = invoke(*command, *env, "--peer", "numpy", "--dry-run")
        assert result.exit_code == 0, result.output
    assert_one_line_error(
        invoke("run", *env, "--peer", "numpy", "--batch", 2, "--dry-run"), "--peer", "--batch 1"
    )


@pytest.mark.parametrize("parent_gone", ["before ready", "while waiting"])
def test_a_worker_whose_parent_has_gone_ends_quietly_and_removes_what_it_wrote(
    tmp_path, monkeypatch, parent_gone
):
    """Ctrl-C or SIGTERM ends specbench at once (os._exit): the worker must then end at its next
    use of the pipe without a traceback, and remove the weights saved for it and torch's caches."""
    import multiprocessing
    import tempfile

    from specbench.measure import peer_worker

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scratch = tmp_path / "specbench-peer-weights"
    (scratch / "target").mkdir(parents=True)
    parent, child = multiprocessing.Pipe()
    built = []

    class Peer:
        version = "1"

    def make(name, spec):
        if parent_gone == "before ready":
            parent.close()
        built.append(name)
        return Peer()

    monkeypatch.setattr(peer_worker, "make", make)
    if parent_gone == "while waiting":
        parent.close()
    peer_worker.serve(child, "transformers", {"scratch": str(scratch)})  # returns, raises nothing
    assert built == ["transformers"]
    assert list(tmp_path.iterdir()) == []  # the weights and the compile caches are gone
