"""The environment variables that choose how specbench computes: each is checked as a flag is, so
that a misspelt value stops the command with one line naming the variable and what it allows,
instead of running the default in silence. (Where specbench reads and writes,
SPECBENCH_WEIGHTS_DIR and SPECBENCH_RESULTS_DIR, are paths: their readers check them.)"""

from __future__ import annotations

import os
from dataclasses import dataclass

from specbench.errors import SpecbenchError


class EnvironmentSettingError(SpecbenchError):
    """An environment variable whose value specbench cannot take; the message names it."""


@dataclass(frozen=True)
class Choice:
    """A variable naming one of `values`; the first is what an unset or empty variable means."""

    variable: str
    values: tuple[str, ...]

    def given(self) -> bool:
        """Whether the variable is set (not left to mean its default)."""
        return bool(os.environ.get(self.variable, ""))

    def get(self) -> str:
        value = os.environ.get(self.variable, "") or self.values[0]
        if value not in self.values:
            raise EnvironmentSettingError(
                f"{self.variable}={value!r}: allowed values are {', '.join(self.values)}"
            )
        return value


@dataclass(frozen=True)
class Numbers:
    """A variable holding `count` whole numbers separated by commas, or unset."""

    variable: str
    count: int
    meaning: str

    def get(self) -> tuple[int, ...] | None:
        text = os.environ.get(self.variable, "")
        if not text:
            return None
        try:
            numbers = tuple(int(v) for v in text.split(","))
        except ValueError:
            numbers = ()
        if len(numbers) != self.count:
            raise EnvironmentSettingError(f"{self.variable}={text!r}: expected {self.meaning}")
        return numbers


SAMPLER = Choice("SPECBENCH_SAMPLER", ("auto", "cdf", "race"))
VERDICT = Choice("SPECBENCH_VERDICT", ("auto", "lazy", "all-rows"))
XLA_LOOPS = Choice("SPECBENCH_XLA_LOOPS", ("command-buffers", "default"))
PALLAS_LAYERS = Choice("SPECBENCH_PALLAS_LAYERS", ("unrolled", "scan"))
PALLAS_TILES = Numbers("SPECBENCH_PALLAS_TILES", 4, "chunk,programs,warps,stages: four whole numbers")
PALLAS_BACKEND = Choice("SPECBENCH_PALLAS_BACKEND", ("triton", "mosaic"))
SETTINGS = (SAMPLER, VERDICT, XLA_LOOPS, PALLAS_LAYERS, PALLAS_TILES, PALLAS_BACKEND)


def check() -> None:
    """Read every setting once: raises EnvironmentSettingError for the first that is not allowed."""
    for setting in SETTINGS:
        setting.get()
