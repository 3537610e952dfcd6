"""Property-based fuzzing of every file surface a user hands to dflash-eval (hypothesis): drafter
config.json (inspect), prompt JSONL (prompts show), responses JSONL (run) and a run folder's run.json /
samples.jsonl (report, show, diff). For every generated input: exit 0 or 2 (exit 1, an internal error, is
always a failure), no traceback, exactly one `error:` line when it fails, no raw control character on the
terminal, and every earlier file in the output folder byte-identical. Where a reader decides (run.json and
the rows: results.read_run_document and run_rows; responses: responses.responses_for) it is the oracle: an
input it accepts must succeed (exit 0), one it refuses must fail with the line naming that file. Valid
inputs are generated too. 300 examples per surface (FUZZ_EXAMPLES to change it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("FUZZ_RANDOM"), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
REPORT_RUN = Path(__file__).parent / "data" / "report_run"

# text that tries to break things: control characters, markup, bidi overrides, quotes, very long words
nasty_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\x1b[31mred", "[bold red]x[/]", "[link=http://x]y[/link]", "\u202egnp.exe", "\x00", "\r\n",
                     "'\"", "a" * 300, "demo/0", "", " "]),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 12, 10 ** 12),
                         st.floats(allow_nan=False, allow_infinity=False), nasty_text)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(nasty_text, inner, max_size=4)),
                           max_leaves=12)


def check(result, folder: Path | None = None, before: dict | None = None, *, refused_by: str | None | bool = True,
          ) -> None:
    """Exit 0 or 2, never 1 (an internal error is a bug, never a pass). `refused_by`: the readers' verdict,
    the oracle: None (the reader accepts the input: the command must succeed) or the file it names (the
    command must refuse with one line naming that file); True where no oracle is given."""
    assert result.exit_code in (0, 2), (result.exit_code, result.output, repr(result.exception))
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream
        assert "\x1b" not in stream and "\x00" not in stream
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    if refused_by is None:
        assert result.exit_code == 0, ("the reader accepts this input", result.output)
    elif isinstance(refused_by, str):
        assert result.exit_code == 2, ("the reader refuses this input", result.output)
        assert refused_by in result.stderr, (refused_by, result.stderr)
    if folder is not None:
        assert snapshot(folder) == before, "an earlier file changed"


def verdict(read) -> str | None:
    """None when `read()` accepts its input; else the file its InputError names."""
    from dflash_eval.core.errors import InputError

    try:
        read()
    except InputError as exc:
        return str(exc.path) if exc.path is not None else exc.one_line()
    return None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def paths_of(value, prefix=()):
    """Every (path) into a JSON document, for choosing where to mutate."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            yield from paths_of(child, (*prefix, index))


def mutate(document, choices, data):
    """Apply 1-3 edits: replace the value at a path with generated JSON, or delete the key."""
    document = json.loads(json.dumps(document))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in paths_of(document) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths if choices is None else [p for p in paths if p[0] in choices] or paths))
        node = document
        for part in path[:-1]:
            node = node[part]
        if isinstance(node, dict) and data.draw(st.booleans()):
            node.pop(path[-1], None)
        else:
            node[path[-1]] = data.draw(json_values)
    return document


# -- drafter config.json -----------------------------------------------------------------------------


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_fuzz_drafter_config(data, drafter_dirs, test_bed, tmp_path_factory):
    source = data.draw(st.sampled_from(["zlab", "speculators", "sliding"]))
    folder = tmp_path_factory.mktemp("cfg") / "drafter"
    shutil.copytree(drafter_dirs[source], folder)
    config = json.loads((folder / "config.json").read_text())
    raw = data.draw(st.one_of(st.just(None), st.binary(max_size=64)), label="raw bytes instead")
    if raw is not None and data.draw(st.integers(0, 9)) == 0:
        (folder / "config.json").write_bytes(raw)
    else:
        (folder / "config.json").write_text(json.dumps(mutate(config, None, data)))
    result = runner.invoke(app, ["inspect", str(folder), "--target", str(test_bed["qwen3"])], env={"COLUMNS": "200"})
    check(result)


# -- prompt JSONL --------------------------------------------------------------------------------------


prompt_rows = st.one_of(
    st.fixed_dictionaries({"id": json_scalars, "prompt": json_values}),
    st.fixed_dictionaries({"id": nasty_text, "messages": st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]),
                               "content": json_values}), max_size=3)}),
    json_values,
)


@pytest.mark.slow
@FUZZ
@given(rows=st.lists(prompt_rows, max_size=4), garbage=st.one_of(st.none(), st.binary(max_size=30)))
def test_fuzz_prompts_jsonl(rows, garbage, test_bed, tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(content + (garbage or b""))
    result = runner.invoke(app, ["prompts", "show", str(path), "--target", str(test_bed["qwen3"])],
                           env={"COLUMNS": "200"})
    check(result)


# -- responses JSONL -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(drafter_dirs, test_bed, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-run")
    args = ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out", str(root / "run"),
            "--limit", "2", "--max-new-tokens", "8", "--device", "cpu", "--cache-dir", str(root / "cache"),
            "--no-html"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return root, args


valid_response_rows = st.lists(st.fixed_dictionaries({"id": st.just("demo/0"), "response": st.text(min_size=1,
                                                                                                   max_size=40)}),
                               min_size=1, max_size=1).map(lambda rows: [*rows, {"id": "demo/1", "response": "ok"}])
response_rows = st.one_of(
    st.fixed_dictionaries({"id": st.sampled_from(["demo/0", "demo/1", "x"]), "response": json_values}),
    st.fixed_dictionaries({"id": st.sampled_from(["demo/0", "demo/1"]),
                           "response_ids": st.lists(st.one_of(st.integers(-5, 600), json_scalars), max_size=5)}),
    json_values,
)


@pytest.mark.slow
@FUZZ
@given(rows=st.one_of(st.lists(response_rows, max_size=4), valid_response_rows))
def test_fuzz_responses_jsonl(rows, finished_run, test_bed):
    """The finished run is never touched (responses are another setting: refused by name); a fresh folder
    gets what the responses reader says: run's exit 0 where it accepts the file, one line naming it where not."""
    from dflash_eval.model.target import load_tokenizer, target_info
    from dflash_eval.pipeline.responses import responses_for

    root, args = finished_run
    path = root / "responses.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = snapshot(root / "run")
    result = runner.invoke(app, [*args, "--responses", str(path)])
    check(result, root / "run", before)
    assert result.exit_code == 2  # valid responses are a different setting from the finished run's
    fresh = root / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    tokenizer, info = load_tokenizer(test_bed["qwen3"]), target_info(test_bed["qwen3"])
    refused = verdict(lambda: responses_for(path, tokenizer, info.vocab_size, ["demo/0", "demo/1"]))
    out = args.index("--out") + 1
    result = runner.invoke(app, [*args[:out], str(fresh), *args[out + 1:], "--responses", str(path)])
    check(result, refused_by=refused)


# -- run.json / samples.jsonl for report, show, diff ------------------------------------------------------


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_fuzz_run_folder(data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(REPORT_RUN, folder)
    which = data.draw(st.sampled_from(["run.json", "samples.jsonl", "both"]))
    if which in ("run.json", "both"):
        run = json.loads((folder / "run.json").read_text())
        run = mutate(run, ("drafters", "provenance", "schema_version", "doctor"), data)
        (folder / "run.json").write_text(json.dumps(run))
    if which in ("samples.jsonl", "both"):
        lines = (folder / "samples.jsonl").read_text().splitlines()
        index = data.draw(st.integers(0, len(lines) - 1))
        row = mutate(json.loads(lines[index]), None, data)
        lines[index] = json.dumps(row) if data.draw(st.integers(0, 4)) else json.dumps(row)[: data.draw(st.integers(0, 40))]
        (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    before = snapshot(folder)
    command = data.draw(st.sampled_from(["report", "show", "diff"]))
    if command == "report":
        args = ["report", str(folder)]
    elif command == "show":
        args = ["show", str(folder), data.draw(st.sampled_from(["--worst", "--first"])), "2"]
    else:
        args = ["diff", f"{folder}:trained", f"{folder}:repeat-anchor", "--force"]
    result = runner.invoke(app, args, env={"COLUMNS": "160"})
    refused = run_folder_verdict(folder)
    # diff also refuses by name what the readers accept (a drafter renamed away, block sizes that differ)
    check(result, folder, before, refused_by=True if command == "diff" and refused is None else refused)


def run_folder_verdict(folder: Path) -> str | None:
    """The readers' verdict on a run folder (run.json, then its rows): what report and show must follow."""
    from dflash_eval.core.documents.results import read_run_document
    from dflash_eval.core.documents.run_rows import run_rows

    return verdict(lambda: run_rows(folder, read_run_document(folder)))


def test_the_untouched_run_folder_renders(tmp_path):
    """The valid input: the readers accept the stored run, and report, show and diff print it (exit 0)."""
    folder = tmp_path / "run"
    shutil.copytree(REPORT_RUN, folder)
    assert run_folder_verdict(folder) is None
    for args in (["report", str(folder)], ["show", str(folder), "--worst", "2"],
                 ["diff", f"{folder}:trained", f"{folder}:repeat-anchor", "--force"]):
        check(runner.invoke(app, args, env={"COLUMNS": "160"}), refused_by=None)
