"""How specbench's programs are compiled (model/programs.py): XLA's command buffers for loops and
conditionals on a GPU, XLA's defaults elsewhere, and options this jaxlib accepts."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from specbench.model import decoding, programs


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
    assert isinstance(decoding.spec_generate_jit, programs.jit)  # the generation is compiled so
