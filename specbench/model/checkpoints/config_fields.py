"""A config.json's values, each read with its type and range checked, naming the file and the key.

A folder from elsewhere can hold anything: `"hidden_size": null`, `"num_attention_heads": 0`, taps
written as the string "1,2,3", a float where a count belongs. Each such value ends in one
WeightsError, `FILE: KEY is VALUE, expected WHAT`, before a config is built from it, instead of a
traceback from deep inside the model. A JSON integer written as a float (`4.0`) reads as the integer
transformers would take; `true` is never a count.
"""

from __future__ import annotations

import math

from specbench.errors import WeightsError

REQUIRED = object()  # a key's default where the config must give it


class Fields:
    """A config.json's object, read key by key (`where` names the file in every error)."""

    def __init__(self, d, where: str = "config.json"):
        if not isinstance(d, dict):
            raise WeightsError(f"{where} is not a JSON object (it holds a {type(d).__name__})")
        self.d, self.where = d, where

    def bad(self, key: str, expected: str) -> WeightsError:
        """The error for a key whose value is not what it should be."""
        return WeightsError(f"{self.where}: {key} is {self.d.get(key)!r}, expected {expected}")

    def raw(self, key: str, default):
        """The key's value, or default where it is absent or null; WeightsError where it is required."""
        value = self.d.get(key)
        if value is None:
            if default is REQUIRED:
                missing = "null" if key in self.d else "missing"
                raise WeightsError(f"{self.where}: {key} is {missing}, and a config needs it")
            return default
        return value

    def count(self, key: str, default=REQUIRED, low: int = 1) -> int:
        """An integer >= low (a float that is one reads as it)."""
        value = self.raw(key, default)
        if value is default and default is not REQUIRED:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(key, f"an integer >= {low}")
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise self.bad(key, f"an integer >= {low}")
        if value < low:
            raise self.bad(key, f"an integer >= {low}")
        return int(value)

    def number(self, key: str, default=REQUIRED, positive: bool = True) -> float:
        """A finite number (> 0 where `positive`)."""
        value = self.raw(key, default)
        if value is default and default is not REQUIRED:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.bad(key, "a finite number" + (" > 0" if positive else ""))
        if positive and value <= 0:
            raise self.bad(key, "a finite number > 0")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """true or false."""
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.bad(key, "true or false")
        return value

    def text(self, key: str, default=REQUIRED) -> str:
        """A string."""
        value = self.raw(key, default)
        if value is default and default is not REQUIRED:
            return value
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def counts(self, key: str, low: int = 0) -> tuple[int, ...]:
        """A list of integers >= low ([] where absent or null)."""
        value = self.raw(key, [])
        ok = isinstance(value, list) and all(
            not isinstance(v, bool) and isinstance(v, int) and v >= low for v in value
        )
        if not ok:
            raise self.bad(key, f"a list of integers >= {low}")
        return tuple(value)

    def table(self, key: str) -> Fields:
        """A nested object ({} where absent or null), read the same way."""
        value = self.raw(key, {})
        if not isinstance(value, dict):
            raise self.bad(key, "a JSON object")
        return Fields(value, f"{self.where}: {key}")
