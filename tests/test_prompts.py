"""Prompt sources: the bundled coding sets with z-lab's templates, custom JSONL, dir:PATH, subsets, templating."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from dflash_eval.core.errors import InputError
from dflash_eval.pipeline.continuations import Prompt, prompt_ids
from dflash_eval.pipeline.prompts import (
    DEMO_PROMPTS,
    HEAD_CHARS,
    PROMPT_SETS,
    describe_sets,
    load_prompts,
    render_for_target,
)

REPO = Path(__file__).resolve().parents[1]
SOURCE_DATA = REPO.parent / "shared" / "data"  # the benchmark files the sets are built from, when present
needs_source_data = pytest.mark.skipif(not (SOURCE_DATA / "humaneval.jsonl").exists(),
                                       reason="../shared/data is not on this machine")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from dflash_eval.demo.tiny_tokenizer import train_tokenizer

    return AutoTokenizer.from_pretrained(train_tokenizer(tmp_path_factory.mktemp("tokenizer")))


# --- the bundled sets ----------------------------------------------------------------------------------


def test_bundled_sets_have_the_benchmark_counts():
    humaneval, mbpp, demo = load_prompts("humaneval"), load_prompts("mbpp"), load_prompts("demo")
    assert len(humaneval) == 164 and len(mbpp) == 257 and len(demo) == len(DEMO_PROMPTS) == 12
    assert [p.id for p in humaneval] == [f"HumanEval/{n}" for n in range(164)]
    assert mbpp[0].id == "mbpp/11" and mbpp[-1].id == "mbpp/479"  # the last sanitized problem below 511
    assert all(11 <= int(p.id.split("/")[1]) <= 510 for p in mbpp)
    assert {p.set for p in humaneval} == {"humaneval"} and {p.set for p in mbpp} == {"mbpp"}
    assert all(p.messages is None for p in humaneval + mbpp)
    assert [(name, count) for name, count, _ in describe_sets()] == [("humaneval", 164), ("mbpp", 257), ("demo", 12)]
    assert set(PROMPT_SETS) == {"humaneval", "mbpp", "demo"}


def test_describe_sets_names_each_license():
    lines = {name: text for name, _, text in describe_sets()}
    assert "MIT" in lines["humaneval"] and "OpenAI" in lines["humaneval"]
    assert "CC BY 4.0" in lines["mbpp"] and "Austin" in lines["mbpp"]


def test_humaneval_0_is_wrapped_exactly_as_z_labs_benchmark_does():
    first = load_prompts("humaneval")[0]
    assert first.text == (
        "Write a solution to the following problem and make sure that it passes the tests:\n"
        "```python\n"
        "from typing import List\n"
        "\n"
        "\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        '    """ Check if in given list of numbers, are any two numbers closer to each other than\n'
        "    given threshold.\n"
        "    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n"
        "    False\n"
        "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n"
        "    True\n"
        '    """\n'
        "\n"  # the problem ends with a newline, and the template adds one before the closing fence
        "```"
    )


def test_mbpp_11_is_the_raw_task_statement():
    assert load_prompts("mbpp")[0].text == (
        "Write a python function to remove first and last occurrence of a given character from the string.")


@needs_source_data
def test_every_humaneval_prompt_is_the_template_around_the_source_problem():
    source = [json.loads(line) for line in (SOURCE_DATA / "humaneval.jsonl").read_text().splitlines()]
    expected = [(p["task_id"], "Write a solution to the following problem and make sure that it passes the tests:\n"
                 f"```python\n{p['prompt']}\n```") for p in source]
    assert [(p.id, p.text) for p in load_prompts("humaneval")] == expected


@needs_source_data
def test_every_mbpp_prompt_is_the_source_prompt_of_the_test_split():
    source = json.loads((SOURCE_DATA / "mbpp_sanitized.json").read_text())
    expected = [(f"mbpp/{p['task_id']}", p["prompt"]) for p in sorted(source, key=lambda p: p["task_id"])
                if 11 <= p["task_id"] <= 510]
    assert [(p.id, p.text) for p in load_prompts("mbpp")] == expected


def test_sets_without_source_data_still_have_the_template_shape():
    for prompt in load_prompts("humaneval"):
        assert prompt.text.startswith("Write a solution to the following problem and make sure that it passes "
                                      "the tests:\n```python\n") and prompt.text.endswith("\n```")
    assert all(p.text.strip() and not p.text.startswith("Write a solution") for p in load_prompts("mbpp"))


def test_each_set_is_shipped_once_inside_the_package():
    """One copy of each data file: the sets live in the package; prompts/ holds how they are built."""
    for name in ("humaneval", "mbpp"):
        assert (REPO / "dflash_eval" / "data" / "prompts" / f"{name}.jsonl").is_file()
        assert not (REPO / "prompts" / f"{name}.jsonl").exists()
    assert (REPO / "prompts" / "LICENSES.md").exists() and (REPO / "prompts" / "README.md").exists()


@needs_source_data
def test_build_script_reproduces_the_committed_files():
    spec = importlib.util.spec_from_file_location("prompts_build", REPO / "prompts" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.main(["--check", "--data", str(SOURCE_DATA)]) == 0


def test_a_set_file_also_loads_as_a_custom_file():
    assert load_prompts(str(REPO / "dflash_eval" / "data" / "prompts" / "mbpp.jsonl")) == load_prompts("mbpp")


# --- custom JSONL --------------------------------------------------------------------------------------


def write_lines(path: Path, *rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_custom_jsonl_with_prompts_and_with_messages(tmp_path, tokenizer):
    conversation = [{"role": "system", "content": "You write terse Python."},
                    {"role": "user", "content": "Sort a list."},
                    {"role": "assistant", "content": "sorted(xs)"},
                    {"role": "user", "content": "Now in place."}]
    path = write_lines(tmp_path / "mine.jsonl",
                       {"id": "a", "prompt": "Reverse a string."},
                       "",  # blank lines are skipped
                       {"id": 7, "messages": conversation, "set": "chats"})
    plain, chat = load_prompts(str(path))
    assert plain == Prompt(id="a", text="Reverse a string.", set="mine")  # set defaults to the file's stem
    assert chat.id == "7" and chat.set == "chats" and list(chat.messages) == conversation
    assert json.loads(chat.text) == conversation  # the text that keys the continuation cache covers every turn
    rendered = render_for_target([plain, chat], tokenizer, enable_thinking=False)
    assert rendered == [
        "<|im_start|>user\nReverse a string.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "<|im_start|>system\nYou write terse Python.<|im_end|>\n"
        "<|im_start|>user\nSort a list.<|im_end|>\n"
        "<|im_start|>assistant\nsorted(xs)<|im_end|>\n"
        "<|im_start|>user\nNow in place.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    ]
    # prompt_ids tokenizes exactly the rendered text
    assert tokenizer.decode(prompt_ids(tokenizer, chat, False)) == rendered[1]


@pytest.mark.parametrize("bad_line, problem", [
    ('{"id": "x", "prompt": "ok"', "not JSON"),
    ('["x", "a list"]', "expected a JSON object, got list"),
    ('{"prompt": "no id"}', 'missing "id"'),
    ('{"id": "x"}', 'missing "prompt" (one user message; "text" is an alias) or "messages"'),
    ('{"id": "x", "prompt": ""}', '"prompt" must be a non-empty string'),
    ('{"id": "x", "prompt": "p", "messages": [{"role": "user", "content": "m"}]}', 'give one of "prompt" (alias "text") and "messages"'),
    ('{"id": "x", "messages": []}', '"messages" must be a non-empty list'),
    ('{"id": "x", "messages": [{"role": "user"}]}', 'messages[0] must be an object with string "role" and "content"'),
    ('{"id": "x", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
     "the last message must be a user turn"),
    ('{"id": "first", "prompt": "again"}', "duplicate id 'first' (first on line 1)"),
])
def test_malformed_lines_are_reported_with_file_and_line_number(tmp_path, bad_line, problem):
    path = write_lines(tmp_path / "broken.jsonl", {"id": "first", "prompt": "fine"}, "", bad_line)
    with pytest.raises(InputError) as caught:
        load_prompts(str(path))
    assert caught.value.path == str(path)
    assert caught.value.problem.startswith("line 3: ") and problem in caught.value.problem
    assert str(caught.value).startswith(f"{path}: line 3: ")


def test_unusable_files_are_refused(tmp_path):
    with pytest.raises(InputError, match="no prompts in file"):
        load_prompts(str(write_lines(tmp_path / "empty.jsonl", "")))
    with pytest.raises(InputError, match=r"cannot read prompts: no such file \(prompt sources: humaneval, mbpp, demo"):
        load_prompts(str(tmp_path / "missing.jsonl"))
    with pytest.raises(InputError, match="use dir:"):
        load_prompts(str(tmp_path))


# --- dir:PATH ------------------------------------------------------------------------------------------


def test_dir_source_builds_completion_prompts_from_source_file_heads(tmp_path):
    root = tmp_path / "myrepo"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def add(a, b):\n    return a + b\n\n\n")
    (root / "pkg" / "sub" / "util.ts").write_text("export const one = 1;\n")
    (root / "main.go").write_text("package main\n// use ```fences``` in docs\n")
    long_lines = [f"x_{i:05d} = {i}  # padding padding padding\n" for i in range(400)]  # ~16k characters
    (root / "big.py").write_text("".join(long_lines))
    (root / "README.md").write_text("# not code\n")          # no code extension
    (root / "blob.py").write_bytes(b"\x89PNG\x00\xff\xfe")     # not UTF-8 text
    (root / "blank.py").write_text("\n\n")                    # nothing to continue
    for skipped in (".git", "__pycache__", "node_modules", ".venv"):
        (root / skipped).mkdir()
        (root / skipped / "hidden.py").write_text("print('never')\n")

    prompts = load_prompts(f"dir:{root}")
    assert [p.id for p in prompts] == ["big.py", "main.go", "pkg/core.py", "pkg/sub/util.ts"]  # sorted relative paths
    assert {p.set for p in prompts} == {"dir:myrepo"}
    by_id = {p.id: p.text for p in prompts}
    assert by_id["pkg/core.py"] == "Continue this file:\n```python\ndef add(a, b):\n    return a + b\n```"
    assert by_id["pkg/sub/util.ts"] == "Continue this file:\n```typescript\nexport const one = 1;\n```"
    # code containing a triple backtick gets a longer fence, so the fence still encloses the whole file
    assert by_id["main.go"] == "Continue this file:\n````go\npackage main\n// use ```fences``` in docs\n````"
    # long files: the head, cut at a line boundary, at most HEAD_CHARS characters
    head = by_id["big.py"].removeprefix("Continue this file:\n```python\n").removesuffix("\n```")
    assert len(head) <= HEAD_CHARS and (head + "\n") in "".join(long_lines)
    assert head + "\n" == "".join(long_lines[: head.count("\n") + 1])
    assert len(head) > HEAD_CHARS - len(long_lines[0])  # as many whole lines as fit


def test_dir_source_refuses_missing_and_empty_directories(tmp_path):
    with pytest.raises(InputError, match="no such directory"):
        load_prompts(f"dir:{tmp_path / 'nowhere'}")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("no code here\n")
    with pytest.raises(InputError, match="no source files found") as caught:
        load_prompts(f"dir:{tmp_path / 'docs'}")
    assert caught.value.path == str(tmp_path / "docs")


# --- limit and seed ------------------------------------------------------------------------------------


def test_limit_takes_the_first_prompts_and_a_seed_a_stable_random_subset():
    everything = load_prompts("mbpp")
    assert load_prompts("mbpp", limit=5) == everything[:5]
    picked = load_prompts("mbpp", limit=20, seed=3)
    assert picked == load_prompts("mbpp", limit=20, seed=3)  # deterministic
    assert len(picked) == 20 and picked != everything[:20]
    position = {p.id: i for i, p in enumerate(everything)}
    assert [position[p.id] for p in picked] == sorted(position[p.id] for p in picked)  # kept in the set's order
    assert load_prompts("mbpp", limit=20, seed=4) != picked
    assert set(load_prompts("mbpp", limit=8, seed=3)) <= set(picked)  # a smaller limit: a subset of a larger one
    assert load_prompts("mbpp", seed=3) == everything == load_prompts("mbpp", limit=1000, seed=3)
    with pytest.raises(InputError, match="at least 1"):
        load_prompts("mbpp", limit=0)


# --- what the target sees ------------------------------------------------------------------------------


def test_render_for_target_shows_the_chat_template_with_thinking_on_and_off(tokenizer):
    prompt = load_prompts("mbpp", limit=1)
    user = ("<|im_start|>user\nWrite a python function to remove first and last occurrence of a given character "
            "from the string.<|im_end|>\n<|im_start|>assistant\n")
    assert render_for_target(prompt, tokenizer, enable_thinking=True) == [user]
    assert render_for_target(prompt, tokenizer, enable_thinking=False) == [user + "<think>\n\n</think>\n\n"]
    first = load_prompts("humaneval", limit=1)
    assert render_for_target(first, tokenizer, enable_thinking=False)[0] == (
        f"<|im_start|>user\n{first[0].text}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


# --- the `prompts` commands ------------------------------------------------------------------------------


def test_prompts_list_names_every_set_with_its_size():
    from typer.testing import CliRunner

    from dflash_eval.cli import app

    result = CliRunner().invoke(app, ["prompts", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name, count in (("humaneval", 164), ("mbpp", 257), ("demo", 12)):
        assert re.search(rf"│ {name} +│ +{count} │", result.stdout), name
    assert "dir:PATH" in result.stdout


@pytest.mark.parametrize("thinking, ending", [
    ("--no-thinking", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ("--thinking", "<|im_start|>assistant\n"),
])
def test_prompts_show_prints_the_templated_text_sent_to_the_target(thinking, ending):
    from typer.testing import CliRunner

    from dflash_eval.cli import app

    result = CliRunner().invoke(app, ["prompts", "show", "humaneval", "--id", "HumanEval/0", thinking],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # the panel's borders aside, the lines are the chat-templated prompt (the demo target's tokenizer)
    body = [line.strip("│ ").rstrip() for line in result.stdout.splitlines()[1:-1]]
    assert body[0] == "<|im_start|>user"
    assert body[1] == "Write a solution to the following problem and make sure that it passes the tests:"
    assert body[2] == "```python" and body[3] == "from typing import List"
    expected_tail = ending.rstrip("\n").split("\n")
    while body and body[-1] == "":
        body.pop()
    assert body[-len(expected_tail):] == expected_tail


def test_prompts_show_refuses_an_unknown_id_in_one_line():
    from typer.testing import CliRunner

    from dflash_eval.cli import app

    result = CliRunner().invoke(app, ["prompts", "show", "mbpp", "--id", "nope"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: mbpp: no prompt with id 'nope'"


def test_every_jsonl_file_words_a_bad_line_the_same_way(tmp_path):
    """One reader (core/jsonl.py) for every JSONL file: prompts, --responses, samples.jsonl, server responses and
    AIPerf records each say `FILE: line N: not JSON (why)` / `FILE: line N: not a JSON object`."""
    from dflash_eval.core.documents.results import read_samples
    from dflash_eval.core.errors import InputError
    from dflash_eval.pipeline.prompts import read_prompts_file
    from dflash_eval.pipeline.responses import read_responses
    from dflash_eval.serving.exports.aiperf import read_records
    from dflash_eval.serving.exports.responses import read_requests

    bad = tmp_path / "bad.jsonl"
    readers = [read_prompts_file, lambda p: read_responses(p, None, 10), read_samples, read_requests, read_records]
    for text, said in (("\n{oops\n", "line 2: not JSON (Expecting"), ("\n[1, 2]\n", "line 2: not a JSON object")):
        bad.write_text(text)
        for reader in readers[2:4] if "object" in said else readers:  # prompts, responses, AIPerf: their own words
            with pytest.raises(InputError) as refused:
                reader(bad)
            assert refused.value.one_line().startswith(f"{bad}: {said}"), (reader, refused.value.one_line())
