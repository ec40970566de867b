"""Small words every view prints, in one module below them all (render.py and serving_view.py
both read it, and neither imports the other for it)."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """'1 request', '3 requests'."""
    return f"{n} {word}" + ("" if n == 1 else "s")
