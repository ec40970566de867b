"""--prompts-file: the three formats read as they are, every bad line refused with its file, line
and field before anything is measured, the choosers, and rows that record each prompt's category."""

import json
from pathlib import Path

import pytest

from specbench import prompt_files, prompts
from specbench.prompt_files import PromptFileError

from conftest import assert_one_line_error, invoke

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "workloads" / "victorian-40.jsonl"

# Spec-Bench's question.jsonl, in its shape (question_id, category, turns; written here)
SPEC_BENCH = [
    {
        "question_id": 81,
        "category": "writing",
        "turns": ["Compose a travel blog post about Hawaii.", "Rewrite it."],
    },
    {"question_id": 82, "category": "roleplay", "turns": ["Pretend to be Sheldon and talk about trains."]},
    {
        "question_id": 161,
        "category": "translation",
        "turns": ["Translate into French: the cat sat on the mat."],
    },
    {"question_id": 241, "category": "summarization", "turns": ["Summarise the following passage: ..."]},
]


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_json_lines_give_ids_categories_and_lines(tmp_path):
    f = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": "a", "category": "story", "prompt": "The old man sat by the fire and"},
            "",  # blank lines are skipped, and counted
            {"text": "Once upon a time", "category": "fairy"},
            {"prompt": "A third", "id": 7},
        ],
    )
    suite = prompt_files.read(f)
    assert [(p.id, p.category, p.text, p.line) for p in suite.prompts] == [
        ("a", "story", "The old man sat by the fire and", 1),
        ("line-3", "fairy", "Once upon a time", 3),
        ("7", prompt_files.FILE_CATEGORY, "A third", 4),
    ]
    assert suite.source == str(f) and suite.categories() == {
        "story": ["a"],
        "fairy": ["line-3"],
        "file": ["7"],
    }


def test_spec_bench_and_mt_bench_question_files_are_read_as_they_are(tmp_path):
    suite = prompt_files.read(write_lines(tmp_path / "question.jsonl", SPEC_BENCH))
    assert [p.id for p in suite.prompts] == ["81", "82", "161", "241"]
    assert suite.texts()["81"] == "Compose a travel blog post about Hawaii."  # the first turn
    assert list(suite.categories()) == ["writing", "roleplay", "translation", "summarization"]


def test_a_plain_text_file_is_one_prompt_a_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("It was a cold morning and\n\n  The garden gate  \n")
    suite = prompt_files.read(f)
    assert [(p.id, p.text, p.line) for p in suite.prompts] == [
        ("line-1", "It was a cold morning and", 1),
        ("line-3", "The garden gate", 3),
    ]


BAD = [
    (['{"prompt": "fine"}', '{"prompt": "unclosed'], 2, "JSON", "not valid JSON"),
    (['{"prompt": "fine"}', "[1, 2]"], 2, "JSON", "not an object"),
    (['[{"prompt": "x"}]'], 1, "JSON", "array"),
    ([{"id": "a", "question": "no prompt field"}], 1, "prompt", "missing"),
    ([{"prompt": "  "}], 1, "prompt", "empty"),
    ([{"prompt": 3}], 1, "prompt", "must be text"),
    ([{"turns": []}], 1, "turns", "first turn"),
    ([{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}, {"id": "a", "prompt": "z"}], 3, "id", "line 1"),
    ([{"question_id": 5, "turns": ["x"]}, {"question_id": 5, "turns": ["y"]}], 2, "id", "'5'"),
    ([{"prompt": "x", "category": ""}], 1, "category", "non-empty"),
    ([{"prompt": "x", "id": None}], 1, "id", "non-empty"),
]


@pytest.mark.parametrize("lines, line, field, words", BAD)
def test_each_bad_line_is_refused_naming_the_file_line_and_field(tmp_path, lines, line, field, words):
    f = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(PromptFileError) as e:
        prompt_files.read(f)
    assert (e.value.line, e.value.field) == (line, field) and words in str(e.value)
    assert str(e.value).startswith(f"{f}:{line}: {field}: ")
    assert_one_line_error(invoke("prompts", "--prompts-file", f), "--prompts-file", f"{f}:{line}: {field}")


def test_an_empty_unreadable_or_missing_file_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for name, words in (
        ("empty.txt", "no prompt"),
        ("latin1.txt", "UTF-8"),
        ("missing.txt", "does not exist"),
    ):
        assert_one_line_error(invoke("prompts", "--prompts-file", tmp_path / name), "--prompts-file", words)


def test_the_choosers_cut_a_long_file_down_in_the_file_s_order():
    suite = prompt_files.read(EXAMPLE)
    assert len(suite.prompts) == 40 and len(suite.categories()) == 6
    per = prompt_files.choose(suite, per_category=2)
    assert [len(ids) for ids in per.categories().values()] == [2] * 6
    a, b = (prompt_files.choose(suite, sample=10, seed=s) for s in (1, 1))
    c = prompt_files.choose(suite, sample=10, seed=2)
    assert a == b and a != c and len(a.prompts) == 10
    order = [p.id for p in suite.prompts]
    assert [p.id for p in a.prompts] == sorted((p.id for p in a.prompts), key=order.index)
    assert [p.id for p in prompt_files.choose(suite, per_category=1, limit=3).prompts] == [
        "narrative-1",
        "dialogue-1",
        "fairy-tale-1",
    ]


def test_a_chooser_needs_the_file_and_the_file_s_ids_are_what_prompt_id_names(env, tmp_path):
    assert_one_line_error(invoke("run", *env, "--sample", 3, "--dry-run"), "--sample", "--prompts-file")
    f = write_lines(tmp_path / "q.jsonl", SPEC_BENCH)
    assert_one_line_error(
        invoke("run", *env, "--prompts-file", f, "--prompt-id", "narrative-1", "--dry-run"),
        "--prompt-id",
        f"the ids of {f}",
    )
    assert_one_line_error(
        invoke("run", *env, "--prompts-file", f, "--prompt", "my text", "--dry-run"), "--prompt", "not both"
    )
    assert invoke("run", *env, "--prompts-file", f, "--prompt-id", "161", "--dry-run").exit_code == 0


def test_a_prompt_too_long_for_the_model_is_refused_by_its_line_before_anything_runs(env, tmp_path):
    f = write_lines(tmp_path / "long.jsonl", [{"prompt": "short enough"}, {"prompt": "word " * 400}])
    for command in (["run", "--batch", 2], ["sweep"], ["trace", "--prompt-id", "line-2"]):
        result = invoke(*command, *env, "--prompts-file", f, "--dry-run")
        assert_one_line_error(result, "--prompts-file", f"{f}:2: prompt: has ")
    assert not (tmp_path / "results").exists()


def test_rows_record_each_prompt_s_id_and_category(env, tmp_path):
    f = write_lines(tmp_path / "q.jsonl", SPEC_BENCH)
    out = tmp_path / "rows.json"
    result = invoke(
        "sweep", *env, "--prompts-file", f, "--limit", 2, "--K", 2, "-n", 6, "--repeats", 1, "--output", out
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [(r["prompt_id"], r["category"]) for r in rows] == [("81", "writing"), ("82", "roleplay")]
    assert rows[0]["prompt"] == SPEC_BENCH[0]["turns"][0]


def test_the_built_in_suite_keeps_its_categories_and_batches_mix_them():
    suite = prompts.BUILTIN
    assert suite.category("refrain-1") == "repetition" and suite.category("nope") == "custom"
    assert suite.batch_ids(suite.texts(), 3) == ["narrative-1", "dialogue-1", "fairy-1"]
    assert suite.firsts()[0] == "seed-turing" and len(suite.firsts()) == len(prompts.PROMPTS)
