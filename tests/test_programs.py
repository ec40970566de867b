"""How specbench's programs are compiled (model/kernels/programs.py): XLA's command buffers for loops and
conditionals on a GPU, XLA's defaults elsewhere, and options this jaxlib accepts."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from specbench.model.decode import loops
from specbench.model.kernels import programs


def test_gpu_backends_compile_loops_into_command_buffers_and_the_cpu_keeps_xlas_defaults(monkeypatch):
    options = programs.compiler_options("gpu")
    assert "WHILE" in options["xla_gpu_enable_command_buffer"].split(",")
    assert "CONDITIONAL" in options["xla_gpu_enable_command_buffer"].split(",")
    assert programs.compiler_options("cuda") == options
    assert programs.compiler_options("cpu") is None
    monkeypatch.setenv("SPECBENCH_XLA_LOOPS", "default")
    assert programs.compiler_options("gpu") is None


def test_the_gpu_options_are_options_xla_accepts():
    # XLA parses every option on any backend and refuses an unknown one or a bad value, so a name
    # or an enum value this jaxlib does not know fails here, on the CPU, not first on a GPU
    loop = lambda n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2), (0, 1))[1]
    assert int(jax.jit(loop, compiler_options=programs.GPU_OPTIONS)(5)) == 32
    with pytest.raises(Exception, match="not a valid enum value"):
        jax.jit(loop, compiler_options={"xla_gpu_enable_command_buffer": "FUSION,NOT_A_THING"})(5)


def test_a_program_is_jax_jit_with_its_backends_options(monkeypatch):
    seen = []
    real = jax.jit
    monkeypatch.setattr(programs.jax, "jit", lambda f, **kw: seen.append(kw) or real(f, **kw))
    monkeypatch.setattr(programs.jax, "default_backend", lambda: "gpu")
    doubled = programs.jit(lambda x, n: x * n, static_argnames=("n",))
    assert int(doubled(jnp.int32(3), n=2)) == 6 and doubled.__name__ == "<lambda>"
    assert seen == [{"compiler_options": programs.GPU_OPTIONS, "static_argnames": ("n",)}]
    assert isinstance(loops.spec_loop_jit, programs.jit)  # the generation is compiled so


def test_a_generation_and_its_time_account_run_the_same_programs():
    """The generation runs its start and its loop, and the timers of its account (AR tokens, SD
    rounds) run that same loop, holding n, the count of steps or rounds traced: another N or
    prompt, which takes another count of rounds, compiles nothing more."""
    from specbench.measure import bench, timing
    from specbench.measure.prepared import RunConfig
    from specbench.model.decode import drafters
    from specbench.model.nets.gpt2 import GPT2Config

    from conftest import TINY, random_model

    draft = random_model(GPT2Config(n_layer=1, n_head=2, n_embd=24, n_ctx=128, n_vocab=TINY.n_vocab), 5)
    target = random_model(TINY, 7)
    config = lambda n: RunConfig(
        draft, target, drafters.model_drafter(draft.config), 3, n_tokens=n, repeats=1
    )
    names = ("ar_loop_jit", "spec_loop_jit")
    sizes = lambda: [getattr(loops, name).jitted._cache_size() for name in names]
    before = sizes()
    first = bench.run_benchmark(config(6), [[1, 2, 3, 4]])
    after_first = sizes()
    assert all(a - b <= 1 for a, b in zip(after_first, before))  # one loop program each, shared
    with timing.CompileCounter() as compiles:
        second = bench.run_benchmark(config(11), [[9, 8, 7, 6, 5]])
    assert first.stats.n_rounds != second.stats.n_rounds  # other counts of rounds, the same programs
    assert compiles.count == 0 and sizes() == after_first
