"""Ambiguity is refused or said, never resolved in silence (issue 36, class 7).

A duplicate JSON key in a prompts row kept its last value, a responses row with both `response` and
`response_ids` used one of them, two conflicting `--semantics` for one drafter let the last win, and empty
responses were shown as `0/0 (0.00%)` with matplotlib warnings on stderr. Each case here, on real files and
a real run."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.stderr
    return lines[0]


def run_args(test_bed, drafter_dirs, tmp_path, *extra) -> list[str]:
    return ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--limit", "2",
            "--max-new-tokens", "6", "--device", "cpu", "--no-html", "--out", str(tmp_path / "out"), *extra]


def test_a_key_given_twice_is_refused_wherever_json_is_read(test_bed, drafter_dirs, tmp_path):
    """core/errors.loads, the one JSON reader: a prompts row, a responses row, a checkpoint's config."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():", "id": "b"}\n')
    for args in (run_args(test_bed, drafter_dirs, tmp_path, "--prompts", str(prompts)),
                 ["prompts", "show", str(prompts)],
                 ["plan", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--prompts", str(prompts)]):
        line = error_line(runner.invoke(app, args, env=ENV))
        assert "prompts.jsonl: line 1" in line and "the key 'id' appears twice" in line, line
    responses = tmp_path / "responses.jsonl"
    responses.write_text('{"id": "demo/0", "response": "x", "response": "y"}\n')
    line = error_line(runner.invoke(app, run_args(test_bed, drafter_dirs, tmp_path, "--responses", str(responses)), env=ENV))
    assert "the key 'response' appears twice" in line
    drafter = shutil.copytree(drafter_dirs["zlab"], tmp_path / "drafter")
    text = (drafter / "config.json").read_text()
    key = next(iter(json.loads(text)))  # its first key, given once more in front
    (drafter / "config.json").write_text(text.replace("{", "{" + json.dumps(key) + ': "again", ', 1))
    line = error_line(runner.invoke(app, ["inspect", str(drafter), "--target", str(test_bed["qwen3"])], env=ENV))
    assert "config.json" in line and "appears twice" in line, line
    assert not (tmp_path / "out").exists()


def test_a_response_given_both_ways_is_refused(test_bed, drafter_dirs, tmp_path):
    responses = tmp_path / "responses.jsonl"
    responses.write_text('{"id": "demo/0", "response": "return 1", "response_ids": [5, 6]}\n'
                         '{"id": "demo/1", "response": "x"}\n')
    line = error_line(runner.invoke(app, run_args(test_bed, drafter_dirs, tmp_path, "--responses", str(responses)), env=ENV))
    assert "line 1: both \"response\" and \"response_ids\" for id 'demo/0'" in line


def test_two_rule_sets_for_one_drafter_are_refused(test_bed, drafter_dirs, tmp_path):
    name = drafter_dirs["zlab"].name
    for pair in (["zlab", "vllm"], ["vllm", f"{name}=zlab"], [f"{name}=speculators", f"{name}=vllm"]):
        args = run_args(test_bed, drafter_dirs, tmp_path, *[x for rules in pair for x in ("--semantics", rules)])
        line = error_line(runner.invoke(app, args, env=ENV))
        assert "two rule sets" in line and repr(name) in line, line
    same = runner.invoke(app, run_args(test_bed, drafter_dirs, tmp_path, "--semantics", "vllm", "--semantics",
                                       f"{name}=vllm"), env=ENV)
    assert same.exit_code == 0, same.output  # the same rules twice: nothing to choose between


def test_empty_responses_are_said_or_refused(test_bed, drafter_dirs, tmp_path):
    every = tmp_path / "every.jsonl"
    every.write_text('{"id": "demo/0", "response": ""}\n{"id": "demo/1", "response_ids": []}\n')
    line = error_line(runner.invoke(app, run_args(test_bed, drafter_dirs, tmp_path, "--responses", str(every)), env=ENV))
    assert "every response is empty" in line
    some = tmp_path / "some.jsonl"
    some.write_text('{"id": "demo/0", "response": ""}\n{"id": "demo/1", "response": "    return a + b"}\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = run_args(test_bed, drafter_dirs, tmp_path, "--responses", str(some), "--html", "--out", str(tmp_path / "some"))
        result = runner.invoke(app, args, env=ENV)  # (the later --html and --out win over run_args' own)
    assert result.exit_code == 0, result.output
    assert "1 of 2 responses are empty (no token; first 'demo/0')" in " ".join(result.stdout.split())
    assert "0/0 tokens" not in result.stdout  # a share of nothing is never printed
    run = json.loads((tmp_path / "some" / "run.json").read_text())
    assert any("responses are empty" in w for w in run["provenance"]["warnings"])
    assert not [w for w in caught if "legend" in str(w.message)], [str(w.message) for w in caught]


def test_no_legend_warning_when_no_drafter_is_drawn():
    """The charts' legend only when something is labelled (render/charts.chart_legend)."""
    from matplotlib.figure import Figure

    from dflash_eval.render.charts import chart_legend

    ax = Figure().subplots()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chart_legend(ax, loc="upper right")
    assert ax.get_legend() is None
    ax.plot([1, 2], label="a")
    chart_legend(ax, loc="upper right")
    assert ax.get_legend() is not None


@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '{"x": {"b": [1], "b": [2]}}'])
def test_the_one_reader_refuses_repeats_even_of_equal_values(text):
    from dflash_eval.core.errors import loads

    with pytest.raises(ValueError, match="appears twice in one object"):
        loads(text)
    assert loads('{"a": {"a": 1}}') == {"a": {"a": 1}}  # the same name at two levels is two keys
