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


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")  # a Markdown link's or image's target, its anchor dropped


def links() -> list[tuple[str, str]]:
    """(page, target) for every relative link and image in the docs and the model card."""
    pages = [*DOCS, ROOT / "gpt2_weights" / "README.md"]
    return [
        (page.relative_to(ROOT).as_posix(), m.group(1))
        for page in pages
        for m in LINK.finditer(page.read_text())
        if not m.group(1).startswith(("http://", "https://", "mailto:"))
    ]


def test_the_docs_have_links():
    assert len(links()) > 20


@pytest.mark.parametrize("page, target", sorted(set(links())))
def test_every_link_and_image_resolves_from_its_own_page(page, target):
    assert (ROOT / page).parent.joinpath(target).exists(), f"{page} links {target}, not found from its folder"


def test_the_tree_that_travels_to_a_gpu_machine_stays_under_56_mib():
    """The device tool copies the checkout (64 MiB at most) to a lent GPU: the tracked files keep
    room to spare for what a session adds before its call (8 MiB)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    # a link travels as a link (the bundled folders' tokenizer files point at gpt2_weights/tokenizer)
    size = sum(f.lstat().st_size for f in files if f.is_file() or f.is_symlink())
    assert size < 56 * 2**20, f"the tracked files take {size / 2**20:.1f} MiB"


def test_a_recorded_sweep_kept_compressed_reads_as_it_is():
    from specbench.results import export

    rows = export.read_json(str(ROOT / "results/recorded/history/cpu-sweep-batch-bundled.json.xz"))
    assert len(rows) > 5 and all("K" in r for r in rows)


def test_no_function_is_over_60_lines_but_a_paper_s_algorithm_that_says_so():
    """The house's size rule (issue 57): a function over 60 lines is a paper's algorithm written as
    one function, and its docstring says so."""
    import ast

    long = []
    for path in (ROOT / "specbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60:
                doc = " ".join((ast.get_docstring(node) or "").split())
                if "a paper's algorithm, written as one function" not in doc.lower():
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


def test_no_module_is_over_350_lines():
    """A module per concept, readable top to bottom: none over 350 lines (split it by concept)."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "specbench").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 350
    }
    assert not long, long


def test_usage_lists_every_flag_of_every_command_as_the_commands_define_them():
    from specbench.cli import flag_docs
    from specbench.cli.main import cli

    text = (ROOT / "docs" / "usage.md").read_text()
    assert flag_docs.BEGIN in text and flag_docs.END in text
    assert flag_docs.rewritten(text, cli) == text, (
        "docs/usage.md's flags are stale: python -m specbench.cli.flag_docs"
    )
    for flag in (
        "--prompts-file",
        "--refill",
        "--queue",
        "--itl",
        "--mesh",
        "--draft-device",
        "--coordinator",
    ):
        assert f"`{flag}`" in text.split(flag_docs.BEGIN)[1]


def module_names() -> dict[str, list[str]]:
    """specbench's modules by their file's name: {'drafters': ['specbench.model.decode.drafters'], ...}."""
    out: dict[str, list[str]] = {}
    for p in sorted((ROOT / "specbench").rglob("*.py")):
        if p.name != "__init__.py":
            out.setdefault(p.stem, []).append(".".join(p.relative_to(ROOT).with_suffix("").parts))
    return out


# `module.name` (a call's parentheses allowed), module being one of specbench's files by name
NAME = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
FILE_SUFFIXES = ("py", "md", "json", "csv", "png", "html", "cc", "sh", "j2", "xz", "txt", "toml", "bin")


def named_attributes() -> list[tuple[str, str]]:
    """(doc, 'module.name') for every backticked name the docs give in one of specbench's modules."""
    modules = module_names()
    out = []
    for doc in DOCS:
        for m in NAME.finditer(doc.read_text()):
            first, *rest = m.group(1).split(".")
            if first in modules and rest[-1] not in FILE_SUFFIXES:
                out.append((doc.relative_to(ROOT).as_posix(), m.group(1)))
    return out


def resolves(dotted: str) -> bool:
    """Whether some module of that name has the attribute chain, or a class of it has (an
    instance's field or method, as `drafter.spec` names the Drafter's)."""
    import importlib
    import inspect

    first, *rest = dotted.split(".")
    for path in module_names()[first]:
        module = importlib.import_module(path)
        for owner in [module] + [c for _, c in inspect.getmembers(module, inspect.isclass)]:
            obj = owner
            try:
                for attr in rest:
                    obj = getattr(obj, attr) if not dataclass_field(obj, attr) else None
                return True
            except AttributeError:
                continue
    return False


def dataclass_field(cls, name: str) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}


def test_the_docs_name_functions():
    assert len(named_attributes()) > 40  # the pattern finds the docs' `module.name`s at all


@pytest.mark.parametrize("doc, dotted", sorted(set(named_attributes())))
def test_every_module_name_the_docs_give_is_in_that_module(doc, dotted):
    assert resolves(dotted), f"{doc} names `{dotted}`, which no module of that name has"
