"""The trainers' own logged metrics, read as the trainers write them (HF Trainer's trainer_state.json
log_history; speculators 0.9.0's scalars through its TensorBoardHandler), set beside measured tau in `track`,
and the flag for a training metric that keeps improving while the measured tau falls."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.errors import InputError
from dflash_eval.formats import trainer_logs as T

runner = CliRunner()

# transformers' TrainerState.save_to_json: log_history entries as Trainer.log writes them (train and eval)
HF_STATE = {
    "best_metric": None, "best_model_checkpoint": None, "epoch": 3.0, "eval_steps": 10, "global_step": 30,
    "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
    "log_history": [
        {"epoch": 1.0, "grad_norm": 2.5, "learning_rate": 0.001, "loss": 3.0, "step": 10},
        {"epoch": 1.0, "eval_accuracy": 0.40, "eval_loss": 2.8, "eval_runtime": 1.2, "step": 10},
        {"epoch": 2.0, "grad_norm": 1.5, "learning_rate": 0.0008, "loss": 2.0, "step": 20},
        {"epoch": 2.0, "eval_accuracy": 0.60, "eval_loss": 2.1, "eval_runtime": 1.1, "step": 20},
        {"epoch": 3.0, "grad_norm": 1.0, "learning_rate": 0.0005, "loss": 1.5, "step": 30},
        {"epoch": 3.0, "eval_accuracy": 0.75, "eval_loss": 1.9, "eval_runtime": 1.1, "step": 30},
        {"epoch": 3.0, "step": 30, "total_flos": 1.0e12, "train_loss": 2.1, "train_runtime": 9.0},
    ],
    "logging_steps": 10, "max_steps": 30, "num_train_epochs": 3, "save_steps": 10, "trial_name": None,
}


def test_hf_trainer_state_log_history(tmp_path):
    (tmp_path / "trainer_state.json").write_text(json.dumps(HF_STATE, indent=2))
    log = T.find_trainer_logs(tmp_path)
    assert log.series["eval_accuracy"] == [(10, 0.40), (20, 0.60), (30, 0.75)]
    assert log.series["loss"] == [(10, 3.0), (20, 2.0), (30, 1.5)]
    assert T.value_at(log.series["eval_accuracy"], 25) == 0.60 and T.value_at(log.series["loss"], 5) is None
    # a trainer_state.json without log_history (a checkpoint's step only) is no log at all
    other = tmp_path / "other"
    other.mkdir()
    (other / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    assert T.find_trainer_logs(other) is None
    with pytest.raises(InputError, match="has no log_history list"):
        T.read_hf_trainer_state(other / "trainer_state.json")


def test_speculators_scalars_from_its_tensorboard_handler(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    # speculators 0.9.0 train/logger.py TensorBoardHandler: add_scalar(flattened key, value, global_step=step)
    writer = SummaryWriter(log_dir=str(tmp_path / "logs"))
    for step, eal, acc in ((100, 2.0, 0.5), (200, 2.5, 0.6), (300, 2.9, 0.7)):
        writer.add_scalar("train/eal", eal, global_step=step)
        writer.add_scalar("train/position_1_acc", acc, global_step=step)
        writer.add_scalar("train/lr", 1e-4, global_step=step)
    writer.add_scalar("val/eal_epoch", 2.7, global_step=300)
    writer.close()
    log = T.find_trainer_logs(tmp_path)
    assert [s for s, _ in log.series["train/eal"]] == [100, 200, 300]
    assert log.series["train/position_1_acc"][-1][1] == pytest.approx(0.7)
    assert log.series["val/eal_epoch"] == [(300, pytest.approx(2.7))]


def test_eal_is_flagged_across_speculators_0_9_0():
    assert "not comparable across these checkpoints" in T.eal_note(["0.8.1", "0.9.0"])
    assert "pre-0.9.0 definition" in T.eal_note(["0.8.1"])
    assert T.eal_note(["0.9.0", "0.9.1.dev3"]) is None and T.eal_note([None]) is None


def test_a_metric_that_keeps_improving_while_tau_falls_is_flagged_by_hand():
    taus, margins = [2.0, 3.0, 2.6, 2.2], [0.1, 0.1, 0.1, 0.1]
    flag = T.rising_while_flat("eval_accuracy", [0.4, 0.6, 0.7, 0.8], taus, margins)
    assert flag == ("eval_accuracy kept rising (0.6 -> 0.8) after the checkpoint where measured tau peaked (3.000), "
                    "while measured tau fell to 2.200")
    assert "kept falling (2 -> 1.5)" in T.rising_while_flat("loss", [3.0, 2.0, 1.8, 1.5], taus, margins)
    assert T.rising_while_flat("loss", [3.0, 2.0, 2.1, 2.2], taus, margins) is None  # loss went up: agrees
    assert T.rising_while_flat("eval_accuracy", [0.4, 0.6, 0.7, 0.8], [2.0, 3.0, 2.95, 2.95], margins) is None
    assert T.rising_while_flat("eval_accuracy", [0.4, 0.6, 0.8], [2.0, 2.5, 3.0], margins) is None  # tau peaks last


def test_track_sets_the_trainer_log_beside_the_curve(drafter_dirs, test_bed, tmp_path):
    save = tmp_path / "save"
    for step, source in ((10, "zlab"), (20, "sliding"), (30, "speculators")):
        shutil.copytree(drafter_dirs[source], save / f"checkpoint-{step}")
        state = dict(HF_STATE, global_step=step,
                     log_history=[e for e in HF_STATE["log_history"] if e["step"] <= step])
        (save / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))
    result = runner.invoke(app, ["track", str(save), "--target", str(test_bed["qwen3"]), "--out", str(tmp_path / "t"),
                                 "--max-new-tokens", "12", "--limit", "2", "--device", "cpu", "--cache-dir",
                                 str(tmp_path / "c"), "--settle", "0.2", "--no-html"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "t" / "track.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r for r in rows if r.get("role") == "checkpoint"}
    assert by_step[10]["trainer"]["values"]["eval_accuracy"] == 0.40
    assert by_step[20]["trainer"]["values"]["loss"] == 2.0 and "learning_rate" not in by_step[20]["trainer"]["values"]
    assert by_step[30]["trainer"]["values"]["eval_accuracy"] == 0.75
    assert "trainer eval_accuracy per step: 0.4, 0.6, 0.75" in result.stdout
    _track_html_shows_the_trainer_metrics(rows, tmp_path)


def _track_html_shows_the_trainer_metrics(rows, tmp_path):
    """track.html's trainer section on these real rows, their measured tau set to peak at step 20 and fall
    at 30 (beyond its interval) while the logged accuracy keeps rising and the loss keeps falling: one panel
    per metric with the divergence flags; in Chromium the chart renders and the flag is visible."""
    from test_html import DevTools, required_chromium

    from dflash_eval.render.html import write_html
    from dflash_eval.training.views.track import render_track_html

    points = sorted((r for r in rows if r.get("role") == "checkpoint"), key=lambda r: r["step"])
    for row, tau in zip(points, (1.5, 3.0, 1.2)):
        row["metrics"].update(tau_macro=tau, tau_macro_ci=[tau - 0.05, tau + 0.05])
    html = render_track_html(rows, None, {"prompts": [1, 2], "target": "t", "max_new_tokens": 12, "thinking": False})
    assert 'id="training"' in html and 'aria-label="training chart"' in html and "HF Trainer" in html
    assert ("TRAINING METRIC DIVERGES: eval_accuracy kept rising (0.6 -&gt; 0.75) after the checkpoint where "
            "measured tau peaked (3.000), while measured tau fell to 1.200") in html
    assert "TRAINING METRIC DIVERGES: loss kept falling (2 -&gt; 1.5)" in html
    page = write_html(tmp_path / "track.html", html)
    browser = DevTools(required_chromium(), tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_event("Page.loadEventFired")
        check = ("(() => { const s = document.querySelector('#training'); const r = s.querySelector('svg')"
                 ".getBoundingClientRect(); return [r.width > 200 && r.height > 100,"
                 " s.innerText.includes('TRAINING METRIC DIVERGES: eval_accuracy')]; })()")
        value = browser.send("Runtime.evaluate", {"expression": check, "returnByValue": True},
                             session=session)["result"]["value"]
        assert value == [True, True], value
    finally:
        browser.close()


def test_specforge_scalars_as_its_tensorboard_tracker_writes_them(tmp_path):
    """SpecForge scripts/train_dflash.py record_metrics -> specforge/tracker.py TensorboardTracker: a
    SummaryWriter on <output_dir>/runs, add_scalar(key, value, global_step=step) for the int/float values of
    {"train/lr", "train/loss", "train/accuracy"}; checkpoints epoch_<e>_step_<s>/ beside it."""
    from torch.utils.tensorboard import SummaryWriter

    output_dir = tmp_path / "outputs"
    writer = SummaryWriter(log_dir=str(output_dir / "runs"))
    for step, loss, acc in ((50, 3.1, 0.31), (100, 2.4, 0.45), (150, 2.0, 0.52)):
        for key, value in {"train/lr": 6e-4, "train/loss": loss, "train/accuracy": acc}.items():
            if isinstance(value, (int, float)):
                writer.add_scalar(key, value, global_step=step)
    writer.close()
    (output_dir / "epoch_0_step_100").mkdir()
    log = T.find_trainer_logs(output_dir)
    assert log.source.startswith("SpecForge: ") and T.trainer_of(log.series) == "SpecForge"
    assert [s for s, _ in log.series["train/accuracy"]] == [50, 100, 150]
    values = T.trainer_values([output_dir], 100, output_dir / "epoch_0_step_100")["values"]
    assert values == {"train/accuracy": pytest.approx(0.45), "train/loss": pytest.approx(2.4)}  # no lr


def test_deepspec_scalars_as_its_training_logger_writes_them(tmp_path):
    """deepseek-ai/DeepSpec deepspec/utils/training_logger.py: SummaryWriter(tensorboard_dir), then per
    logged optimizer step add_scalar(key, value, global_step) over the flushed summary (sorted "train/<name>"
    keys of utils/metrics.add_metric: per-position accept_rate@<i>, tau_probabilistic, ce_loss, loss, lr,
    grad_norm); checkpoints step_<n>/ with a step_latest link. Read when the TensorBoard folder lies inside
    the tracked folder."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "dflash_block7"
    writer = SummaryWriter(str(root / "tensorboard"))
    for step, tau in ((10, 1.8), (20, 2.3)):
        summary = {f"train/accept_rate@{i}": 0.9 - 0.1 * i for i in range(3)}
        summary.update({"train/ce_loss": 4.0 / tau, "train/grad_norm": 1.2, "train/loss": 4.0 / tau,
                        "train/lr": 1e-4, "train/tau_probabilistic": tau})
        for key, value in sorted(summary.items()):
            writer.add_scalar(key, value, step)
    writer.close()
    (root / "step_20").mkdir()
    (root / "step_latest").symlink_to("step_20", target_is_directory=True)
    log = T.find_trainer_logs(root)
    assert log.source.startswith("DeepSpec: ")
    values = T.trainer_values([root], 20, root / "step_20")["values"]
    assert values["train/tau_probabilistic"] == pytest.approx(2.3)
    assert values["train/accept_rate@1"] == pytest.approx(0.8) and "train/lr" not in values
    assert "train/grad_norm" not in values
    # a per-position accuracy that keeps rising while measured tau falls is flagged
    assert "kept rising" in T.rising_while_flat("train/accept_rate@1", [0.5, 0.6, 0.7, 0.8], [2.0, 3.0, 2.5, 2.2],
                                                [0.1] * 4)


def test_specforge_810_metric_families_as_its_tracker_writes_them(tmp_path):
    """SpecForge #810 (merged): the TensorBoard tracker as before, with the DFlash-family metrics under
    `train/dflash/*` and `train/dflash2/selector/*`, the expected-accepted-length proxies
    `dflash2/{hard_label,teacher}/expected_accepted_length`, per-position `position_<k>/...` with the objective's
    `position_<k>/objective/loss_weight_share`, `train/objective/lk_kl_weight`, and timings under `perf/*`."""
    from torch.utils.tensorboard import SummaryWriter

    output_dir = tmp_path / "outputs"
    writer = SummaryWriter(log_dir=str(output_dir / "runs"))
    for step, eal in ((50, 2.1), (100, 2.6)):
        scalars = {"train/loss": 4.0 / eal, "train/acc": eal / 5, "train/lr": 6e-4,
                   "train/dflash/hard_label/unary_top1_accuracy": eal / 6,
                   "train/dflash/hard_label/unary_top16_recall": 0.9,
                   "train/dflash2/selector/loss": 1.0 / eal, "train/dflash2/selector/greedy_accepted_length": eal,
                   "train/dflash2/hard_label/expected_accepted_length": eal + 0.1,
                   "train/dflash2/teacher/expected_accepted_length": eal + 0.2,
                   "train/position_1/hard_label/unary_top1_accuracy": 0.8,
                   "train/position_1/objective/loss_weight_share": 0.4, "train/objective/lk_kl_weight": 0.5,
                   "perf/step_time_s": 1.3}
        for key, value in scalars.items():
            writer.add_scalar(key, value, global_step=step)
    writer.close()
    (output_dir / "epoch_0_step_100").mkdir()
    log = T.find_trainer_logs(output_dir)
    assert T.trainer_of(log.series) == "SpecForge" and log.source.startswith("SpecForge: ")
    values = T.trainer_values([output_dir], 100, output_dir / "epoch_0_step_100")["values"]
    assert values["train/dflash2/hard_label/expected_accepted_length"] == pytest.approx(2.7)
    assert values["train/dflash2/teacher/expected_accepted_length"] == pytest.approx(2.8)
    assert values["train/dflash2/selector/greedy_accepted_length"] == pytest.approx(2.6)
    assert values["train/dflash/hard_label/unary_top16_recall"] == pytest.approx(0.9)
    assert values["train/position_1/hard_label/unary_top1_accuracy"] == pytest.approx(0.8)
    # objective weights and timings are not training metrics: never set beside tau, never flagged
    assert not {"train/position_1/objective/loss_weight_share", "train/objective/lk_kl_weight", "perf/step_time_s",
                "train/lr"} & set(values)
    # speculators' own per-position names stay speculators'
    assert T.trainer_of({"train/eal": [], "train/position_1_acc": []}) == "speculators"


def test_nemo_automodel_console_log_as_its_logger_writes_it(tmp_path):
    """NeMo Automodel train_dflash.py logs `epoch=%d step=%d loss=%.4f acc=%.4f lr=%.6g` on rank 0 every
    log_every_steps and train_dflash2.py's `_log_extra_train_metrics` the DFlash2 line right after; its only
    on-disk trace besides W&B is that console, here captured into a file by Python's logging as a job would."""
    import logging

    folder = tmp_path / "nemo-out"
    folder.mkdir()
    logger = logging.getLogger("nemo_automodel.recipes.llm.train_dflash2")
    handler = logging.FileHandler(folder / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for step, (loss, acc, accept, base, recall) in ((100, (9.29, 0.08, 1.156, 1.172, 0.38)),
                                                         (200, (6.64, 0.21, 2.094, 2.078, 0.68))):
            logger.info("epoch=%d step=%d loss=%.4f acc=%.4f lr=%.6g", 0, step, loss, acc, 2.01396e-05)
            logger.info("  dflash2: base_loss=%.4f selector_loss=%.4f base_acc=%.4f accept_len=%.3f "
                        "base_accept_len=%.3f candidate_recall=%.4f", loss - 1, 2.5, acc - 0.01, accept, base, recall)
        logger.info("Finished epoch 1/1 completed_steps=200 skipped_short_micro_batches=0")
    finally:
        logger.removeHandler(handler)
        handler.close()
    (folder / "epoch_0_step_200").mkdir()
    log = T.find_trainer_logs(folder)
    assert log.source.startswith("NeMo Automodel: console log")
    assert log.series["accept_len"] == [(100, 1.156), (200, 2.094)]
    values = T.trainer_values([folder], 200, folder / "epoch_0_step_200")["values"]
    assert values == {"loss": 6.64, "acc": 0.21, "base_loss": 5.64, "selector_loss": 2.5, "base_acc": 0.2,
                      "accept_len": 2.094, "base_accept_len": 2.078, "candidate_recall": 0.68}  # no lr
    assert "kept rising" in T.rising_while_flat("candidate_recall", [0.3, 0.5, 0.68], [2.0, 3.0, 2.2], [0.1] * 3)
