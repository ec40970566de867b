"""How logits become a distribution: temperature, top-k and top-p, as one value (Warp) that the
sampling functions (sampling.py) read and that a compiled program takes as an input."""

from __future__ import annotations

import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class Warp:
    """How logits become a distribution. Under jit a Warp is a pytree whose temperature and top-p
    are traced inputs, so one compiled program serves every T > 0 and every nucleus; what changes
    the program is static: whether it is greedy (T = 0), top-k (lax.top_k takes a static k) and
    whether a nucleus is cut at all (top-p < 1), as tpu-inference passes its sampling parameters.
    Outside jit its fields are numbers, and it is hashable."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (got {self.temperature})")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top-k must be >= 1 (got {self.top_k})")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1] (got {self.top_p})")

    @property
    def greedy(self) -> bool:
        """Temperature 0: argmax, one-hot distributions. Static: known while tracing."""
        known = self.__dict__.get("_greedy")
        return self.temperature == 0 if known is None else known

    @property
    def nucleus(self) -> bool:
        """Whether top-p cuts anything (top-p given and below 1). Static: known while tracing."""
        known = self.__dict__.get("_nucleus")
        return (self.top_p is not None and self.top_p < 1) if known is None else known

    @property
    def program(self) -> tuple:
        """What of the warp the compiled programs depend on: the greedy bit, top-k and the nucleus bit."""
        return (self.greedy, self.top_k, self.nucleus)


def _flatten(w: Warp):
    return (w.temperature, w.top_p if w.nucleus else None), w.program


def _unflatten(program: tuple, leaves) -> Warp:
    w = object.__new__(Warp)  # no __post_init__: the leaves may be tracers
    greedy, top_k, nucleus = program
    for name, value in (("temperature", leaves[0]), ("top_k", top_k), ("top_p", leaves[1])):
        object.__setattr__(w, name, value)
    object.__setattr__(w, "_greedy", greedy)
    object.__setattr__(w, "_nucleus", nucleus)
    return w


jax.tree_util.register_pytree_node(Warp, _flatten, _unflatten)
