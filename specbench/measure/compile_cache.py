"""The compiled programs kept between runs: JAX's persistent compilation cache, in the user's cache
folder ($XDG_CACHE_HOME/specbench/xla, else ~/.cache/specbench/xla), so that a second identical
`specbench run` loads its programs instead of compiling them again. `--no-compile-cache` turns it
off; a JAX_COMPILATION_CACHE_DIR the user set is used as it is. Timings exclude compiling either
way; the compile line says how many programs came from the cache (timing.CompileCounter).

JAX keys each entry by the program, the JAX and XLA versions, the device and the compile options,
so a changed specbench, JAX or machine compiles anew and never reads a stale program.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "JAX_COMPILATION_CACHE_DIR"


def folder() -> Path:
    """Where the programs are kept: $XDG_CACHE_HOME/specbench/xla, else ~/.cache/specbench/xla. A
    relative XDG_CACHE_HOME is ignored, as the XDG base directory specification says (it would
    write into whatever folder the command runs in)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".cache")
    return Path(base) / "specbench" / "xla"


def configure(enabled: bool) -> str | None:
    """Turn the persistent cache on (every program, however small or quick to compile) or off;
    the folder in use, or None. A folder that cannot be made leaves it off: a run never fails for
    want of a cache."""
    import jax

    if not enabled:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    path = os.environ.get(VARIABLE) or str(folder())
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
