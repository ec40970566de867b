"""File modes: what specbench writes is readable as any file the user makes is (0666 less the
umask), where a library would leave it private (mkstemp's and safetensors' 0600)."""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share(path: str | Path) -> None:
    """Give `path` the mode a new file of the user's gets: 0666 less the umask."""
    os.chmod(path, 0o666 & ~current_umask())
