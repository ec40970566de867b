"""A small built-in prompt suite, a few prompts per category, each with a stable id.

The categories follow the contrast of the DeepMind paper (predictable text accepts more drafts
than open-ended prose) within what the bundled pair, trained on Victorian novels and children's
books, can continue: prose openings in that style, and `repetition`, whose continuation repeats
text the prompt already holds (a refrain, a list being continued, a line quoted twice), where
drafts are easy.
"""

from __future__ import annotations

import hashlib

SEED_PROMPT = "Alan Turing theorized that computers would one day become"  # the seeds' worked example

PROMPTS: dict[str, dict[str, str]] = {
    "seed": {"seed-turing": SEED_PROMPT},
    "narrative": {
        "narrative-1": "It was a dark and stormy night, and the old house at the end of the lane",
        "narrative-2": "When the carriage stopped at last before the gates of the hall, she",
        "narrative-3": "The boy ran down to the river as fast as his legs would carry him, for",
    },
    "dialogue": {
        "dialogue-1": '"I do not know what you mean," said the lady, turning to her brother. "',
        "dialogue-2": '"Where have you been all this time?" asked his mother. "I have been',
        "dialogue-3": '"Good morning, sir," said the servant, bowing low. "The master',
    },
    "fairy-tale": {
        "fairy-1": "Once upon a time there lived a king who had three daughters, and the youngest",
        "fairy-2": "Long ago, in a forest far away, there was a little cottage where",
        "fairy-3": "The wolf looked at the little pig and said,",
    },
    "description": {
        "description-1": "The room was large and low, with a great fireplace at one end and",
        "description-2": "The town lay in a valley between two hills, and in the summer",
    },
    "repetition": {
        "refrain-1": (
            "Row, row, row your boat, gently down the stream. Merrily, merrily, merrily, merrily, "
            "life is but a dream. Row, row, row your boat, gently down the stream. Merrily,"
        ),
        "list-1": (
            "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday, "
            "Wednesday, Thursday,"
        ),
        "quote-1": (
            '"The little house stood at the edge of the wood, and no one had lived in it for many '
            'years." She read the line again, slowly: "The little house stood at the edge of the'
        ),
        "count-1": "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four, five,",
    },
}
DEFAULT_PROMPT_ID = "narrative-1"
DEFAULT_PROMPT = PROMPTS["narrative"][DEFAULT_PROMPT_ID]  # what run and trace decode unless told


def all_prompts() -> dict[str, str]:
    """id -> text, every category."""
    return {pid: text for group in PROMPTS.values() for pid, text in group.items()}


def category(prompt_id: str) -> str:
    for name, group in PROMPTS.items():
        if prompt_id in group:
            return name
    return "custom"


def select(spec: str) -> dict[str, str]:
    """'all', a category, prompt ids, or a mix, comma-separated -> id -> text. Unknown -> ValueError."""
    chosen: dict[str, str] = {}
    everything = all_prompts()
    items = [s.strip() for s in spec.split(",")]
    for i, item in enumerate(items):
        if item in items[:i]:
            raise ValueError(f"{item!r} is listed twice")
        if item == "all":
            chosen.update(everything)
        elif item in PROMPTS:
            chosen.update(PROMPTS[item])
        elif item in everything:
            chosen[item] = everything[item]
        else:
            raise ValueError(
                f"unknown prompt {item!r}: use all, a category ({', '.join(PROMPTS)}) or an id "
                f"(see `specbench prompts`)"
            )
    return chosen


def batch_ids(chosen: dict[str, str], batch: int) -> list[str]:
    """The ids of a batch of `batch` sequences: the chosen prompts cycled, taken round-robin over
    their categories (narrative-1, dialogue-1, fairy-1, ..., narrative-2, ...; the seed prompt
    last), so that any first few mix the categories. One chosen prompt is repeated."""
    order = list(PROMPTS)
    last = len(all_prompts())
    rank = {
        pid: (last if c == "seed" else i, order.index(c))
        for c, group in PROMPTS.items()
        for i, pid in enumerate(group)
    }
    ids = sorted(chosen, key=lambda pid: rank.get(pid, (last + 1, 0)))  # custom ids keep their order, last
    return [ids[i % len(ids)] for i in range(batch)]


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
