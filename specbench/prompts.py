"""A small built-in prompt suite, a few prompts per category, each with a stable id.

The categories follow the contrast of the DeepMind paper (predictable text accepts more drafts
than open-ended prose) within what the bundled pair, trained on Victorian novels and children's
books, can continue: prose openings in that style, and `repetition`, whose continuation repeats
text the prompt already holds (a refrain, a list being continued, a line quoted twice), where
drafts are easy.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One prompt of a suite: its id, category and text, and where it came from (the line of its
    prompt file; 0 for a built-in one)."""

    id: str
    category: str
    text: str
    line: int = 0


@dataclasses.dataclass(frozen=True)
class Suite:
    """The prompts a command may decode, in order: the built-in suite, or a prompt file's
    (prompt_files.read). `source` names it: "built-in", or the file's path."""

    prompts: tuple[Prompt, ...]
    source: str = "built-in"

    def texts(self) -> dict[str, str]:
        """id -> text, in order."""
        return {p.id: p.text for p in self.prompts}

    def get(self, prompt_id: str) -> Prompt | None:
        return next((p for p in self.prompts if p.id == prompt_id), None)

    def category(self, prompt_id: str) -> str:
        """A prompt's category; "custom" for a text of no suite."""
        p = self.get(prompt_id)
        return p.category if p is not None else "custom"

    def categories(self) -> dict[str, list[str]]:
        """category -> its prompt ids, categories in their first appearance's order."""
        groups: dict[str, list[str]] = {}
        for p in self.prompts:
            groups.setdefault(p.category, []).append(p.id)
        return groups

    def firsts(self) -> list[str]:
        """The first prompt of each category: the quick battery's suite."""
        return [ids[0] for ids in self.categories().values()]

    def select(self, spec: str) -> dict[str, str]:
        """'all', a category, prompt ids, or a mix, comma-separated -> id -> text. Unknown -> ValueError."""
        chosen: dict[str, str] = {}
        everything, groups = self.texts(), self.categories()
        items = [s.strip() for s in spec.split(",")]
        for i, item in enumerate(items):
            if item in items[:i]:
                raise ValueError(f"{item!r} is listed twice")
            if item == "all":
                chosen.update(everything)
            elif item in groups:
                chosen.update({pid: everything[pid] for pid in groups[item]})
            elif item in everything:
                chosen[item] = everything[item]
            else:
                where = "see `specbench prompts`" if self.source == "built-in" else f"those of {self.source}"
                raise ValueError(
                    f"unknown prompt {item!r}: use all, a category ({', '.join(groups)}) or an id ({where})"
                )
        return chosen

    def batch_ids(self, chosen: dict[str, str], batch: int) -> list[str]:
        """The ids of a batch of `batch` sequences: the chosen prompts cycled, taken round-robin
        over their categories (narrative-1, dialogue-1, fairy-1, ..., narrative-2, ...; the seed
        prompt last), so that any first few mix the categories. One chosen prompt is repeated."""
        groups = self.categories()
        order, last = list(groups), len(self.prompts)
        rank = {
            pid: (last if c == "seed" else i, order.index(c))
            for c, ids in groups.items()
            for i, pid in enumerate(ids)
        }
        ids = sorted(
            chosen, key=lambda pid: rank.get(pid, (last + 1, 0))
        )  # custom ids keep their order, last
        return [ids[i % len(ids)] for i in range(batch)]


BUILTIN = Suite(tuple(Prompt(pid, c, text) for c, group in PROMPTS.items() for pid, text in group.items()))


def all_prompts() -> dict[str, str]:
    """id -> text of the built-in suite, every category."""
    return BUILTIN.texts()


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
