"""Shared fixtures: small random GPT-2s made on the fly, and an independent NumPy reference."""

import gc
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compiling, not running, is most of the suite's time (XLA:CPU spends ~20 ms per fused kernel).
# The tests time nothing, so they compile without LLVM optimisation and with XLA's older loop
# emitters: a speculative-decoding program compiles in 1.7 s instead of 5.7 s on the 2-core CPU,
# to the same semantics. The tool itself keeps XLA's defaults.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

from specbench.cli.main import cli
from specbench.model.checkpoints import hf_layout, weights
from specbench.model.nets import reference
from specbench.model.nets.gpt2 import GPT2Config, init_params
from specbench.model.nets.network import Model


def random_model(
    config: GPT2Config, seed: int, name: str = "m", scale: float = 1.0, bias_scale: float = 0.02
) -> Model:
    """A GPT-2 with random weights and non-zero biases and norms (so every tensor matters).

    scale > 1 multiplies the weight matrices: sharper, more context-dependent predictions than
    GPT-2's tiny init gives, so greedy decoding does not just repeat one token.
    """
    params = init_params(config, seed)
    rng = np.random.default_rng(seed + 1000)

    def perturb(path, x):
        names = [getattr(k, "key", "") for k in path]
        is_matrix = names[0] in ("wte", "wpe") or (
            "weight" in names and names[0] == "blocks" and names[1] in ("attn", "mlp")
        )
        # GPT-2's init leaves biases at 0 and norm gains at 1; perturb them so a mix-up shows
        return x * (scale if is_matrix else 1.0) + jnp.asarray(bias_scale * rng.normal(size=x.shape), x.dtype)

    params = jax.tree_util.tree_map_with_path(perturb, params)
    return Model(name, config, params, "random")


@pytest.fixture(autouse=True)
def unwrapped_output(monkeypatch):
    """specbench's output is never wrapped under test: a phrase after a long temporary path stays on
    one line whatever $TMPDIR is (console.piped_width reads COLUMNS; a test's subprocesses inherit
    it). Set per test, not for the session, so that pytest's own lines keep the terminal's width."""
    monkeypatch.setenv("COLUMNS", "100000")


CACHE = "JAX_COMPILATION_CACHE_DIR"
CACHE_KEY = pytest.StashKey[str]()  # the directory the run's first process made, to remove at the end


def pytest_configure(config):
    """One persistent XLA compilation cache for the whole run: its two xdist workers and the
    subprocesses the tests start (they inherit the environment) load a program another has compiled
    instead of compiling it again. A run's cache starts empty and is removed when the run ends."""
    if not hasattr(config, "workerinput") and CACHE not in os.environ:  # the run's first process
        os.environ[CACHE] = tempfile.mkdtemp(prefix="specbench-tests-xla-")
        config.stash[CACHE_KEY] = os.environ[CACHE]
    # every program is cached, however small. (A size limit would make JAX lock the cache around
    # each read and write, but its bookkeeping made the whole suite slower.)
    settings = {
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    for name, value in settings.items():
        os.environ[name.upper()] = str(value)
        jax.config.update(name, value)
    jax.config.update("jax_compilation_cache_dir", os.environ.get(CACHE))


def pytest_collection_modifyitems(config, items):
    """The order the two xdist workers take the files in (pyproject.toml: --dist loadfile, and
    --no-loadscope-reorder so this order holds): the files marked `first` (a worker process of
    minutes, test_mesh.py) before the others, then the others by their number of tests, most first,
    as xdist would order them. Started last, the mesh worker ran alone for its 3 minutes while the
    other worker had finished (docs/internals.md)."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    first = lambda tests: any(t.get_closest_marker("first") for t in tests)
    order = sorted(files.values(), key=lambda tests: (not first(tests), -len(tests)))
    items[:] = [item for tests in order for item in tests]


CHECKOUT_RESULTS = Path(__file__).resolve().parent.parent / "results"
BEFORE_KEY = pytest.StashKey[set]()


def pytest_sessionstart(session):
    session.config.stash[BEFORE_KEY] = set(CHECKOUT_RESULTS.glob("*"))


def pytest_sessionfinish(session, exitstatus):
    """The tests write their rows into temporary folders (the `env` fixture), never into the
    checkout's results/: a file that appears there during the run fails it, named."""
    if hasattr(session.config, "workerinput"):
        return  # the controller checks once, after every worker has finished
    written = sorted(set(CHECKOUT_RESULTS.glob("*")) - session.config.stash[BEFORE_KEY])
    if written:
        print(f"\nerror: the tests wrote into the checkout's results/: {[p.name for p in written]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    if CACHE_KEY in config.stash:
        shutil.rmtree(config.stash[CACHE_KEY], ignore_errors=True)


@pytest.fixture(autouse=True, scope="module")
def fresh_jax_caches():
    """Drop the compiled programs and traces of each test module when it ends. Kept for the whole
    session they slowed every later test 2-5x (the same test took 36 s late in the suite, 7 s
    alone), and no module reuses another's programs in memory (pytest_configure's persistent
    cache still loads them from disk)."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="module")
def shared():
    """shared(name, make): make()'s result, made by the first test of the module that asks for
    name and kept for the others (an exact sampler's draws and its broken control's, drawn by one
    program)."""
    made = {}
    return lambda name, make: made[name] if name in made else made.setdefault(name, make())


@pytest.fixture(scope="module")
def target():
    """The suite's usual target (exactness.TARGET, 97 tokens), sharp enough (scale 20) for greedy
    text that does not just repeat one token."""
    from exactness import TARGET

    return random_model(TARGET, 0, "target", scale=20)


@pytest.fixture(scope="module")
def pair():
    """A draft that agrees with its target often, not always (a noisy copy of it)."""
    from exactness import TARGET, noisy_copy

    target = random_model(TARGET, 3, "t", scale=5)
    return noisy_copy(target, 0.5, 4), target


def make_small_target():
    """small_pair's target (12 tokens), for tests that need it without its draft."""
    from exactness import SMALL_T

    return random_model(SMALL_T, 12, "small-target", scale=30)


@pytest.fixture(scope="module")
def small_pair():
    """A draft and a target over a 12-token vocabulary: small enough to enumerate the target's
    exact distribution for the chi-square tests (exactness.py)."""
    from exactness import SMALL_D

    return random_model(SMALL_D, 11, "small-draft", scale=30), make_small_target()


TINY = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=64, n_vocab=97)


@pytest.fixture(scope="session")
def tiny_model():
    return random_model(TINY, 0, "tiny")


def numpy_gpt2(params, tokens, config: GPT2Config) -> np.ndarray:
    """The NumPy reference forward (reference.py, written from the paper's equations, independent
    of gpt2.py), in float64."""
    return reference.forward(reference.as_numpy(params, np.float64), tokens, config)


# ---------------------------------------------------------------------------------------------
# The command line: small models on disk, temporary folders, one-line errors

# GPT-2's vocabulary, so the real tokenizer's ids fit; tiny otherwise
TARGET = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=128, n_vocab=50257)
DRAFT = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=50257)


def save_model_dirs(root: Path) -> Path:
    """The command line's small models, saved in the HF layout under root: t (TARGET), d (DRAFT)
    and small-vocab (1,000 tokens)."""
    hf_layout.save(root / "t", random_model(TARGET, 0, scale=10).params, TARGET)
    hf_layout.save(root / "d", random_model(DRAFT, 1, scale=10).params, DRAFT)
    small = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=1000)
    hf_layout.save(root / "small-vocab", random_model(small, 2).params, small)
    return root


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return save_model_dirs(tmp_path_factory.mktemp("weights"))


BUNDLED = Path(__file__).resolve().parent.parent / "gpt2_weights"


@pytest.fixture
def env(model_dirs, tmp_path, monkeypatch):
    """Weights and results in temporary folders; returns the --draft/--target arguments."""
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "gpt2_weights"))
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path / "results"))
    (tmp_path / "gpt2_weights").mkdir()
    for name in weights.BUNDLED_PAIR:  # the default pair, as a checkout has it
        (tmp_path / "gpt2_weights" / name).symlink_to(BUNDLED / name)
    monkeypatch.chdir(tmp_path)
    return ["--draft", str(model_dirs / "d"), "--target", str(model_dirs / "t")]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for f in fragments:
        assert f in lines[0], lines[0]


def tiny_tokenizer_json(vocab_size: int) -> str:
    """A byte-level BPE of vocab_size tokens trained on one sentence, as tokenizer.json text: a
    checkpoint's own tokenizer for the loopback downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["the old house at the end of the lane"] * 20, trainer)
    return bpe.to_str()
