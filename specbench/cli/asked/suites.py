"""Which prompts a command decodes: the built-in suite, or --prompts-file's, cut down by
--per-category, --sample and --limit (prompt_files.py), and the one prompt run and trace decode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench import prompt_files, prompts
from specbench.cli.asked.console import BadInput
from specbench.prompts import Suite

if TYPE_CHECKING:
    from specbench.cli.asked.settings import PromptChoice

CHOOSERS = ("per_category", "sample", "limit")  # --prompts-file's own flags


def suite_of(choice: PromptChoice, seed: int = 0) -> Suite:
    """--prompts-file's prompts, every line checked and the choosers applied (--sample with
    `seed`); else the built-in suite. A chooser without a file is refused."""
    path = choice.file
    if path is None:
        for name in CHOOSERS:
            if getattr(choice, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise BadInput(flag, "chooses among --prompts-file's prompts: give the file too")
        return prompts.BUILTIN
    try:
        suite = prompt_files.read(path)
    except prompt_files.PromptFileError as e:
        raise BadInput("--prompts-file", str(e)) from None
    return prompt_files.choose(suite, choice.limit, choice.sample, seed, choice.per_category)


def origin(suite: Suite, prompt_id: str) -> str | None:
    """FILE:LINE of a prompt file's prompt, for its errors; None for a built-in or typed one."""
    p = suite.get(prompt_id)
    return f"{suite.source}:{p.line}" if p is not None and p.line else None


def resolve_prompt(choice: PromptChoice, given: frozenset[str], suite: Suite) -> tuple[str, str]:
    """(text, id) for run and trace: --prompt-id names a prompt of the suite; a file's first
    prompt where a file was given and no prompt chosen; else --prompt, with its own id where the
    suite holds its text."""
    prompt, prompt_id = choice.text, choice.id
    from_file = suite.source != prompts.BUILTIN.source
    if from_file and "prompt" in given:
        raise BadInput("--prompt", "decodes a text of its own: give it or --prompts-file, not both")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 reach Python as lone surrogates
        raise BadInput("--prompt", "is not valid UTF-8 text") from None
    everything = suite.texts()
    if prompt_id is None and from_file:  # a file holds at least one prompt (prompt_files.read)
        prompt_id = next(iter(everything))
    if prompt_id is None:
        return prompt, next((pid for pid, text in everything.items() if text == prompt), "custom")
    if prompt_id not in everything:
        several = prompt_id == "all" or prompt_id in suite.categories() or "," in prompt_id
        hint = (
            "this command decodes one prompt; `specbench sweep --prompts " + prompt_id + "` runs several"
            if several
            else ("see `specbench prompts`" if not from_file else f"the ids of {suite.source}")
        )
        shown = ", ".join(list(everything)[:20]) + (", ..." if len(everything) > 20 else "")
        raise BadInput("--prompt-id", f"{prompt_id!r} is not a prompt id ({shown}); {hint}")
    return everything[prompt_id], prompt_id


def category_of(suite: Suite, label: str) -> str:
    """What a row records of its prompt's category: the suite's, "all" for a batch of the suite
    cycled, "custom" for a text of no suite; a selection of several, "mixed"."""
    if label == "all" or label in suite.categories():
        return label
    return suite.category(label) if "," not in label else "mixed"
