"""Data never drives a terminal, in any output format (issue 36, class 6).

Raw ESC bytes from prompt ids and drafter names reached report.html and `diff --html` unescaped (`cat
report.html` drove the terminal): the terminal escaped them, the HTML only autoescaped `<>&"'`. One rule
now covers every output (core/safe_text.printable): the templates print every value through it (render/html
`_visible`, Jinja's finalize), the CSV files and export-serving's text apply it to every cell and line, JSON
escapes by itself. Here a real run whose drafter names and prompt ids carry ESC, BEL, an OSC title sequence
and a C1 CSI, and a track whose checkpoint folder is named with ESC, go through every command that writes or
prints, and no output (file or stream) holds a control or invisible format character but newline and tab."""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def hidden(text: str) -> list[str]:
    return sorted({repr(ch) for ch in text if ch not in "\n\t"
                   and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")})


def ok(result) -> str:
    """What a command printed; its stderr holds the libraries' progress bars (their own carriage returns),
    never an escape from data."""
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stderr and "\x9b" not in result.stderr and "\x07" not in result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def outputs(escaped_run, tmp_path_factory) -> dict[str, str]:
    """Every output of every command over the run, by name: files and printed streams."""
    root = tmp_path_factory.mktemp("escape")
    run, a, b = escaped_run["folder"], escaped_run["a"], escaped_run["b"]
    dump = root / "metrics.txt"
    dump.write_text("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
                    "vllm:spec_decode_num_accepted_tokens_total 12\n")
    out = {"run report.html": (run / "report.html").read_text(), "per_position.csv": (run / "per_position.csv").read_text()}
    out["report"] = ok(runner.invoke(app, ["report", str(run), "--html-file", str(root / "r.html")], env=ENV))
    out["show"] = ok(runner.invoke(app, ["show", str(run), "--worst", "5"], env=ENV))
    out["diff"] = ok(runner.invoke(app, ["diff", f"{run}:{a}", f"{run}:{b}", "--html-file", str(root / "d.html")], env=ENV))
    out["diff --json"] = ok(runner.invoke(app, ["diff", f"{run}:{a}", f"{run}:{b}", "--json"], env=ENV))
    out["served"] = ok(runner.invoke(app, ["served", str(dump), "--run", f"{run}:{a}", "--html-file", str(root / "s.html")],
                                     env=ENV))
    out["served --json"] = ok(runner.invoke(app, ["served", str(dump), "--run", f"{run}:{a}", "--json"], env=ENV))
    out["export-serving sglang"] = ok(runner.invoke(app, ["export-serving", str(run), "--engine", "sglang",
                                                          "--drafter-name", a], env=ENV))
    out["export-serving vllm"] = ok(runner.invoke(app, ["export-serving", str(run), "--engine", "vllm", "--drafter-name", a,
                                                        "--out", str(root / "vllm.txt")], env=ENV))
    for name in ("r.html", "d.html", "s.html", "vllm.txt"):
        out[name] = (root / name).read_text()
    return out


def test_no_output_holds_a_control_character(outputs):
    found = {name: hidden(text) for name, text in outputs.items() if hidden(text)}
    assert not found, found


def test_the_names_are_shown_escaped_not_dropped(outputs, escaped_run):
    for name in ("run report.html", "r.html", "d.html"):
        page = outputs[name]
        assert "a\\x1b]0;owned\\x07" in page and "b\\x1b[31m" in page, name
    assert "p\\x1b[2J0" in outputs["r.html"] and "p\\x9b2" in outputs["r.html"]
    assert "a\\x1b]0;owned\\x07" in outputs["per_position.csv"] and "a\\x1b]0;owned\\x07" in outputs["vllm.txt"]
    assert json.loads(outputs["diff --json"])["a"]["name"] == escaped_run["a"]  # JSON keeps the name, escaped


def test_a_track_named_with_escapes_writes_escaped_files(test_bed, drafter_dirs, tmp_path):
    save = tmp_path / "save"
    shutil.copytree(drafter_dirs["zlab"], save / "checkpoint-10\x1b[31m")
    out = tmp_path / "track"
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # the charts' labels too: no raw ESC reaches the font
        warnings.simplefilter("always")
        printed = ok(runner.invoke(app, ["track", str(save), "--target", str(test_bed["qwen3"]), "--limit", "2",
                                         "--max-new-tokens", "6", "--device", "cpu", "--out", str(out)], env=ENV))
    assert not [w for w in caught if "\x1b" in str(w.message)], [str(w.message) for w in caught]
    texts = {"stdout": printed, **{p.name: p.read_text() for p in (out / "track.html", out / "track.csv",
                                                                   out / "track.jsonl")}}
    found = {name: hidden(text) for name, text in texts.items() if hidden(text)}
    assert not found, found
    assert "\\x1b[31m" in texts["track.html"] and "\\x1b[31m" in texts["track.csv"]
    assert Path(json.loads(texts["track.jsonl"].splitlines()[0])["path"]).name == "checkpoint-10\x1b[31m"
