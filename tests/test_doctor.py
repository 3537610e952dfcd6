"""`dflash-eval doctor` names the injected bug of each fixture drafter, and nothing for a correct one."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def bugged(trained, tmp_path_factory):
    """Two more fixture drafters with injected bugs: tap 1 dropped, taps shifted by one layer."""
    from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    root = tmp_path_factory.mktemp("bugged")
    target = load_target(str(trained["qwen3"]["target"]), device="cpu")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), 40)
    return {
        "drop": train_drafter(target, sequences, fixture_config(block_size=4, drop_tap=1), root / "drop"),
        "shift": train_drafter(target, sequences, fixture_config(block_size=4, shift_taps=1), root / "shift"),
        # trained on continuations made with thinking on (a Qwen3 target's default is off)
        "thinking": train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 40, enable_thinking=True),
                                  fixture_config(block_size=4), root / "thinking"),
        # labels from the logit lens of layer 3 of 6 (the "layer 61 of 64" bug)
        "lens": train_drafter(target, sequences, fixture_config(block_size=4, label_layer=3), root / "lens"),
    }


def doctor(drafter, target, tmp_path, *extra):
    result = runner.invoke(app, ["doctor", "-d", str(drafter), "--target", str(target), "--max-new-tokens", "40",
                                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "doc"), *extra],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "doc" / "doctor.json").read_text()), result.stdout


def test_correct_drafter_gets_no_mismatch(trained, tmp_path):
    report, stdout = doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path)
    assert report["verdict"].startswith("no mismatch found")
    # one per prompt, however many variants (10 here), plus one per prompt for each of 2 context variants
    assert report["passes"] == {"variants": 12, "thinking on": 12, "raw prompt (no chat template)": 12}
    assert report["tap_passes"] == 36
    assert len(report["variants"]) >= 8
    assert "verdict: no mismatch found" in stdout


def test_labels_from_an_inner_layer_are_named_with_that_layer(trained, bugged, tmp_path):
    report, stdout = doctor(bugged["lens"], trained["qwen3"]["target"], tmp_path)
    lens = report["logit_lens"]
    assert lens["best_layer"] == 3 and lens["final_layer"] == 5
    assert lens["agreement"]["3"] > lens["agreement"]["5"] + 0.1, lens["agreement"]
    assert "behaves as if trained to predict layer 3's logits instead of the final layer's" in report["verdict"]
    assert report["passes"]["variants"] == 12 and "logit lens" in stdout
    good, _ = doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path / "good")
    assert good["logit_lens"]["best_layer"] == 5 and good["logit_lens"]["finding"] is None


def test_anchor_in_context_bug_is_named(trained, tmp_path):
    report, _ = doctor(trained["qwen3"]["anchor_bug"], trained["qwen3"]["target"], tmp_path)
    assert report["finding"] == "anchor in context (p <= a)"
    assert report["verdict"].startswith("behaves as if trained with the anchor's own hidden state in its context: tau ")


def test_shifted_taps_are_named(trained, bugged, tmp_path):
    report, _ = doctor(bugged["shift"], trained["qwen3"]["target"], tmp_path)
    assert report["finding"].startswith("taps shifted +1")
    assert "z-lab t vs speculators t+1 numbering" in report["verdict"]


def test_dropped_tap_is_named(trained, bugged, tmp_path):
    report, _ = doctor(bugged["drop"], trained["qwen3"]["target"], tmp_path)
    assert report["finding"] == "tap 1 zeroed (layer 2)"
    assert report["verdict"].startswith("the projection ignores tap 1 (layer 2)")


def test_zeroed_target_taps_are_caught_before_any_drafter_runs(trained, tmp_path):
    """A target whose hidden states are all zero (as with a broken hybrid-layer extraction)."""
    broken = tmp_path / "zero-target"
    shutil.copytree(trained["qwen3"]["target"], broken)
    weights = load_file(str(broken / "model.safetensors"))
    weights["model.embed_tokens.weight"].zero_()
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    result = runner.invoke(app, ["doctor", "-d", str(trained["qwen3"]["good"]), "--target", str(broken),
                                 "--max-new-tokens", "8", "--limit", "2", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2
    assert "captured tap 0 (output of layer 1) is all zero" in result.stderr and "no drafter was run" in result.stderr


def test_doctor_into_a_run_folder_adds_its_section_to_run_json_and_the_html_report(trained, tmp_path):
    target = trained["qwen3"]["target"]
    out = tmp_path / "doc"
    ran = runner.invoke(app, ["run", "-d", str(trained["qwen3"]["anchor_bug"]), "--target", str(target), "--limit", "3",
                              "--max-new-tokens", "40", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    report, _ = doctor(trained["qwen3"]["anchor_bug"], target, tmp_path, "--limit", "3")
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["doctor"]["verdict"] == report["verdict"]
    html = (out / "report.html").read_text()
    assert "Doctor: " in html and "anchor in context (p &lt;= a)" in html
    assert '<a href="#doctor">doctor</a>' in html[html.index("<nav>"):html.index("</nav>")]  # linked, not buried
    assert html.index('<section id="verdict">') < html.index('<section id="summary">')
    assert "(doctor, doctor --out)" in html  # the verdict block carries the doctor's verdict


def test_doctor_on_a_run_replays_its_variants_with_the_run_s_final_block(trained, tmp_path):
    """A run made with --final-block full: doctor --out RUN takes the run's rule into `settings.scoring`, the
    one value every variant's replay gets (commands/variants.evaluate_variants takes nothing else), and
    refuses a rule given that is not the run's."""
    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.doctor.commands.doctor import settings_of_run

    target, drafter, out = trained["qwen3"]["target"], trained["qwen3"]["good"], tmp_path / "run"
    ran = runner.invoke(app, ["run", "-d", str(drafter), "--target", str(target), "--limit", "2", "--max-new-tokens",
                              "13", "--final-block", "full", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    settings = settings_of_run(RunOptions(drafters=[str(drafter)], out=out, device="cpu"))
    assert settings.scoring.final_block == "full" and settings.scoring.max_new_tokens == 13
    run = json.loads((out / "run.json").read_text())
    run["provenance"]["final_block"] = "shorter"  # the same folder, as a run made with z-lab's rule
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    assert settings_of_run(RunOptions(drafters=[str(drafter)], out=out)).scoring.final_block == "shorter"
    with pytest.raises(InputError, match="--final-block shorter, doctor was given 'full'"):
        settings_of_run(RunOptions(drafters=[str(drafter)], out=out, final_block="full"))


def test_doctor_at_temperature_above_zero_estimates_every_variant(trained, tmp_path):
    """At T > 0 each variant is an offline estimate on K sampled texts per prompt (one target pass per text);
    near T = 0 the estimate is the greedy number, so the doctor names the same bug with the same taus."""
    greedy, _ = doctor(trained["qwen3"]["anchor_bug"], trained["qwen3"]["target"], tmp_path / "g", "--limit", "6")
    cold, stdout = doctor(trained["qwen3"]["anchor_bug"], trained["qwen3"]["target"], tmp_path / "t", "--limit", "6",
                          "--temperature", "1e-6", "--samples", "2")
    assert cold["estimate"]["sampling"]["samples"] == 2 and cold["tap_passes"] == 12
    assert cold["finding"] == greedy["finding"] == "anchor in context (p <= a)"
    assert cold["verdict"].startswith("ESTIMATE: behaves as if trained with the anchor's own hidden state")
    for ours, theirs in zip(cold["variants"], greedy["variants"]):
        assert ours["variant"] == theirs["variant"]
        assert ours["tau_macro"] == pytest.approx(theirs["tau_macro"], abs=1e-9)
    warm, _ = doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path / "w", "--limit", "6",
                     "--temperature", "0.7", "--samples", "2")
    assert warm["verdict"].startswith("ESTIMATE: ") and all(v["tau_macro"] >= 1.0 for v in warm["variants"])


@pytest.mark.slow
def test_the_demo_gap_is_explained_by_the_anchor_variant(tmp_path):
    """The bundled demo: doctor --reference on the in-house drafter; the anchor-in-context variant closes most
    of the gap to the reference (one target pass per prompt for the drafter, its variants and the reference)."""
    from pathlib import Path

    models = Path(__file__).resolve().parents[1] / "dflash_eval" / "demo" / "models"
    result = runner.invoke(app, ["doctor", "-d", str(models / "demo-inhouse"), "--reference",
                                 str(models / "demo-reference"), "--no-thinking", "--max-new-tokens", "64",
                                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "doc")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "doc" / "doctor.json").read_text())
    gap = report["gap"]
    assert report["passes"]["variants"] == 12
    assert gap["gap"]["low"] > 1.0 and gap["explained_by"] == "anchor in context (p <= a)"
    best = next(v for v in gap["variants"] if v["variant"] == gap["explained_by"])
    assert best["share"] > 0.8 and best["share_ci"][0] > 0.5
    assert "Most likely it was trained with the anchor's own hidden state" in gap["paragraph"]
    assert "Check the training attention mask" in gap["paragraph"] and "share of the gap" in result.stdout
    # the context variants (on by default) never shrink the main table: all 12 prompts there, theirs apart
    assert gap["paired_prompts"] == 12 and gap["gap"]["n"] == gap["gap"]["total"] == 12
    context = gap["context"]
    assert {v["variant"] for v in context["variants"]} == {"thinking on", "raw prompt (no chat template)"}
    assert context["paired_prompts"] == len(context["prompt_ids"]) < 12  # named: the raw prompt ends at once on some
    assert "paired prompts of this table" in result.stdout
    # docs/doctor.md's figures are this run's (python -m dflash_eval.doctor.figures writes them)
    from dflash_eval.doctor.figures import BEGIN, DOCTOR_MD, END, figures

    page = DOCTOR_MD.read_text(encoding="utf-8")
    written = page[page.index(BEGIN) + len(BEGIN):page.index(END)].strip().splitlines()
    assert written == figures(report), "docs/doctor.md: rerun `python -m dflash_eval.doctor.figures`"


def test_gap_shares_by_hand():
    from dflash_eval.core.gap import explain_gap

    ids = [f"p{i}" for i in range(6)]
    base = {p: (10, 20) for p in ids}  # tau 2
    reference = {p: (10, 40) for p in ids}  # tau 4: a gap of 2
    half = {p: (10, 30) for p in ids}  # tau 3: closes half of it
    none = {p: (10, 20) for p in ids}
    result = explain_gap(base, reference, [("half", half, "trained oddly", "the odd part"),
                                           ("none", none, "fine", "nothing")], base_name="mine", reference_name="ref")
    assert result["gap"]["estimate"] == 2.0
    rows = {r["variant"]: r for r in result["variants"]}
    assert rows["half"]["share"] == 0.5 and rows["half"]["share_ci"] == [0.5, 0.5] and rows["half"]["significant"]
    assert rows["none"]["share"] == 0.0 and not rows["none"]["significant"]
    assert result["explained_by"] == "half" and "closes part of the gap, 50%" in result["paragraph"]
    assert "look at training itself as well" in result["paragraph"]
    nothing = explain_gap(base, base, [], base_name="mine", reference_name="ref")
    assert "no gap to explain" in nothing["paragraph"]


def _edited_copy(source, out, config_edit=None, tensor_edit=None):
    shutil.copytree(source, out)
    if config_edit:
        config = json.loads((out / "config.json").read_text())
        config_edit(config)
        (out / "config.json").write_text(json.dumps(config))
    if tensor_edit:
        tensors = load_file(out / "model.safetensors")
        tensor_edit(tensors)
        save_file(tensors, out / "model.safetensors")
    return out


@pytest.mark.slow
def test_rope_scaling_the_training_never_saw_is_named(trained, tmp_path):
    """The config records linear RoPE scaling x4 the drafter was not trained with (the ~3%-acceptance engine
    report): the no-scaling / target's-RoPE variant recovers the tau, and the verdict says so."""
    def scaled(config):
        config["transformer_layer_config"]["rope_parameters"] = {"rope_type": "linear", "rope_theta": 1000000.0,
                                                                 "factor": 4.0}

    bad = _edited_copy(trained["qwen3"]["good"], tmp_path / "scaled", config_edit=scaled)
    report, _ = doctor(bad, trained["qwen3"]["target"], tmp_path)
    names = [v["variant"] for v in report["variants"]]
    assert "RoPE: no scaling (default, theta 1000000.0)" in names
    assert report["finding"].startswith("RoPE: ") and "RoPE" in report["verdict"] and "factor" in report["verdict"]
    good, _ = doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path / "good")
    assert not any(v["variant"].startswith("RoPE") for v in good["variants"])  # nothing differs: no variant


def test_lm_head_copy_that_is_not_the_target_s_is_caught(trained, tmp_path):
    import torch

    def perturb(tensors):
        generator = torch.Generator().manual_seed(0)
        head = tensors["lm_head.weight"]
        tensors["lm_head.weight"] = head + torch.randn(head.shape, generator=generator) * head.std() * 3

    bad = _edited_copy(trained["qwen3"]["good"], tmp_path / "head", tensor_edit=perturb)
    report, stdout = doctor(bad, trained["qwen3"]["target"], tmp_path)
    assert report["tables"]["embedding"]["equal"] and not report["tables"]["lm_head"]["equal"]
    assert "lm_head copy vs the target's: DIFFERS" in stdout
    assert report["finding"] == "target's embedding and lm_head"
    assert "other embedding / lm_head tables" in report["verdict"]


@pytest.mark.slow
def test_a_drafter_trained_with_thinking_on_is_named_when_evaluated_with_it_off(trained, bugged, tmp_path):
    report, stdout = doctor(bugged["thinking"], trained["qwen3"]["target"], tmp_path)
    assert report["thinking"] is False and report["finding"] == "thinking on"
    assert report["verdict"].startswith("trained with thinking on: tau ")
    assert "when evaluated on continuations made with thinking on" in report["verdict"]
    assert "12 more target passes" in stdout
    good, _ = doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path / "good")
    assert all(c["delta"]["estimate"] < 0.1 for c in good["context_variants"])


def test_the_library_call_leaves_the_folder_the_command_leaves(trained, tmp_path):
    """`dflash_eval.run_doctor(...)` writes what `dflash-eval doctor --out RUN` writes: doctor.json, the
    'doctor' section in run.json and report.html again with it, each recorded in written.json; it takes the
    run's settings and the folder's lock itself, as the command does (no callback, no CLI step)."""
    import dflash_eval
    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.run_folder import FolderLock

    target, drafter = trained["qwen3"]["target"], trained["qwen3"]["anchor_bug"]
    made = tmp_path / "made"
    ran = runner.invoke(app, ["run", "-d", str(drafter), "--target", str(target), "--limit", "2", "--max-new-tokens",
                              "12", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--out", str(made)])
    assert ran.exit_code == 0, ran.output
    by_cli, by_library = tmp_path / "cli", tmp_path / "library"
    shutil.copytree(made, by_cli)
    shutil.copytree(made, by_library)
    done = runner.invoke(app, ["doctor", "-d", str(drafter), "--device", "cpu", "--cache-dir", str(tmp_path / "cache"),
                               "--out", str(by_cli)], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    options = RunOptions(drafters=[str(drafter)], out=by_library, device="cpu", cache_dir=tmp_path / "cache")
    other = FolderLock(by_library)
    other.acquire()  # another process writing the folder: the library refuses, as the command does
    try:
        before = {p.name: p.read_bytes() for p in by_library.iterdir()}
        with pytest.raises(InputError, match="is in use"):
            dflash_eval.run_doctor(options)
        assert {p.name: p.read_bytes() for p in by_library.iterdir()} == before
    finally:
        other.release()
    result = dflash_eval.run_doctor(options)

    def files(folder):
        return {p.relative_to(folder).as_posix(): p.read_bytes().replace(str(folder).encode(), b"<OUT>")
                for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.lock"}

    assert files(by_library) == files(by_cli)
    assert set(files(by_cli)) - set(files(made)) == {"doctor.json"}
    assert json.loads((by_library / "run.json").read_text())["doctor"] == result
    assert "doctor.json" in json.loads((by_library / "written.json").read_text())
    assert "Doctor: " in (by_library / "report.html").read_text()
