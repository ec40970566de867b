"""The docs name only files that exist: every repository path in README.md, docs/ and
results/README.md, with shell braces and * expanded, matches at least one file or folder."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = "specbench|docs|results|scripts|tests|gpt2_weights|\\.ci"
PATH = re.compile(rf"(?<![\w./-])((?:{TOP})/[\w./*{{}},-]*)")


def expand(pattern: str) -> list[str]:
    """Shell brace expansion: 'a-{b,c}-{1,2}' -> a-b-1, a-b-2, a-c-1, a-c-2."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    return [p for alt in m.group(1).split(",") for p in expand(head + alt + tail)]


def references() -> list[tuple[str, str]]:
    """(doc, pattern) for every repository path the docs name, trailing punctuation trimmed."""
    out = []
    for doc in DOCS:
        for m in PATH.finditer(doc.read_text()):
            ref = m.group(1).rstrip(".,")
            out += [(doc.relative_to(ROOT).as_posix(), p) for p in expand(ref)]
    return out


def test_the_docs_name_paths():
    assert len(references()) > 100  # the pattern finds the docs' paths at all


@pytest.mark.parametrize("doc, pattern", sorted(set(references())))
def test_every_path_the_docs_name_exists(doc, pattern):
    assert list(ROOT.glob(pattern)), f"{doc} names {pattern}, which matches nothing in the repository"


def test_usage_lists_every_report_section_in_order():
    from specbench.results.sections import SECTIONS

    text = (ROOT / "docs" / "usage.md").read_text()
    part = text[text.index("## `specbench report`") :]
    numbered = re.findall(r"^(\d+)\. ", part[: part.index("`--quick` keeps")], re.M)
    assert numbered == [str(i) for i in range(1, len(SECTIONS) + 1)]
