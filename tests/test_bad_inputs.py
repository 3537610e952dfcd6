"""The matrix of named bad inputs: every one exits 2 with one line on stderr naming what is wrong, prints
no traceback, and leaves an earlier run folder byte-identical. Each row is a (name, command, expected
fragment); the setup functions build real files in a temporary folder. Fuzzing the same surfaces with
generated inputs is tests/test_fuzz.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from json_edits import set_key
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def world(drafter_dirs, test_bed, tmp_path_factory) -> dict[str, Path]:
    """A finished run plus the raw material the bad inputs are made from."""
    root = tmp_path_factory.mktemp("bad")
    run_dir = root / "run"
    result = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
                                 "--out", str(run_dir), "--limit", "2", "--max-new-tokens", "8", "--device", "cpu",
                                 "--cache-dir", str(root / "cache"), "--no-html"])
    assert result.exit_code == 0, result.output
    return {"root": root, "run": run_dir, "drafter": drafter_dirs["zlab"], "target": test_bed["qwen3"],
            "cache": root / "cache"}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_drafter(w, name: str, edit=None, files=None) -> Path:
    out = w["root"] / "drafters" / name
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(w["drafter"], out)
    if edit is not None:
        config = json.loads((out / "config.json").read_text())
        edit(config)
        (out / "config.json").write_text(json.dumps(config))
    if files is not None:
        files(out)
    return out


def copy_target(w, name: str, change) -> Path:
    out = w["root"] / "targets" / name
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(w["target"], out)
    change(out)
    return out


def text_file(w, name: str, content: str | bytes) -> Path:
    path = w["root"] / "files" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def run_args(w, *extra, drafter=None, target=None, out=None):
    return ["run", "-d", str(drafter or w["drafter"]), "--target", str(target or w["target"]),
            "--out", str(out or (w["root"] / "new-out")), "--limit", "2", "--max-new-tokens", "8", "--device", "cpu",
            "--cache-dir", str(w["cache"]), "--no-html", *extra]


def truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def no_chat_template(folder: Path) -> None:
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def incomplete_run(w) -> Path:
    out = w["root"] / "incomplete"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(w["run"], out)
    (out / "run.json").unlink()
    state = json.loads((out / "run_state.json").read_text())
    state["complete"] = False
    (out / "run_state.json").write_text(json.dumps(state))
    return out


def broken_run_json(w) -> Path:
    out = w["root"] / "broken-run"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(w["run"], out)
    truncate(out / "run.json", 50)
    return out


def edited_run_json(w, edit) -> Path:
    out = w["root"] / "edited-run"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(w["run"], out)
    data = json.loads((out / "run.json").read_text())
    edit(data)
    (out / "run.json").write_text(json.dumps(data))
    return out


LONG_PROMPT = json.dumps({"id": "huge", "prompt": "word " * 5000}) + "\n"

# name -> (args builder, fragment expected in the one error line)
CASES = {
    # drafter checkpoints
    "drafter folder missing": (lambda w: run_args(w, drafter=w["root"] / "nope"), "no such file or directory"),
    "drafter without config.json": (lambda w: run_args(w, drafter=copy_drafter(
        w, "noconf", files=lambda d: (d / "config.json").unlink())), "no config.json"),
    "config.json not JSON": (lambda w: run_args(w, drafter=copy_drafter(
        w, "badjson", files=lambda d: (d / "config.json").write_text("{oops"))), "invalid JSON"),
    "config.json a list": (lambda w: run_args(w, drafter=copy_drafter(
        w, "list", files=lambda d: (d / "config.json").write_text("[1, 2]"))), "not an object"),
    "unknown checkpoint format": (lambda w: run_args(w, drafter=copy_drafter(
        w, "fmt", files=lambda d: (d / "config.json").write_text('{"model_type": "llama"}'))), "unknown format"),
    "weights missing": (lambda w: run_args(w, drafter=copy_drafter(
        w, "noweights", files=lambda d: (d / "model.safetensors").unlink())), "model.safetensors"),
    "weights truncated": (lambda w: run_args(w, drafter=copy_drafter(
        w, "trunc", files=lambda d: truncate(d / "model.safetensors", 2000))), "truncated"),
    "projection fed fewer taps than it expects": (lambda w: run_args(w, drafter=copy_drafter(
        w, "taps", set_key("dflash_config.target_layer_ids", [1, 2]))), "fc width"),
    "tap beyond the target's layers": (lambda w: run_args(w, drafter=copy_drafter(
        w, "deep", set_key("dflash_config.target_layer_ids", [1, 2, 40]))), "max tap 40"),
    "mask id outside the vocabulary": (lambda w: run_args(w, drafter=copy_drafter(
        w, "mask", set_key("dflash_config.mask_token_id", 10 ** 6))), "mask token id"),
    "DFlash2 key": (lambda w: run_args(w, drafter=copy_drafter(w, "dflash2", set_key("conv_kernel_size", 4))),
                    "conv_kernel_size"),
    "attention sinks": (lambda w: run_args(w, drafter=copy_drafter(w, "sinks", set_key("use_attention_sinks", True))),
                        "attention sinks"),
    "negative sliding window": (lambda w: run_args(w, drafter=copy_drafter(w, "win", set_key("sliding_window", -2))),
                                "sliding_window"),
    "is_causal not a boolean": (lambda w: run_args(w, drafter=copy_drafter(w, "causal", set_key("is_causal", "yes"))),
                                "is_causal"),
    "unknown attention kind": (lambda w: run_args(w, drafter=copy_drafter(
        w, "kind", set_key("layer_types", ["chunked_attention", "full_attention"]))), "chunked_attention"),
    "unknown dflash_config key": (lambda w: run_args(w, drafter=copy_drafter(
        w, "dkey", set_key("dflash_config.mystery", 1))), "dflash_config.mystery"),
    "hidden_act other than silu": (lambda w: run_args(w, drafter=copy_drafter(w, "act", set_key("hidden_act", "gelu"))),
                                   "hidden_act"),
    "the same :NAME twice": (lambda w: ["run", "-d", f"{w['drafter']}:x", "-d", f"{w['drafter']}:x", "--target",
                                        str(w["target"]), "--out", str(w["root"] / "o2")], "two drafters are named 'x'"),
    "one checkpoint twice without names": (lambda w: ["run", "-d", str(w["drafter"]), "-d", str(w["drafter"]),
                                                      "--target", str(w["target"]), "--out", str(w["root"] / "o3")],
                                           "give it a :NAME"),
    # targets
    "target folder missing": (lambda w: run_args(w, target=w["root"] / "no-target"), "no such file"),
    "target without config.json": (lambda w: run_args(w, target=copy_target(
        w, "noconf", lambda t: (t / "config.json").unlink())), "no config.json"),
    "target without tokenizer files": (lambda w: run_args(w, target=copy_target(
        w, "notok", lambda t: (t / "tokenizer.json").unlink())), "no tokenizer files"),
    "target without chat template": (lambda w: run_args(w, target=copy_target(w, "nochat", no_chat_template)),
                                     "no chat template"),
    "prompt longer than the target's positions": (lambda w: run_args(
        w, "--prompts", str(text_file(w, "long.jsonl", LONG_PROMPT))), "max_position_embeddings"),
    # prompts and responses
    "prompts file missing": (lambda w: run_args(w, "--prompts", str(w["root"] / "none.jsonl")), "none.jsonl"),
    "prompts line not JSON": (lambda w: run_args(w, "--prompts", str(text_file(w, "p1.jsonl", '{"id": "a"\n'))),
                              "p1.jsonl: line 1: not JSON"),
    "prompts row without id": (lambda w: run_args(w, "--prompts", str(text_file(w, "p2.jsonl", '{"prompt": "x"}\n'))),
                               "p2.jsonl: line 1: missing \"id\""),
    "unknown prompt set": (lambda w: run_args(w, "--prompts", "humaneval-plus"), "prompt sources: humaneval, mbpp, demo"),
    "responses file missing": (lambda w: run_args(w, "--responses", str(w["root"] / "r.jsonl")), "cannot read"),
    "responses line not JSON": (lambda w: run_args(w, "--responses", str(text_file(w, "r1.jsonl", "nope\n"))),
                                "line 1: not JSON"),
    "response ids outside the vocabulary": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r2.jsonl", '{"id": "demo/0", "response_ids": [1, 99999]}\n'))), "outside the target's vocabulary"),
    "response id repeated": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r3.jsonl", '{"id": "demo/0", "response": "a"}\n{"id": "demo/0", "response": "b"}\n'))), "appears twice"),
    "responses miss a prompt": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r4.jsonl", '{"id": "demo/0", "response": "a"}\n'))), "no response for prompt 'demo/1'"),
    # option values
    "--device tpu": (lambda w: run_args(w, "--device", "tpu"), "unknown --device 'tpu'"),
    "--dtype float8": (lambda w: run_args(w, "--dtype", "float8"), "unknown --dtype"),
    "--mode fast": (lambda w: run_args(w, "--mode", "fast"), "unknown --mode"),
    "--final-block half": (lambda w: run_args(w, "--final-block", "half"), "unknown --final-block"),
    "--kernels magic": (lambda w: run_args(w, "--kernels", "magic"), "unknown --kernels"),
    "--semantics unknown rules": (lambda w: run_args(w, "--semantics", "mine"), "unknown rules 'mine'"),
    "--semantics for an unknown drafter": (lambda w: run_args(w, "--semantics", "other=zlab"), "no drafter named"),
    # output folders and files
    "--out an existing file": (lambda w: run_args(w, out=text_file(w, "a-file", "x")), "exists and is not a folder"),
    "--out under /proc": (lambda w: run_args(w, out=Path("/proc/dflash-eval-out")), "special filesystem"),
    "--out a foreign folder": (lambda w: run_args(w, out=text_file(w, "foreign/notes.txt", "mine").parent),
                               "not a dflash-eval run folder"),
    "--out holds a run with other settings": (lambda w: ["run", "-d", str(w["drafter"]), "--target", str(w["target"]),
                                                         "--out", str(w["run"]), "--limit", "2", "--max-new-tokens",
                                                         "9", "--device", "cpu", "--cache-dir", str(w["cache"])],
                                              "max_new_tokens: 8 -> 9"),
    "report on a missing folder": (lambda w: ["report", str(w["root"] / "nothing")], "no run.json"),
    "report on an incomplete run": (lambda w: ["report", str(incomplete_run(w))], "incomplete run: 2 of 2 prompts"),
    "report on a truncated run.json": (lambda w: ["report", str(broken_run_json(w))], "invalid JSON"),
    "report on a run.json with a wrong field": (lambda w: ["report", str(edited_run_json(
        w, lambda d: d["drafters"][0].__setitem__("metrics", "nope")))], "metrics is not an object"),
    "report --html-file onto a folder": (lambda w: ["report", str(w["run"]), "--html-file", str(w["root"])], "is a folder"),
    "report --html-file under /proc": (lambda w: ["report", str(w["run"]), "--html-file", "/proc/x.html"], "special filesystem"),
    "diff with a missing side": (lambda w: ["diff", str(w["run"]), str(w["root"] / "gone")], "no run.json"),
    "diff --html-file onto a folder": (lambda w: ["diff", str(w["run"]), str(w["run"]), "--html-file", str(w["root"])],
                                  "is a folder"),
    "show with two block selections": (lambda w: ["show", str(w["run"]), "--worst", "2", "--first", "3"],
                                       "--worst and --first"),
    "show an unknown drafter": (lambda w: ["show", str(w["run"]), "--drafter-name", "nobody"], "no drafter 'nobody'"),
    "doctor --out onto a truncated run.json": (lambda w: ["doctor", "-d", str(w["drafter"]), "--out",
                                                          str(broken_run_json(w))], "invalid JSON"),
    "doctor --out a run with other tokens": (lambda w: ["doctor", "-d", str(w["drafter"]), "--out", str(w["run"]),
                                                        "--max-new-tokens", "32"], "--max-new-tokens 8"),
    "doctor --out an existing file": (lambda w: ["doctor", "-d", str(w["drafter"]), "--out",
                                                 str(text_file(w, "doc-file", "x"))], "exists and is not a folder"),
    "inspect a missing folder": (lambda w: ["inspect", str(w["root"] / "absent")], "no such file"),
    "rich markup in an error": (lambda w: run_args(w, drafter=w["root"] / "[bold red]x[/]"), "[bold red]x[/]"),
}


def test_the_matrix_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gives_one_line_and_changes_nothing(name, world):
    build, fragment = CASES[name]
    args = build(world)
    before = snapshot(world["run"])
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, (name, result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert "\x1b" not in result.stderr
    assert snapshot(world["run"]) == before, "an earlier run folder changed"


def test_an_internal_error_is_one_line_with_the_traceback_saved(world, tmp_path, monkeypatch):
    """A bug of ours (simulated: the report renderer raises) is exit 1, one line, the traceback in a file."""
    import dflash_eval.render.terminal as terminal

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(terminal, "render_report", broken)
    monkeypatch.setenv("DFLASH_EVAL_CACHE", str(tmp_path / "cache"))
    result = runner.invoke(app, ["report", str(world["run"])])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "internal error (RuntimeError: simulated bug)" in line
    saved = Path(line.rsplit("saved to ", 1)[1])
    assert saved.is_file() and "simulated bug" in saved.read_text() and "Traceback" in saved.read_text()


def test_overwrite_replaces_a_dflash_eval_folder_but_never_a_foreign_one(world, tmp_path):
    target = tmp_path / "again"
    shutil.copytree(world["run"], target)
    args = ["run", "-d", str(world["drafter"]), "--target", str(world["target"]), "--out", str(target), "--limit",
            "1", "--max-new-tokens", "6", "--device", "cpu", "--cache-dir", str(world["cache"]), "--no-html"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--overwrite to replace it" in refused.stderr
    replaced = runner.invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((target / "run.json").read_text())["provenance"]["max_new_tokens"] == 6
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    kept = runner.invoke(app, ["run", *args[1:4], "--target", str(world["target"]), "--out", str(foreign),
                               "--overwrite", "--cache-dir", str(world["cache"])])
    assert kept.exit_code == 2 and (foreign / "keep.txt").read_text() == "mine"


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("dflash-eval ")


def test_data_never_drives_the_terminal(world, tmp_path):
    """ESC bytes and Rich markup in prompt ids, prompt text and drafter names: shown as text, never applied,
    in run, report, show, prompts show, diff and doctor (the HTML is escaped by its own test)."""
    prompts = tmp_path / "evil.jsonl"
    prompts.write_text(json.dumps({"id": "\x1b]0;pwned\x07[bold red]id[/]", "prompt": "say \x1b[31mred\x1b[0m [link=x]y[/link]"})
                       + "\n" + json.dumps({"id": "p2", "prompt": "write fizzbuzz"}) + "\n")
    name = "[blink]me"
    out = tmp_path / "r"
    common = ["--target", str(world["target"]), "--max-new-tokens", "8", "--device", "cpu",
              "--cache-dir", str(world["cache"])]
    results = [runner.invoke(app, ["run", "-d", f"{world['drafter']}:{name}", "--prompts", str(prompts), "--out",
                                   str(out), "--no-html", *common], env={"COLUMNS": "200"})]
    results.append(runner.invoke(app, ["report", str(out)], env={"COLUMNS": "200"}))
    results.append(runner.invoke(app, ["show", str(out)], env={"COLUMNS": "200"}))
    results.append(runner.invoke(app, ["prompts", "show", str(prompts), "--target", str(world["target"])]))
    results.append(runner.invoke(app, ["diff", f"{out}:{name}", f"{out}:{name}"], env={"COLUMNS": "200"}))
    results.append(runner.invoke(app, ["doctor", "-d", str(world["drafter"]), "--prompts", str(prompts), *common],
                                 env={"COLUMNS": "200"}))
    for result in results:
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]0;pwned\\x07[bold red]id[/]" in results[1].stdout + results[2].stdout
    assert name in results[0].stdout and name in results[1].stdout
    assert "[link=x]y[/link]" in results[3].stdout


def test_doctor_out_a_run_uses_that_runs_settings(world, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(world["run"], run_dir)
    result = runner.invoke(app, ["doctor", "-d", str(world["drafter"]), "--out", str(run_dir), "--device", "cpu",
                                 "--cache-dir", str(world["cache"])], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    doctor = json.loads((run_dir / "doctor.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    assert doctor["max_new_tokens"] == run["provenance"]["max_new_tokens"] == 8
    assert doctor["prompts"] == run["provenance"]["prompts"]["count"] == 2
    assert doctor["thinking"] == run["provenance"]["enable_thinking"]
    assert run["doctor"]["max_new_tokens"] == 8
