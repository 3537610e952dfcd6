"""The hostile sweep (issue 24): what a careless or unlucky user does to inputs, options and result folders,
each case a real file on disk and a real command. Every refusal is one `error:` line naming the file or
option and the problem, exit 2, no traceback, nothing created and every earlier result byte-identical; every
acceptance is a run that exits 0 with the right numbers. Two hypothesis properties close the classes: a
checkpoint number is accepted only when it is finite, in range and integral where it counts, and a tampered
samples file is refused by name unless the tampering left its rows as they were.

`CASES` are the refusals; the tests after it are the cases that need their own setup or must succeed."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_edits import DELETE, set_key
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "300"}
REPORT_RUN = Path(__file__).parent / "data" / "report_run"


# ------------------------------------------------------------------------------------------------ helpers


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fresh(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return path


def copy_tree(source: Path, dest: Path, edit=None, files=None) -> Path:
    shutil.copytree(source, fresh(dest))
    if edit is not None:
        config = json.loads((dest / "config.json").read_text())
        edit(config)
        (dest / "config.json").write_text(json.dumps(config))  # NaN / Infinity written as JSON extensions
    if files is not None:
        files(dest)
    return dest


def tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def save_tensors(folder: Path, state: dict) -> None:
    from safetensors.torch import save_file

    save_file(state, str(folder / "model.safetensors"))


def edit_tensor(name: str, change):
    def files(folder: Path) -> None:
        state = tensors(folder)
        state[name] = change(state[name])
        save_tensors(folder, state)
    return files


def poke_bytes(name: str, count: int = 1000, value: int = 0xFF):
    """`count` bytes of `value` written into the data of tensor `name`, the header left intact."""
    def files(folder: Path) -> None:
        path = folder / "model.safetensors"
        data = bytearray(path.read_bytes())
        header_len = int.from_bytes(data[:8], "little")
        begin, end = json.loads(data[8:8 + header_len])[name]["data_offsets"]
        start = 8 + header_len + begin
        size = min(count, end - begin)
        data[start:start + size] = bytes([value]) * size
        path.write_bytes(bytes(data))
    return files


def edit_header(change):
    """Rewrite the safetensors header (its JSON) and keep the data bytes."""
    def files(folder: Path) -> None:
        path = folder / "model.safetensors"
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        change(header)
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    return files


def template(text: str):
    def files(folder: Path) -> None:
        (folder / "chat_template.jinja").write_text(text)
    return files


def drop_tensor(name: str):
    def files(folder: Path) -> None:
        state = tensors(folder)
        del state[name]
        save_tensors(folder, state)
    return files


def add_tensor(name: str):
    def files(folder: Path) -> None:
        import torch

        save_tensors(folder, {**tensors(folder), name: torch.zeros(4, 4)})
    return files


def as_index(weight_map):
    """The single weights file behind an index whose weight_map is `weight_map` (a list, an int value)."""
    def files(folder: Path) -> None:
        (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def text_file(w, name: str, content: str | bytes) -> Path:
    path = w["root"] / "files" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def run_args(w, *extra, drafter=None, target=None, out=None, limit="2"):
    return ["run", "-d", str(drafter or w["drafter"]), "--target", str(target or w["target"]),
            "--out", str(out or (w["root"] / "new-out")), "--limit", limit, "--max-new-tokens", "8",
            "--device", "cpu", "--cache-dir", str(w["cache"]), "--no-html", *extra]


def refused(result, fragment: str) -> str:
    """The one error line (exit 2, no traceback); loading progress the libraries print may precede it."""
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert "\x1b" not in result.stderr
    return lines[0]


def interrupted(run_dir: Path) -> Path:
    """A finished run made into one killed after its prompts were written (what a resume sees)."""
    (run_dir / "run.json").unlink()
    state = json.loads((run_dir / "run_state.json").read_text())
    state["complete"] = False
    (run_dir / "run_state.json").write_text(json.dumps(state))
    return run_dir


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def world(drafter_dirs, test_bed, tmp_path_factory) -> dict[str, Path]:
    """A finished run on a private copy of the tiny target, and the drafters the cases are made from."""
    root = tmp_path_factory.mktemp("hostile")
    target = copy_tree(test_bed["qwen3"], root / "target")
    w = {"root": root, "target": target, "drafter": drafter_dirs["zlab"], "speculators": drafter_dirs["speculators"],
         "cache": root / "cache", "run": root / "run"}
    result = runner.invoke(app, run_args(w, out=w["run"]))
    assert result.exit_code == 0, result.output
    return w


def run_copy(w, name: str, change=None) -> Path:
    out = copy_tree(w["run"], w["root"] / "runs" / name)
    if change is not None:
        change(out)
    return out


def samples_edit(change):
    def edit(folder: Path) -> None:
        path = folder / "samples.jsonl"
        path.write_bytes(change(path.read_bytes()))
    return edit


def duplicate_first_row(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join([lines[0], *lines])


def drop_last_row(data: bytes) -> bytes:
    return b"".join(data.splitlines(keepends=True)[:-1])


def garbage_in_middle(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join([lines[0], b"{oops\n", *lines[1:]])


# ------------------------------------------------------------------------------------------------ the refusals

NAN, INF = float("nan"), float("inf")

# name -> (args builder, fragment expected in the one error line)
CASES = {
    # checkpoint numbers: refused by name by `run` (inspect: test_inspect_shows_each_bad_number_as_a_failure)
    "rope_theta NaN": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d1", set_key("rope_theta", NAN))),
                       "'rope_theta'=nan"),
    "rope_theta -5": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d2", set_key("rope_theta", -5))),
                      "'rope_theta'=-5"),
    "rope_theta 'abc'": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d3", set_key("rope_theta", "abc"))),
                         "'rope_theta'='abc'"),
    "rope_parameters factor -4": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d4", set_key(
        "rope_parameters", {"rope_type": "linear", "factor": -4, "rope_theta": 10000.0}))), "rope_parameters.factor'=-4"),
    "input_embedding_scale NaN": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d5", set_key(
        "dflash_config.input_embedding_scale", NAN))), "'input_embedding_scale'=nan"),
    "output_multiplier Infinity": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d6", set_key(
        "dflash_config.output_multiplier", INF))), "'output_multiplier'=inf"),
    "final_logit_softcapping -30": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d7", set_key(
        "final_logit_softcapping", -30))), "'final_logit_softcapping'=-30"),
    "block_size 8.7": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d8", set_key(
        "dflash_config.block_size", 8.7))), "'block_size'=8.7 is not an integer"),
    "block_size 2**40": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d9", set_key(
        "dflash_config.block_size", 1099511627776))), "block_size=1099511627776"),
    # a key z-lab's DFlashDraftModel reads with no default (issue 49 C: run and inspect took B = 16)
    "block_size null": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d19", set_key(
        "dflash_config.block_size", None))), "config key 'dflash_config.block_size' is null: z-lab's DFlashDraftModel"),
    "block_size absent": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d20", set_key(
        "dflash_config.block_size", DELETE))), "config key 'dflash_config.block_size' is missing"),
    "mask_token_id 1545.9": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d10", set_key(
        "dflash_config.mask_token_id", 1545.9))), "'mask_token_id'=1545.9 is not an integer"),
    "speculators_config a string": (lambda w: run_args(w, drafter=copy_tree(w["speculators"], w["root"] / "d11", set_key(
        "speculators_config", "dflash"))), "'speculators_config'='dflash' is not an object"),
    "an all-NaN fc.weight": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d12", files=edit_tensor(
        "fc.weight", lambda t: t * NAN))), "fc.weight holds NaN or infinite values"),
    "0xFF bytes in lm_head's data": (lambda w: run_args(w, drafter=copy_tree(w["speculators"], w["root"] / "d13",
                                                                            files=poke_bytes("lm_head.weight"))),
                                     "lm_head.weight holds NaN or infinite values"),
    "int8 weights": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d14", files=edit_tensor(
        "fc.weight", lambda t: t.to(__import__("torch").int8)))), "fc.weight is I8"),
    "unknown safetensors dtype": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d15", files=edit_header(
        lambda h: h["fc.weight"].__setitem__("dtype", "Q4")))), "unknown dtype 'Q4'"),
    "offsets that do not match the shape": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d16", files=edit_header(
        lambda h: h["norm.weight"].__setitem__("shape", [3, 7])))), "tensor 'norm.weight' holds"),
    "weight_map a list": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d17", files=as_index(
        ["model-00001-of-00001.safetensors"]))), "'weight_map' is not an object"),
    "weight_map holding an int": (lambda w: run_args(w, drafter=copy_tree(w["drafter"], w["root"] / "d18", files=as_index(
        {"fc.weight": 7}))), "weight_map['fc.weight'] = 7"),
    # targets (the earlier run in --out with --overwrite: nothing is deleted before everything is validated)
    "truncated target weights, --overwrite": (lambda w: run_args(w, "--overwrite", out=w["run"], target=copy_tree(
        w["target"], w["root"] / "t1", files=truncate_weights)), "truncated"),
    "NaN in the target's lm_head, --overwrite": (lambda w: run_args(w, "--overwrite", out=w["run"], target=copy_tree(
        w["target"], w["root"] / "t2", files=poke_output_head)), "holds NaN or infinite values"),
    # a target's weights get the presence check a drafter's get (issue 49 B: a missing tensor was re-initialised)
    "a target missing a tensor, --overwrite": (lambda w: run_args(w, "--overwrite", out=w["run"], target=copy_tree(
        w["target"], w["root"] / "t6", files=drop_tensor("model.layers.1.input_layernorm.weight"))),
        "model.safetensors: the target's weights lack 1 tensor the model has (model.layers.1.input_layernorm.weight)"),
    "a target holding a foreign tensor": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t7", files=add_tensor(
        "model.layers.0.mlp.extra_proj.weight"))), "hold 1 tensor this model has no place for (model.layers.0.mlp.extra_proj"),
    "a target tensor of another shape": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t8", files=edit_tensor(
        "model.norm.weight", lambda t: t[:-1].clone()))), "hold 1 tensor of another shape than the config gives (model.norm.weight"),
    # issue 49 G: the chat template is rendered once as a check before anything is written
    "a chat template that does not parse, --overwrite": (lambda w: run_args(w, "--overwrite", out=w["run"], target=copy_tree(
        w["target"], w["root"] / "t9", files=template("{% for m in messages %}{{ m.content }}"))),
        "chat_template.jinja: the chat template does not parse: TemplateSyntaxError at line 1"),
    "a chat template that raises": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t10", files=template(
        '{{ raise_exception("a system message is required") }}'))),
        "chat_template.jinja: the chat template raises on a conversation (TemplateError: a system message is required)"),
    # issue 49 K: a malformed generation_config.json was ignored (transformers falls back to config.json's ids,
    # which drops a stop token for Qwen3), and a config key no code of ours reads was not type-checked
    "a generation_config.json that is not JSON, --overwrite": (lambda w: run_args(w, "--overwrite", out=w["run"],
        target=copy_tree(w["target"], w["root"] / "t11", files=lambda d: (d / "generation_config.json").write_text(
            '{"eos_token_id": [5, 6'))), "generation_config.json: invalid JSON"),
    "an eos_token_id that is text": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t12", files=lambda d: (
        d / "generation_config.json").write_text('{"eos_token_id": "<|im_end|>"}'))),
        "generation_config.json: key 'eos_token_id'='<|im_end|>' is not a token id"),
    "attention_dropout 'high' (a key nothing of ours reads)": (lambda w: run_args(w, drafter=copy_tree(
        w["drafter"], w["root"] / "d21", set_key("attention_dropout", "high"))),
        "config key 'attention_dropout'='high' is not of the type transformers' Qwen3Config declares"),
    "num_hidden_layers 'six'": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t3", set_key(
        "num_hidden_layers", "six"))), "'num_hidden_layers'='six' is not an integer"),
    "text_config a string": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t4", set_key(
        "text_config", "qwen3"))), "'text_config' is str, not an object"),
    "target rope_theta NaN": (lambda w: run_args(w, target=copy_tree(w["target"], w["root"] / "t5", set_key(
        "rope_theta", NAN))), "'rope_theta'=nan"),
    # options
    "--temperature nan": (lambda w: run_args(w, "--temperature", "nan"), "invalid value for '--temperature': 'nan' is not a finite number"),
    "--temperature inf": (lambda w: run_args(w, "--temperature", "inf"), "invalid value for '--temperature': 'inf' is not a finite number"),
    "--temperature 1e-45": (lambda w: run_args(w, "--temperature", "1e-45"), "use --temperature 0 for greedy"),
    "--cache-dir a file": (lambda w: [*run_args(w)[:-2], str(text_file(w, "cache-file", "x")), "--no-html"],
                           "--cache-dir must be a folder"),
    "--out a dangling symlink": (lambda w: run_args(w, out=dangling(w)), "is a symbolic link to"),
    # prompt and response lines that crashed the parser
    "a 5000-digit id in a prompts line": (lambda w: run_args(w, "--prompts", str(text_file(
        w, "p-digits.jsonl", '{"id": ' + "9" * 5000 + ', "prompt": "x"}\n'))), "line 1: not JSON (a number"),
    "deeply nested JSON in a prompts line": (lambda w: run_args(w, "--prompts", str(text_file(
        w, "p-deep.jsonl", "[" * 100000 + "]" * 100000 + "\n"))), "line 1: not JSON (nested too deeply)"),
    "a 5000-digit id in a responses line": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r-digits.jsonl", '{"id": ' + "9" * 5000 + ', "response": "x"}\n'))), "line 1: not JSON (a number"),
    "deeply nested JSON in a responses line": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r-deep.jsonl", '{"id": "demo/0", "response": ' + "[" * 100000 + "]" * 100000 + "}\n"))),
        "line 1: not JSON (nested too deeply)"),
    # issue 49 E: internal errors instead of the option or the file named
    "doctor --seed -1": (lambda w: ["doctor", "-d", str(w["drafter"]), "--target", str(w["target"]), "--seed", "-1",
                                    "--device", "cpu"], "invalid value for '--seed': Input should be greater than or equal to 0"),
    "diff --seed -1": (lambda w: ["diff", str(w["run"]), str(w["run"]), "--seed", "-1"],
                       "invalid value for '--seed': Input should be greater than or equal to 0"),
    "track --settle 1e30": (lambda w: ["track", str(w["drafter"]), "--target", str(w["target"]), "--settle", "1e30",
                                       "--out", str(w["root"] / "new-out")], "'--settle': 1e30 is not <= 2.592e+06"),
    "an unpaired surrogate in a prompt": (lambda w: run_args(w, "--prompts", str(text_file(
        w, "p-surrogate.jsonl", '{"id": "s/0", "prompt": "Write \\ud800 a function."}\n'))),
        "p-surrogate.jsonl: line 1: not JSON (a lone UTF-16 surrogate \\ud800 at character 6"),
    "an unpaired surrogate in a response": (lambda w: run_args(w, "--responses", str(text_file(
        w, "r-surrogate.jsonl", '{"id": "demo/0", "response": "x\\udc00"}\n'))), "r-surrogate.jsonl: line 1"),
    # issue 49 J: a result folder edited so that its rows contradict their own walk or run.json's settings
    "report: a continuation token under an accepted draft": (lambda w: ["report", str(edited_report_run(
        w, "accepted-token", changed_accepted_token))], "but the continuation holds"),
    "show: an edited token piece": (lambda w: ["show", str(edited_report_run(w, "piece", changed_piece))],
                                    "the pieces were edited (each id has one decoded piece)"),
    "report: max_new_tokens the rows contradict": (lambda w: ["report", str(edited_report_run(
        w, "cap", lambda d: set_json(d / "run.json", "provenance.max_new_tokens", 8)))],
        "its continuation has 16 tokens, more than max_new_tokens 8"),
    # readers of a finished run's folder
    "report: a duplicated row": (lambda w: ["report", str(run_copy(w, "dup", samples_edit(duplicate_first_row)))],
                                 "line 2 repeats prompt 'demo/0'"),
    "diff: a duplicated row": (lambda w: ["diff", str(run_copy(w, "dup2", samples_edit(duplicate_first_row))),
                                          str(w["run"])], "repeats prompt 'demo/0'"),
    "show: a missing row": (lambda w: ["show", str(run_copy(w, "cut", samples_edit(drop_last_row)))],
                            "holds rows for 1 prompts, run.json counts 2"),
    "show: a garbage line in the middle": (lambda w: ["show", str(run_copy(w, "garbage", samples_edit(garbage_in_middle)))],
                                           "line 2: not JSON"),
    "report: a torn last line": (lambda w: ["report", str(run_copy(w, "torn", samples_edit(lambda d: d[:-40])))],
                                 ": torn (cut mid-write)"),
    "show: samples.jsonl deleted": (lambda w: ["show", str(run_copy(w, "nosamples", lambda d: (d / "samples.jsonl").unlink()))],
                                    "samples.jsonl: is missing"),
    "report: samples.jsonl not UTF-8": (lambda w: ["report", str(run_copy(w, "latin", samples_edit(
        lambda d: d.replace(b'"demo"', b'"d\xe9mo"', 1))))], "is not UTF-8 text"),
    "report: run.json is []": (lambda w: ["report", str(run_copy(w, "list", lambda d: (d / "run.json").write_text("[]")))],
                               "is not a run document"),
    "show: a row of another drafter": (lambda w: ["show", str(run_copy(w, "alien", samples_edit(
        lambda d: d.replace(b'"drafter": "zlab"', b'"drafter": "other"', 1))))], "row of drafter 'other'"),
}


def edited_report_run(w, name: str, change) -> Path:
    """A copy of the checked-in report run (trained drafters: walks that accept drafts) with one edit."""
    out = copy_tree(REPORT_RUN, w["root"] / "edited" / name)
    change(out)
    return out


def set_json(path: Path, key: str, value) -> None:
    document = json.loads(path.read_text())
    set_key(key, value)(document)
    path.write_text(json.dumps(document, indent=1))


def _edit_first_row(folder: Path, change) -> None:
    lines = (folder / "samples.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    change(row)
    (folder / "samples.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")


def changed_accepted_token(folder: Path) -> None:
    """The continuation token under the first accepted draft changed (its counts and bits left as they were)."""
    def change(row):
        p = row["prompt_len"]
        s = next(i for i, n in enumerate(row["walk_accept_lengths"]) if n >= 2)
        at = row["walk_anchors"][s] - p + 1
        row["continuation_ids"][at] = (row["continuation_ids"][at] + 1) % 500
    _edit_first_row(folder, change)


def changed_piece(folder: Path) -> None:
    """One piece of the continuation rewritten, its token id left: shown as if the target had written it."""
    def change(row):
        row["continuation_pieces"][3] = " rm -rf /"
    _edit_first_row(folder, change)


def truncate_weights(folder: Path) -> None:
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:5000])


def poke_output_head(folder: Path) -> None:
    """0xFF bytes in the target's output head (its lm_head, or the embedding a tied head reads)."""
    name = "lm_head.weight" if "lm_head.weight" in tensors(folder) else "model.embed_tokens.weight"
    poke_bytes(name)(folder)


def dangling(w) -> Path:
    link = fresh(w["root"] / "dangling-out")
    link.symlink_to(w["root"] / "nowhere" / "at-all")
    return link


def test_the_sweep_is_large_enough():
    assert len(CASES) >= 35


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_one_line_and_touches_nothing(name, world):
    build, fragment = CASES[name]
    args = build(world)
    before = snapshot(world["run"])
    out = world["root"] / "new-out"
    fresh(out)
    refused(runner.invoke(app, args, env=ENV), fragment)
    assert snapshot(world["run"]) == before, "an earlier run folder changed"
    assert not out.exists(), "--out was created although the input was refused"


@pytest.mark.parametrize("name", ["rope_theta NaN", "rope_parameters factor -4", "input_embedding_scale NaN",
                                  "output_multiplier Infinity", "an all-NaN fc.weight", "0xFF bytes in lm_head's data",
                                  "int8 weights", "block_size 2**40", "block_size null", "block_size absent"])
def test_inspect_shows_each_bad_number_as_a_failure(name, world):
    args = CASES[name][0](world)
    drafter = args[args.index("-d") + 1]
    result = runner.invoke(app, ["inspect", drafter, "--target", str(world["target"])], env=ENV)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ resume


def _resumable(w, name: str, *extra) -> tuple[Path, Path, list[str]]:
    """An interrupted run on its own copy of the target; the command that resumes it."""
    target = copy_tree(w["target"], w["root"] / f"rt-{name}")
    out = fresh(w["root"] / f"resume-{name}")
    args = run_args(w, *extra, target=target, out=out)
    assert runner.invoke(app, args).exit_code == 0
    return target, interrupted(out), args


def _new_weights(target: Path) -> None:
    state = tensors(target)
    name = next(n for n in state if n.endswith("mlp.down_proj.weight"))
    state[name] = state[name] * 1.5
    save_tensors(target, state)


@pytest.mark.parametrize("change,named", [
    ("weights", "target_weights"), ("chat template", "chat_template"), ("responses", "responses_file"),
    ("generation config", "target_config"),
])
def test_a_resume_after_an_input_changed_is_refused_naming_it(change, named, world):
    """Resume trusted paths, not contents: rows of two targets were mixed. Now every input is fingerprinted
    by content and a changed one is named, never mixed."""
    responses = text_file(world, f"resp-{named}.jsonl", '{"id": "demo/0", "response": "def f(): return 1"}\n'
                                                        '{"id": "demo/1", "response": "print(2)"}\n')
    extra = ("--responses", str(responses)) if change == "responses" else ()
    target, out, args = _resumable(world, named, *extra)
    before = snapshot(out)
    if change == "weights":
        _new_weights(target)
    elif change == "chat template":
        (target / "chat_template.jinja").write_text((target / "chat_template.jinja").read_text() + "\n{# edited #}")
    elif change == "responses":
        responses.write_text('{"id": "demo/0", "response": "other text"}\n{"id": "demo/1", "response": "print(2)"}\n')
    else:
        config = json.loads((target / "generation_config.json").read_text())
        config["eos_token_id"] = [0, 1]
        (target / "generation_config.json").write_text(json.dumps(config))
    line = refused(runner.invoke(app, args, env=ENV), "already holds a run with different settings")
    assert f"{named}:" in line
    assert snapshot(out) == before


def test_provenance_records_the_content_fingerprints(world):
    run = json.loads((world["run"] / "run.json").read_text())
    inputs = run["provenance"]["inputs"]
    assert set(inputs) == {"target_config", "target_weights", "tokenizer_files", "chat_template", "responses_file"}
    from dflash_eval.formats.files import files_digest

    assert inputs["target_weights"] == files_digest([world["target"] / "model.safetensors"])


def test_foreign_rows_in_an_interrupted_run_are_refused_by_name(world):
    target, out, args = _resumable(world, "foreign")
    with (out / "samples.jsonl").open("a") as sink:
        row = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
        sink.write(json.dumps({**row, "prompt_id": "alien/7"}) + "\n")
    before = snapshot(out)
    refused(runner.invoke(app, args, env=ENV), "holds a row for prompt 'alien/7'")
    assert snapshot(out) == before


# ------------------------------------------------------------------------------------------------ one writer


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(world):
    """Two runs into one --out interleaved their rows (24 instead of 12). The folder's lock (filelock),
    held here by another process, refuses the second one by name and leaves the folder as it was."""
    out = run_copy(world, "locked")
    interrupted(out)
    before = snapshot(out)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from filelock import FileLock
        lock = FileLock({str(out / 'run.lock')!r})
        lock.acquire()
        print("locked", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = run_args(world, out=out)
        args[args.index("--target") + 1] = str(world["target"])
        refused(runner.invoke(app, args, env=ENV), "is in use: another dflash-eval process is writing into it")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert snapshot(out) == before
    resumed = runner.invoke(app, run_args(world, out=out))  # the holder is gone: the same command resumes
    assert resumed.exit_code == 0, resumed.output


def test_read_run_refuses_duplicated_rows(world):
    import dflash_eval
    from dflash_eval.core.errors import InputError

    out = run_copy(world, "dup-read", samples_edit(duplicate_first_row))
    with pytest.raises(InputError, match="repeats prompt 'demo/0'"):
        dflash_eval.read_run(out)


@pytest.fixture(scope="module")
def shards(world):
    out = []
    for index in range(2):
        folder = fresh(world["root"] / f"shard{index}")
        result = runner.invoke(app, run_args(world, "--shard", f"{index}/2", out=folder, limit="4"))
        assert result.exit_code == 0, result.output
        out.append(folder)
    return out


def test_merge_refuses_a_torn_shard(world, shards):
    torn = copy_tree(shards[1], world["root"] / "shard1-torn")
    (torn / "samples.jsonl").write_bytes((torn / "samples.jsonl").read_bytes()[:-200])
    merged = fresh(world["root"] / "merged")
    refused(runner.invoke(app, ["merge", str(shards[0]), str(torn), "--out", str(merged), "--no-html"], env=ENV),
            ": torn (cut mid-write)")
    assert not merged.exists()
    whole = runner.invoke(app, ["merge", *map(str, shards), "--out", str(merged), "--no-html"])
    assert whole.exit_code == 0, whole.output
    assert json.loads((merged / "run.json").read_text())["provenance"]["prompts"]["count"] == 4


# ------------------------------------------------------------------------------------------------ --overwrite


def test_overwrite_removes_only_what_dflash_eval_wrote(world):
    out = run_copy(world, "mine")
    (out / "notes.txt").write_text("my notes")
    written = json.loads((out / "written.json").read_text())
    assert "notes.txt" not in written and {"run.json", "samples.jsonl", "run_state.json"} <= set(written)
    result = runner.invoke(app, run_args(world, "--overwrite", "--html", "--max-new-tokens", "6", out=out))
    assert result.exit_code == 0, result.output
    assert (out / "notes.txt").read_text() == "my notes"
    assert json.loads((out / "run.json").read_text())["provenance"]["max_new_tokens"] == 6
    assert "report.html" in json.loads((out / "written.json").read_text())


def test_the_same_command_on_a_finished_run_leaves_its_record(world):
    """Issue 49 K: rerunning the command that finished a run rewrote run.json with a recount of nothing (its
    work counters 0, a new `created`). The finished run is left as it is, byte for byte."""
    out = run_copy(world, "finished")
    before = snapshot(out)
    result = runner.invoke(app, run_args(world, out=out), env=ENV)
    assert result.exit_code == 0, result.output
    assert "already holds this run, finished" in result.output
    assert snapshot(out) == before


@pytest.mark.parametrize("command", [["report"], ["show"], ["show", "--worst", "2"]])
def test_an_output_that_cannot_hold_unicode_gets_ascii(command, world):
    """Issue 49 F: `PYTHONIOENCODING=ascii dflash-eval report|show` was an internal error (UnicodeEncodeError
    on the table borders and glyphs). A stdout that cannot hold Unicode gets ASCII: borders, bars and markers
    as ASCII, text from data as backslash escapes; every byte written is ASCII."""
    ascii_runner = CliRunner(charset="ascii")
    result = ascii_runner.invoke(app, [command[0], str(world["run"]), *command[1:]], env=ENV)
    assert result.exit_code == 0, (result.output, repr(result.exception))
    text = result.stdout_bytes.decode("ascii")  # raises on any other byte
    assert "internal error" not in text and ("drafter" in text or "zlab" in text)


def _with_small_files(code: str, limit: int = 4096) -> subprocess.CompletedProcess:
    """`code` run by Python under a file-size limit of `limit` bytes (RLIMIT_FSIZE; SIGXFSZ ignored), so a
    write past it fails in the kernel as a full disk does: an OSError from write() that carries no path."""
    prelude = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "300"}, timeout=300)


def test_a_refused_write_of_report_html_file_names_the_file(world, tmp_path):
    """Issue 49 H: `report --html-file` on a full disk said `error: No space left on device`, no path."""
    page = tmp_path / "page.html"
    done = _with_small_files(f"""
        import sys
        from dflash_eval.cli import main
        sys.argv = ["dflash-eval", "report", {str(world["run"])!r}, "--html-file", {str(page)!r}]
        main()
        """)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {page}: cannot write: File too large"), line
    assert not list(tmp_path.iterdir())  # no page, no temporary left


def test_a_refused_write_of_the_continuation_cache_names_the_file(tmp_path):
    """Issue 49 H: the continuation cache on a full disk (after the generation) was an error without a path."""
    done = _with_small_files(f"""
        from dflash_eval.core.errors import InputError
        from dflash_eval.pipeline.continuations import ContinuationCache
        from pathlib import Path
        cache = ContinuationCache(Path({str(tmp_path / "cache")!r}))
        try:
            cache.put("k" * 64, list(range(5000)))
        except InputError as exc:
            print(exc.one_line())
        """, limit=1024)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path / 'cache' / ('k' * 64 + '.json')}: cannot write: File too large", done.stdout


# ------------------------------------------------------------------------------------------------ accepted


def test_an_explicit_target_wins_over_an_unfindable_recorded_verifier(world):
    """A checkpoint trained elsewhere records the trainer's verifier path: --target is used, with a warning."""
    drafter = copy_tree(world["speculators"], world["root"] / "elsewhere",
                        set_key("speculators_config.verifier.name_or_path", "../the-trainers/target"))
    out = fresh(world["root"] / "elsewhere-run")
    result = runner.invoke(app, run_args(world, drafter=drafter, out=out), env=ENV)
    assert result.exit_code == 0, result.output
    warnings = json.loads((out / "run.json").read_text())["provenance"]["warnings"]
    assert any("../the-trainers/target" in w and "not found here" in w for w in warnings)
    # the tracker's view of a checkpoint goes the same way (it marked every such checkpoint invalid)
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.model.target import target_info
    from dflash_eval.pipeline.inputs import prepare_inputs, with_one_drafter

    options = RunOptions(drafters=[str(world["drafter"])], target=str(world["target"]), out=out, limit=2,
                         max_new_tokens=8, device="cpu", cache_dir=world["cache"])
    view = with_one_drafter(prepare_inputs(options), options, drafter, "elsewhere", target_info(world["target"]))
    assert any("not found here" in w for w in view.warnings)


@pytest.mark.parametrize("command", ["report", "diff"])
def test_html_exports_rerun_onto_an_existing_file(command, world):
    page = fresh(world["root"] / f"{command}.html")
    args = ["report", str(world["run"])] if command == "report" else ["diff", str(world["run"]), str(world["run"])]
    for _ in range(2):
        result = runner.invoke(app, [*args, "--html-file", str(page)], env=ENV)
        assert result.exit_code == 0, result.output
    assert page.read_text().startswith("<!DOCTYPE html>") or "<html" in page.read_text()


@pytest.mark.parametrize("content", [
    "\ufeff" + '{"id": "demo/0", "response": "a"}\n{"id": "demo/1", "response": "b"}\n',
    '{"id": "demo/0", "response": "line\u2028break"}\n{"id": "demo/1", "response": "par\u2029end"}\n',
], ids=["BOM", "U+2028"])
def test_responses_with_a_bom_or_unicode_line_separators_are_read(content, world):
    path = text_file(world, f"resp-{len(content)}.jsonl", content)
    out = fresh(world["root"] / f"resp-run-{len(content)}")
    result = runner.invoke(app, run_args(world, "--responses", str(path), out=out), env=ENV)
    assert result.exit_code == 0, result.output


def test_a_drafter_with_no_steps_gets_an_html_report(world):
    """Every response one token long: no drafter step anywhere; the report says so instead of failing."""
    path = text_file(world, "one-token.jsonl", '{"id": "demo/0", "response_ids": [5]}\n'
                                               '{"id": "demo/1", "response_ids": [6]}\n')
    out = fresh(world["root"] / "no-steps")
    result = runner.invoke(app, run_args(world, "--responses", str(path), "--html", out=out), env=ENV)
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert run["drafters"][0]["metrics"]["steps"] == 0 and (out / "report.html").is_file()


def test_labels_never_drive_the_terminal_through_warnings_or_emoji(world):
    """A drafter named with ESC and a glyph the chart font lacks (matplotlib's warning quoted it raw), and a
    prompt id with a Rich emoji code (Rich drew a cross mark): data reaches the terminal escaped, always."""
    prompts = text_file(world, "emoji.jsonl", '{"id": "ok:cross_mark:no", "prompt": "write a loop"}\n')
    out = fresh(world["root"] / "labels")
    result = runner.invoke(app, run_args(world, "--prompts", str(prompts), "--html", out=out,
                                         drafter=f"{world['drafter']}:esc\x1b[31m\u4e2d"), env=ENV)
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["show", str(out)], env=ENV)
    assert shown.exit_code == 0, shown.output
    for stream in (result.stdout, result.stderr, shown.stdout):
        assert "\x1b" not in stream and "\u274c" not in stream
    assert "ok:cross_mark:no" in shown.stdout and "esc\\x1b[31m" in result.stdout
    # warnings reach the real stderr only outside pytest's capture: the HTML charts drawn in a process of its own
    page = out / "again.html"
    done = subprocess.run([sys.executable, "-m", "dflash_eval", "report", str(out), "--html-file", str(page)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr
    assert "missing from font" in done.stderr  # the CJK glyph: the warning is shown, escaped
    assert "\x1b" not in done.stderr and "\x1b" not in done.stdout


def test_a_refused_write_names_the_file_and_leaves_no_temporary(tmp_path):
    """Disk full said "No space left on device" without a path and left a .tmp behind. A real refusal by the
    system (a file size limit, EFBIG) stands in for a full disk."""
    script = textwrap.dedent(f"""
        import resource, signal
        from pathlib import Path
        from dflash_eval.core.errors import InputError
        from dflash_eval.core.documents.results import atomic_write
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            atomic_write(Path({str(tmp_path / 'run.json')!r}), "x" * 5000)
        except InputError as exc:
            print(exc.one_line())
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{tmp_path / 'run.json'}: cannot write: File too large"), done.stdout
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ paired figures


def test_a_paired_figure_says_how_many_prompts_it_pairs():
    """The doctor printed `delta -2.42 [-2.70, -2.13], p = 0.5` for 2 of 13 prompts under a 13-prompt header."""
    from dflash_eval.core.compare import delta_tau_per_prompt, paired_figure
    from dflash_eval.core.gap import explain_gap

    base = {f"p{i}": (4, 12) for i in range(13)}
    other = {f"p{i}": ((2, 2) if i < 2 else (0, 0)) for i in range(13)}  # steps on 2 prompts only
    delta = delta_tau_per_prompt(base, other, common_only=True)
    assert (delta.n, delta.total, delta.too_few) == (2, 13, True) and delta.to_dict()["total"] == 13
    assert delta.estimate == pytest.approx(1.0 - 3.0)  # tau 2/2 - 12/4 on each paired prompt
    text = paired_figure(delta)
    assert text == "delta -2.00 over 2 of 13 prompts paired: too few pairs for an interval or a p-value (6 or more needed)"
    assert "p =" not in text and "[" not in text
    many = delta_tau_per_prompt(base, {f"p{i}": (4, 8) for i in range(13)})
    assert paired_figure(many).endswith("p < 0.001, 13 prompts paired")
    gap = explain_gap(base, other, [], base_name="mine", reference_name="ref")
    assert "too few to explain a gap" in gap["paragraph"] and "2 of 13 prompts paired" in gap["paragraph"]


def test_the_verdict_names_the_pairs_out_of_the_total():
    from dflash_eval.core.compare import delta_tau_per_prompt, verdict

    base = {f"p{i}": (4, 12) for i in range(13)}
    other = {f"p{i}": ((4, 8) if i < 8 else (0, 0)) for i in range(13)}
    line = verdict(delta_tau_per_prompt(base, other, common_only=True), "A", "B")
    assert "8 of 13 prompts paired" in line


# ------------------------------------------------------------------------------------------------ properties

PROPERTY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None, database=None,
                    derandomize=not os.environ.get("FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# numbers a checkpoint may carry: the valid, the edge and the hostile
checkpoint_numbers = st.one_of(
    st.integers(-5, 40), st.sampled_from([0, 1, 2, 16, 1024, 1025, 2**40, -(2**40), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([NAN, INF, -INF, 8.7, 1e-300, 0.5, 1.0]),
    st.sampled_from(["abc", "16", "", None, True, False, [], {}]),
)
NUMBER_KEYS = {  # key -> (where, valid when)
    "rope_theta": ("rope_theta", lambda v: _real(v) and v > 0),
    "rope factor": ("rope_parameters", lambda v: _real(v) and v >= 1),
    "block_size": ("dflash_config.block_size", lambda v: _integer(v) and 2 <= v <= 1024),
    "mask_token_id": ("dflash_config.mask_token_id", lambda v: _integer(v) and 0 <= v < SIZES["vocab"]),
    "input_embedding_scale": ("dflash_config.input_embedding_scale", lambda v: _real(v) and v > 0),
    "output_multiplier": ("dflash_config.output_multiplier", lambda v: _real(v) and v > 0),
    "final_logit_softcapping": ("dflash_config.final_logit_softcapping", lambda v: _real(v) and v > 0),
}


SIZES: dict[str, int] = {}  # the tiny target's vocabulary, read from its config by the property


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@PROPERTY
@given(key=st.sampled_from(sorted(NUMBER_KEYS)), value=checkpoint_numbers)
def test_a_checkpoint_number_is_accepted_only_when_valid(key, value, world, tmp_path_factory):
    from dflash_eval.model.target import target_info

    SIZES["vocab"] = target_info(world["target"]).vocab_size
    where, valid = NUMBER_KEYS[key]
    folder = tmp_path_factory.mktemp("num") / "drafter"
    if key == "rope factor":
        edit = set_key(where, {"rope_type": "linear", "factor": value, "rope_theta": 10000.0})
    elif key == "mask_token_id" and value is None:
        edit = set_key(where, -1)  # a missing mask id is its own refusal; test a value
        value = -1
    else:
        edit = set_key(where, value)
    copy_tree(world["drafter"], folder, edit)
    if value is None and key != "block_size":  # null: the format's default applies (no scales); z-lab has
        return  # no default block size (DFlashDraftModel reads config.block_size): null is refused
    result = runner.invoke(app, ["inspect", str(folder), "--target", str(world["target"])], env=ENV)
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, result.output
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
    assert (result.exit_code == 0) == valid(value), (key, value, result.stderr)


TAMPERING = ["duplicate", "delete", "cut", "garbage", "rename drafter", "rename prompt", "reorder", "blank line"]


@PROPERTY
@given(operation=st.sampled_from(TAMPERING), data=st.data())
def test_a_tampered_samples_file_is_refused_by_name(operation, data, tmp_path_factory):
    """Every change to a finished run's rows (a line repeated, dropped, cut, replaced, a row moved to another
    drafter or prompt) is refused by name by report, show, diff and read_run; reordering lines or adding a
    blank one changes no row and is accepted."""
    import dflash_eval
    from dflash_eval.core.errors import InputError

    folder = tmp_path_factory.mktemp("tamper") / "run"
    shutil.copytree(REPORT_RUN, folder)
    path = folder / "samples.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    i = data.draw(st.integers(0, len(lines) - 1))
    if operation == "duplicate":
        lines.insert(data.draw(st.integers(0, len(lines))), lines[i])
    elif operation == "delete":
        del lines[i]
    elif operation == "cut":
        blob = b"".join(lines)
        lines = [blob[: data.draw(st.integers(0, len(blob) - 2))]]
    elif operation == "garbage":
        lines[i] = data.draw(st.sampled_from([b"{oops\n", b"[]\n", b"42\n", b'"row"\n', b"\xff\xfe\n"]))
    elif operation in ("rename drafter", "rename prompt"):
        row = json.loads(lines[i])
        key = "drafter" if operation == "rename drafter" else "prompt_id"
        row[key] = data.draw(st.sampled_from(["trained", "repeat-anchor", "demo/0", "demo/1", "demo/2", "x"]))
        lines[i] = (json.dumps(row) + "\n").encode()
    elif operation == "reorder":
        lines = data.draw(st.permutations(lines))
    else:
        lines.insert(i, b"\n")
    path.write_bytes(b"".join(lines))
    unchanged = sorted(lines) == sorted(REPORT_RUN.joinpath("samples.jsonl").read_bytes().splitlines(keepends=True)) \
        or operation == "blank line"
    before = snapshot(folder)
    command = data.draw(st.sampled_from(["report", "show", "diff", "read_run"]))
    if command == "read_run":
        try:
            dflash_eval.read_run(folder)
            code = 0
        except InputError as exc:
            code, message = 2, exc.one_line()
            assert "samples.jsonl" in message
    else:
        args = {"report": ["report", str(folder)], "show": ["show", str(folder), "--first", "2"],
                "diff": ["diff", f"{folder}:trained", f"{folder}:repeat-anchor", "--force"]}[command]
        result = runner.invoke(app, args, env=ENV)
        assert "Traceback" not in result.output and result.exit_code in (0, 2), result.output
        code = result.exit_code
        if code == 2:
            assert "samples.jsonl" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert code == (0 if unchanged else 2), (operation, command)
    assert snapshot(folder) == before


def test_track_takes_a_checkpoint_trained_elsewhere_and_settles_a_copy(world, tmp_path):
    """track marked a checkpoint recording an unfindable verifier invalid although --target was given, and a
    copy of an evaluated checkpoint stayed "waiting (new)" forever (with --watch, every poll)."""
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.track_folder import read_log, read_rows
    from dflash_eval.training.commands.track import Tracking, TrackOptions, track

    save = tmp_path / "save"
    copy_tree(world["speculators"], save / "checkpoint-1",
              set_key("speculators_config.verifier.name_or_path", "/cluster/scratch/target"))
    options = TrackOptions(sources=[save], tracking=Tracking(settle=0.2), run=RunOptions(
        drafters=[], target=str(world["target"]), out=tmp_path / "track", limit=2, max_new_tokens=8, device="cpu",
        cache_dir=world["cache"]))
    first = track(options)
    assert [r["name"] for r in read_rows(tmp_path / "track")] == ["checkpoint-1"]
    assert not [e for e in read_log(tmp_path / "track") if e["event"] == "invalid"] and not first.pending()
    shutil.copytree(save / "checkpoint-1", save / "checkpoint-2")  # the same weights under another name
    again = track(options)
    assert len(read_rows(tmp_path / "track")) == 1
    assert again.waiting() == [] and again.pending() == []


def test_track_refuses_a_nan_target_before_touching_out(world, tmp_path):
    """track loads its target lazily, so a NaN in the target's weights was found only after --out had been
    created (or an earlier track removed by --overwrite): now one line, and neither folder is touched."""
    target = copy_tree(world["target"], tmp_path / "nan-target", files=poke_output_head)
    save = tmp_path / "save"
    copy_tree(world["speculators"], save / "checkpoint-1")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "track_state.json").write_text("{}")  # stands for an earlier track: must survive --overwrite
    for out, extra in ((tmp_path / "fresh", ()), (earlier, ("--overwrite",))):
        result = runner.invoke(app, ["track", str(save), "--target", str(target), "--out", str(out), "--limit", "1",
                                     "--max-new-tokens", "4", "--device", "cpu", "--no-html", *extra], env=ENV)
        assert "holds NaN or infinite values" in refused(result, "nan-target")
    assert not (tmp_path / "fresh").exists()
    assert sorted(p.name for p in earlier.iterdir()) == ["track_state.json"]


def test_an_empty_shard_gets_its_html_and_merges(world):
    """`--shard 1/2 --limit 1`: a shard without a prompt, so a drafter with no step; its HTML report failed."""
    folders = []
    for index in range(2):
        folder = fresh(world["root"] / f"tiny-shard{index}")
        result = runner.invoke(app, run_args(world, "--shard", f"{index}/2", "--html", out=folder, limit="1"), env=ENV)
        assert result.exit_code == 0, result.output
        assert (folder / "report.html").is_file()
        folders.append(folder)
    merged = fresh(world["root"] / "tiny-merged")
    result = runner.invoke(app, ["merge", *map(str, folders), "--out", str(merged)], env=ENV)
    assert result.exit_code == 0, result.output
    assert json.loads((merged / "run.json").read_text())["provenance"]["prompts"]["count"] == 1


def test_the_doctor_table_names_its_pairs_and_gives_no_interval_over_too_few():
    """A variant delta over 2 of 13 prompts reads as such: the pair count, no interval and no p-value."""
    from rich.console import Console

    from dflash_eval.doctor.views.terminal import render_doctor

    def variant(name, n, total):
        return {"variant": name, "tau_macro": 3.0, "identical_drafts": 0.5,
                "delta": {"estimate": -2.42, "low": -2.70, "high": -2.13, "p_value": 0.5, "n": n, "total": total}}

    result = {"drafter": "d", "prompts": 13, "mask_row": {"ok": True, "detail": "fine"},
              "kernels": {"compared": False, "detail": "no fla"}, "verdict": "none",
              "variants": [{"variant": "as configured", "tau_macro": 3.0, "identical_drafts": None, "delta": None},
                           variant("raw prompt", 2, 13), variant("anchor in context", 13, 13)]}
    console = Console(width=160, record=True, highlight=False)
    render_doctor(console, result)
    lines = console.export_text().splitlines()
    few = next(line for line in lines if "raw prompt" in line)
    assert "too few pairs" in few and "2/13" in few and "0.5" not in few and "[-2.70" not in few
    enough = next(line for line in lines if "anchor in context" in line)
    assert "[-2.70, -2.13]" in enough and "13" in enough
