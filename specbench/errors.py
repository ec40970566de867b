"""specbench's errors. Each names the setting it blames as a field, so the command line can
point at the right flag without reading the message."""

from __future__ import annotations


class SpecbenchError(Exception):
    """A setting that cannot work. `setting` names it ("K", "n_tokens", "prompt", ...), or is None."""

    def __init__(self, message: str, setting: str | None = None):
        super().__init__(message)
        self.setting = setting


class DecodeError(SpecbenchError, ValueError):
    """An impossible decoding configuration; the message says what is allowed."""


class WeightsError(SpecbenchError):
    """Weights that cannot be found, downloaded or read."""


class ExportError(SpecbenchError):
    """A results file that cannot be written or read back."""


class TokenizerError(SpecbenchError):
    """Tokenizer files missing or altered."""


class TrainError(SpecbenchError):
    """A training run that cannot start or resume as asked."""
