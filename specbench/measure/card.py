"""The GPU card's state while it was timed: its SM and memory clocks, power, temperature and the
reasons its clocks are held down, read through `nvidia-smi` before and after each timed section.

A GPU's noise comes from its clocks as much as from the host: nvbench discards the samples taken
while the card throttled, and back-to-back runs on a B200 fall from 1,965 to about 1,580 MHz. So a
GPU row records the card's state at both ends, and a run whose SM clock fell by more than
CLOCK_FALL while it was timed says so in one line, as a loaded CPU does (load.py). Off an NVIDIA
GPU, or without nvidia-smi, nothing is read and nothing is recorded.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

CLOCK_FALL = 0.10  # an SM clock that fell by more than this share while timed is said
FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "clocks_event_reasons.active")
OLD_FIELDS = FIELDS[:-1] + ("clocks_throttle_reasons.active",)  # drivers before 535 name it so
REASONS = {  # NVML's clocks event reasons (nvmlClocksEventReason*), by bit
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


@dataclasses.dataclass(frozen=True)
class CardState:
    """One card's state at one instant: clocks in MHz, power in W, temperature in °C, and the
    active reasons its clocks are held (REASONS' names)."""

    sm_mhz: float | None
    mem_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    reasons: tuple[str, ...]


def number(text: str) -> float | None:
    """A field of nvidia-smi's CSV as a number; None for "[N/A]", "[Not Supported]" and the like."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def reasons_of(text: str) -> tuple[str, ...]:
    """The names of the bits set in nvidia-smi's hex bitmask ("0x0000000000000004")."""
    try:
        mask = int(text.strip(), 16)
    except ValueError:
        return ()
    return tuple(name for bit, name in REASONS.items() if mask & bit)


def parse(text: str) -> list[CardState]:
    """nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits: one CardState a card (a line)."""
    states = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(FIELDS):
            continue
        states.append(CardState(*(number(c) for c in cells[:4]), reasons_of(cells[4])))
    return states


def read(index: int = 0) -> CardState | None:
    """Card `index`'s state now, or None where there is no nvidia-smi or it does not answer."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    for fields in (FIELDS, OLD_FIELDS):
        query = [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", f"--id={index}"]
        try:
            done = subprocess.run(query, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        states = parse(done.stdout) if done.returncode == 0 else []
        if states:
            return states[0]
    return None


def record(before: CardState | None, after: CardState | None) -> dict:
    """What a row carries of the card: its state at both ends of the timed section (None off a GPU)."""
    if before is None or after is None:
        return {}
    row = {}
    for end, state in (("before", before), ("after", after)):
        row |= {
            f"card_sm_mhz_{end}": state.sm_mhz,
            f"card_mem_mhz_{end}": state.mem_mhz,
            f"card_power_w_{end}": state.power_w,
            f"card_temperature_c_{end}": state.temperature_c,
            f"card_reasons_{end}": list(state.reasons),
        }
    return row


def warning(row: dict) -> str | None:
    """One line where the card's SM clock fell by more than CLOCK_FALL while it was timed; None else."""
    start, end = row.get("card_sm_mhz_before"), row.get("card_sm_mhz_after")
    if not start or end is None or end >= start * (1 - CLOCK_FALL):
        return None
    held = [r for r in row.get("card_reasons_after") or [] if r != "idle"]
    why = f" ({', '.join(held)})" if held else ""
    return (
        f"the GPU's SM clock fell from {start:.0f} to {end:.0f} MHz while it was timed{why}: the "
        "later repeats ran slower than the first, so the times mix two speeds"
    )
