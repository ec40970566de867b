"""How the fused Pallas kernels (pallas.py) cut their work: the tiling (rows of a weight panel
or keys of the cache a program loads at once, column blocks, Triton's warps and stages), chosen by
scripts/pallas_tiles.py's sweep on a GPU and overridable by SPECBENCH_PALLAS_TILES."""

from __future__ import annotations

import dataclasses

from specbench import environment


@dataclasses.dataclass(frozen=True)
class Tiles:
    """How the kernels cut their work: the fastest of scripts/pallas_tiles.py's six tilings at 124M's
    width and within 2% of the fastest at 1558M's, on an H100 (docs/gpu.md, 2026-11-27).
    SPECBENCH_PALLAS_TILES=chunk,programs,warps,stages overrides it."""

    chunk: int = 512  # the most rows of a weight panel (or keys of the cache) a program loads at once
    programs: int = 64  # column blocks narrow (to 16 columns at least) until a product has this many
    warps: int = 8  # Triton's num_warps
    stages: int = 3  # Triton's num_stages (its software pipeline's depth)

    def __post_init__(self):
        power_of_two = self.chunk >= 16 and not self.chunk & (self.chunk - 1)
        if not power_of_two or min(self.programs, self.warps, self.stages) < 1:
            raise ValueError(f"{self}: chunk must be a power of two >= 16, the others >= 1")

    @classmethod
    def from_env(cls) -> Tiles:
        """Tiles(), or SPECBENCH_PALLAS_TILES's four whole numbers (environment.PALLAS_TILES)."""
        numbers = environment.PALLAS_TILES.get()
        try:
            return cls(*numbers) if numbers else cls()
        except ValueError as e:
            raise environment.EnvironmentSettingError(f"{environment.PALLAS_TILES.variable}: {e}") from None


TILES: Tiles | None = None
"""A tiling that replaces SPECBENCH_PALLAS_TILES's (a sweep sets it between timings)."""


def tiles() -> Tiles:
    """The tiling every kernel is traced with: TILES where set, else Tiles.from_env()."""
    return TILES or Tiles.from_env()


def tile(n: int, cap: int | None = None) -> int:
    """The largest power of two dividing n, at most cap (tiles().chunk): a block size that tiles n
    exactly (Triton's blocks are powers of two). 0 when it is under 16, which Triton's dot cannot take."""
    t = min(n & -n, cap or tiles().chunk)
    return t if t >= 16 else 0


def column_block(n_out: int) -> int:
    """Columns per program of a product with n_out outputs: tile(n_out), halved while there are
    fewer than tiles().programs programs and the block is wider than 16."""
    bn = tile(n_out)
    while bn > 16 and n_out // bn < tiles().programs:
        bn //= 2
    return bn
