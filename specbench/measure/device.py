"""The machine a measurement ran on: device kind, free memory, peak bandwidth, and the context
every result row carries."""

from __future__ import annotations

import datetime
import functools
import os
import subprocess
from pathlib import Path

import jax

# Peak memory bandwidth in GB/s by device-kind substring (vendor datasheets). Unknown -> None.
PEAK_GBPS = {
    "H200": 4800.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,
    "A100-SXM4-80GB": 2039.0,
    "A100": 1555.0,
    "L4": 300.0,
    "A10G": 600.0,
    "T4": 320.0,
    "V100": 900.0,
    "RTX 4090": 1008.0,
}


def backend_problem() -> str | None:
    """None when JAX's backend starts; else one line saying why not and what to do."""
    try:
        jax.devices()
    except Exception as e:  # noqa: BLE001 -- JAX raises bare AssertionErrors and RuntimeErrors here
        asked = os.environ.get("JAX_PLATFORMS")
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if asked:
            return (
                f"JAX_PLATFORMS={asked}, but JAX could not start that backend ({why}): install it "
                f"(for CUDA, pip install -e '.[cuda]'), or unset JAX_PLATFORMS to run on the CPU"
            )
        return f"JAX could not start a backend ({why})"
    return None


def device_kind() -> str:
    """'platform:kind' of the default device, e.g. 'cpu:cpu' or 'gpu:NVIDIA H100 80GB HBM3'."""
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


def on_gpu() -> bool:
    return jax.devices()[0].platform == "gpu"


def peak_gbps(device: str | None = None) -> float | None:
    """The datasheet memory bandwidth of the device, or None where it is not known."""
    device = device or jax.devices()[0].device_kind
    for name, gbps in PEAK_GBPS.items():
        if name.lower() in device.lower():
            return gbps
    return None


def memory_bytes() -> int | None:
    """Memory free for a run on the default device: the accelerator's allocator limit less what
    it holds, or on the CPU the host's available memory; None where neither can be read."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:  # Linux: what can be had without swapping, page cache included
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds specbench/


def git(args: list[str], cwd: Path) -> str | None:
    """git's output in `cwd`, stripped, or None where git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=4)
def git_commit(root: Path = PROJECT_ROOT) -> str:
    """The commit of the code that runs: specbench's own checkout's HEAD, with '-dirty' when the
    package folder has uncommitted changes; '' where `root` is not the top of a git checkout (an
    installed copy, or a copy inside some other repository, whose commit says nothing of this code)."""
    top = git(["rev-parse", "--show-toplevel"], root)
    if top is None or Path(top).resolve() != root.resolve():
        return ""
    head = git(["rev-parse", "--short=12", "HEAD"], root)
    if not head:
        return ""
    changed = git(["status", "--porcelain", "--", "specbench"], root)
    return head + ("-dirty" if changed else "")


def context() -> dict:
    """What every row carries about the software and the device."""
    from specbench import __version__

    return {
        "specbench_version": __version__,
        "git_commit": git_commit(),
        "jax_version": jax.__version__,
        "device": device_kind(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
