"""`--serving-target PATH`: the drop from the target to a quantised copy of it, split into the target's own
disagreement and the drafter's inputs (core/serving_split.py, commands/serving_target.py). The copies are real:
a GGUF written with the `gguf` package (llama.cpp's writer and quantisers) and read back by transformers' GGUF
loader, and weights rounded to int4 / float8_e4m3fn saved as a checkpoint transformers loads
(dflash_eval/testing/quantised.py). Never a mock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.serving_split import split_drop

runner = CliRunner()


def test_split_by_hand():
    """Two prompts, per-prompt taus (committed / steps): AA 4, 2; AB 3, 2; BA 3.5, 2; BB 2.5, 1.
    drop = mean(4 - 2.5, 2 - 1) = 1.25; target disagreement = mean(((4-3)+(3.5-2.5))/2, ((2-2)+(2-1))/2) = 0.75;
    drafter inputs = mean(((4-3.5)+(3-2.5))/2, ((2-2)+(2-1))/2) = 0.5; 0.75 + 0.5 = 1.25."""
    cells = {"AA": {"a": (2, 8), "b": (3, 6)}, "AB": {"a": (2, 6), "b": (3, 6)},
             "BA": {"a": (2, 7), "b": (3, 6)}, "BB": {"a": (2, 5), "b": (3, 3)}}
    split = split_drop(cells, n_resamples=200)
    assert split["tau"] == {"AA": 3.0, "AB": 2.5, "BA": 2.75, "BB": 1.75}
    assert split["drop"]["estimate"] == pytest.approx(1.25)
    assert split["target_disagreement"]["estimate"] == pytest.approx(0.75)
    assert split["drafter_inputs"]["estimate"] == pytest.approx(0.5)
    assert split["orders"]["verifier first"] == pytest.approx({"target_disagreement": 0.5, "drafter_inputs": 0.75})


@pytest.fixture(scope="module")
def copies(test_bed, tmp_path_factory) -> dict[str, Path]:
    from dflash_eval.testing.quantised import write_gguf_copy, write_rounded_copy

    root = tmp_path_factory.mktemp("served")
    target = test_bed["qwen3"]
    return {"gguf": write_gguf_copy(target, root / "gguf" / "qwen3-q4_0.gguf", "Q4_0"),
            "int4": write_rounded_copy(target, root / "int4", "int4"),
            "fp8": write_rounded_copy(target, root / "fp8", "fp8_e4m3"),
            "same": Path(shutil.copytree(target, root / "same"))}


def _run(args: list[str], out: Path) -> dict:
    result = runner.invoke(app, ["run", *args, "--prompts", "demo", "--limit", "8", "--max-new-tokens", "32",
                                 "--no-thinking", "--device", "cpu", "--no-html", "--out", str(out)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads((out / "run.json").read_text())


def _tau(run: dict, name: str) -> float:
    return next(d for d in run["drafters"] if d["name"] == name)["metrics"]["tau_macro"]


def test_split_of_an_int4_copy_sums_to_the_measured_drop(trained, copies, tmp_path):
    """The run with --serving-target (int4 copy): cell AA is the run's own tau, cell BB is `run --target COPY`'s,
    the two parts sum to the drop, and the drop measured by the two runs lies within the split's interval."""
    drafter = f"{trained['qwen3']['good']}:good"
    run = _run(["-d", drafter, "--target", str(trained["qwen3"]["target"]), "--serving-target", str(copies["int4"])],
               tmp_path / "a")
    served = _run(["-d", drafter, "--target", str(copies["int4"])], tmp_path / "b")
    section = run["serving_target"]
    row = section["drafters"][0]
    assert row["paired_prompts"] == row["prompts"] == 8
    assert row["tau"]["AA"] == pytest.approx(_tau(run, "good"), abs=1e-12)
    assert row["tau"]["BB"] == pytest.approx(_tau(served, "good"), abs=1e-12)
    parts = row["target_disagreement"]["estimate"] + row["drafter_inputs"]["estimate"]
    measured = _tau(run, "good") - _tau(served, "good")
    assert parts == pytest.approx(row["drop"]["estimate"], abs=1e-12) == pytest.approx(measured, abs=1e-12)
    assert row["drop"]["low"] <= measured <= row["drop"]["high"]
    assert section["argmax_disagreement"]["share"] > 0  # the int4 copy really argmaxes differently
    assert section["serving_target"]["quantisation"]["scheme"] == "int4"
    assert section["tap_passes"] == {"A": 16, "B": 16}  # both targets over both texts, 8 prompts
    assert "served with" in row["verdict"] and "the target's own disagreement" in row["verdict"]
    for fmt in ([], ["--markdown"]):  # the verdict block says it in every rendering of the report
        shown = runner.invoke(app, ["report", str(tmp_path / "a"), *fmt], env={"COLUMNS": "200"})
        assert shown.exit_code == 0 and "the target's own disagreement" in shown.output, shown.output


def test_gguf_copy_read_by_transformers_gguf_loader(trained, copies, tmp_path):
    run = _run(["-d", f"{trained['qwen3']['good']}:good", "--target", str(trained["qwen3"]["target"]),
                "--serving-target", str(copies["gguf"])], tmp_path / "g")
    section = run["serving_target"]
    assert section["serving_target"]["kind"] == "gguf" and section["serving_target"]["tensor_types"]["Q4_0"] > 0
    assert section["argmax_disagreement"]["share"] > 0
    row = section["drafters"][0]
    assert row["tau"]["AA"] == pytest.approx(_tau(run, "good"), abs=1e-12)
    assert row["target_disagreement"]["estimate"] + row["drafter_inputs"]["estimate"] == pytest.approx(
        row["drop"]["estimate"], abs=1e-12)


def test_an_unchanged_copy_has_no_drop_and_doctor_reports_it(trained, copies, tmp_path):
    result = runner.invoke(app, ["doctor", "-d", str(trained["qwen3"]["good"]), "--target",
                                 str(trained["qwen3"]["target"]), "--serving-target", str(copies["same"]), "--prompts",
                                 "demo", "--limit", "6", "--max-new-tokens", "24", "--no-thinking",
                                 "--no-context-variants", "--device", "cpu", "--out", str(tmp_path / "doc")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    section = json.loads((tmp_path / "doc" / "doctor.json").read_text())["serving_target"]
    row = section["drafters"][0]
    assert section["argmax_disagreement"]["differ"] == 0
    assert row["drop"]["estimate"] == 0 and row["target_disagreement"]["estimate"] == 0
    assert row["drafter_inputs"]["estimate"] == 0
    assert "Serving target" in result.stdout


@pytest.mark.parametrize("extra, message", [
    (["--temperature", "0.7"], "greedy drop"),
    (["--mode", "live"], "drop --mode live"),
    (["--shard", "0/2"], "drop --shard"),
])
def test_refused_with_what_it_cannot_split(trained, copies, tmp_path, extra, message):
    result = runner.invoke(app, ["run", "-d", str(trained["qwen3"]["good"]), "--target", str(trained["qwen3"]["target"]),
                                 "--serving-target", str(copies["int4"]), "--out", str(tmp_path / "r"), *extra])
    assert result.exit_code == 2 and message in result.output and not (tmp_path / "r").exists()


def test_a_copy_of_another_model_or_no_model_is_refused(trained, test_bed, tmp_path):
    target = str(trained["qwen3"]["target"])
    for path, message in ((tmp_path / "nothing", "not a model folder"), (tmp_path / "x.gguf", "no such GGUF file"),
                          (test_bed["qwen3_5_text"], "not a copy of the target")):
        result = runner.invoke(app, ["run", "-d", str(trained["qwen3"]["good"]), "--target", target, "--prompts", "demo",
                                     "--limit", "1", "--max-new-tokens", "8", "--no-html",
                                     "--serving-target", str(path), "--out", str(tmp_path / "r")])
        assert result.exit_code == 2 and message in result.output, result.output
