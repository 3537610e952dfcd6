"""What the trainer itself logged, read from disk as the trainers write it, so `track` can set the training
metrics beside the tau it measures per checkpoint and flag a training metric that keeps improving while the
measured tau does not (SpecForge #533: 98% acceptance in training, 10% served).

Sources (read in the trainers' code):
- HF Trainer (`transformers/trainer_callback.py` `TrainerState.save_to_json`): `trainer_state.json` in the save
  folder or in each `checkpoint-N/`, `log_history` a list of dicts, each with `step` and the logged keys
  (`loss`, `eval_loss`, `learning_rate`, any `eval_*`); the newest file (largest `global_step`) holds them all.
- speculators 0.9.0 (`train/trainer.py`, `train/logger.py`): `metric_logger.info({"train": metrics, ...})`
  per logged step and `{"val": {k + "_epoch": v}}` per epoch, flattened with "/" by its TensorBoard / wandb /
  trackio / mlflow handlers (`train/eal`, `train/position_1_acc`, `val/eal_epoch`, `val/loss_epoch`, ...);
  the only files on disk are TensorBoard event files (`events.out.tfevents.*`), read with the tensorboard
  package when installed (refused by name otherwise). `eal` changed meaning in 0.9.0 (PR #1032; now the
  mean per-block accepted run + 1, `models/metrics.py` `compute_accepted_length_counts`): values from
  checkpoints before and after that version are not comparable, and are flagged.
- SpecForge (`scripts/train_dflash.py` `record_metrics`, `specforge/tracker.py` `TensorboardTracker`):
  `tracker.log({"train/lr", "train/loss", "train/accuracy"}, step=global_step)` every `--log-interval`
  steps (`eval/loss`, `eval/accuracy` likewise); with `--report-to tensorboard` the scalars go to
  `<output_dir>/runs`, beside its `epoch_<e>_step_<s>/` checkpoints, so the save folder's event files are
  read. Its unified trainer (`specforge/training/controller.py`) logs `train/acc`, `train/acc_<i>`,
  `train/ploss_<i>` per position the same way. wandb / swanlab / mlflow keep no readable file; the console
  line ("Train - Step N [...], Loss: x, Acc: y") is not written to disk by SpecForge.
- DeepSpec (deepseek-ai/DeepSpec `deepspec/utils/training_logger.py`, `utils/metrics.py` `add_metric`):
  `SummaryWriter(logging.tensorboard_dir).add_scalar("train/<name>", value, global_step)` every
  `logging_steps`: `train/loss`, `train/ce_loss`, `train/accept_rate@<i>` per block position,
  `train/tau_probabilistic`, `train/lr`, `train/grad_norm`. Its checkpoints are `step_<n>/` under
  `logging.checkpoint_dir`; the example configs put `tensorboard_dir` elsewhere (~/tensorboard/<project>/<exp>),
  so its scalars are read only when that folder lies inside the tracked save folder.
- SpecForge after #810 ("structured DFlash2 training metrics"): the same TensorBoard tracker, metric families
  `train/dflash/*` (hard-label unary top-1 / top-k recall and mass, target probability), `train/dflash2/
  selector/*` (loss, conditional and serving-path accuracy, greedy accepted length), the expected-accepted-
  length proxies `dflash2/{hard_label,teacher}/expected_accepted_length`, per-position `position_<k>/...`
  (its `position_<k>/objective/loss_weight_share` and `train/objective/lk_kl_weight` are objective weights,
  not metrics: never shown nor flagged) and timings under `perf/*` (not shown).
- NeMo Automodel (`nemo_automodel/recipes/llm/train_dflash.py` `run_train_validation_loop`,
  `train_dflash2.py` `_log_extra_train_metrics`): W&B (no readable file) and its console, rank 0 every
  `log_every_steps`: `logger.info("epoch=%d step=%d loss=%.4f acc=%.4f lr=%.6g", ...)` then, DFlash2,
  `"  dflash2: base_loss=%.4f selector_loss=%.4f base_acc=%.4f accept_len=%.3f base_accept_len=%.3f
  candidate_recall=%.4f"`; the console captured to a `*.log` file in the tracked folder is read, each
  dflash2 line belonging to the step line before it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError, read_json_object

EAL_CHANGED_IN = (0, 9, 0)
LOWER_IS_BETTER = ("loss",)


@dataclass
class TrainerLog:
    """Logged series: metric name -> [(step, value)] sorted by step; where they came from."""

    source: str
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _add(log: TrainerLog, name: str, step: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(step, int):
        return
    if math.isfinite(float(value)):
        log.series.setdefault(name, []).append((step, float(value)))


def read_hf_trainer_state(path: Path) -> TrainerLog:
    """`trainer_state.json`: every numeric key of every `log_history` entry, by its `step`."""
    data = read_json_object(path, missing="no trainer_state.json")
    history = data.get("log_history")
    if not isinstance(history, list):
        raise InputError(path, "has no log_history list (not an HF Trainer trainer_state.json)")
    log = TrainerLog(f"HF Trainer {path}")
    for entry in history:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if key not in ("step", "epoch"):
                    _add(log, key, entry.get("step"), value)
    for values in log.series.values():
        values.sort()
    return log


def read_tensorboard(folder: Path) -> TrainerLog:
    """Every scalar of the event files under `folder` (speculators' TensorBoardHandler writes them)."""
    files = sorted(Path(folder).rglob("events.out.tfevents.*"))
    log = TrainerLog(f"TensorBoard events under {folder}")
    if not files:
        return log
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise InputError(folder, "holds TensorBoard event files; reading them needs the tensorboard package "
                                 "(pip install tensorboard)") from None
    for events in {f.parent for f in files}:
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags().get("scalars", []):
            for event in accumulator.Scalars(tag):
                _add(log, tag, int(event.step), event.value)
    for values in log.series.values():
        values.sort()
    return log


NEMO_STEP = re.compile(r"\bepoch=(\d+) step=(\d+) ((?:\w+=\S+ ?)+)")
NEMO_EXTRA = re.compile(r"\b(dflash2?|domino): ((?:\w+=\S+ ?)+)")


def read_nemo_console(files: list[Path]) -> TrainerLog:
    """NeMo Automodel's console lines (`epoch=E step=S loss=... acc=... lr=...`, then `dflash2: key=value ...`
    for that step) from captured log files; other lines are skipped."""
    log = TrainerLog("NeMo Automodel: console log " + ", ".join(str(f) for f in files))
    for file in files:
        step = None
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            found, extra = NEMO_STEP.search(line), NEMO_EXTRA.search(line)
            pairs = found.group(3) if found else extra.group(2) if extra and step is not None else ""
            if found:
                step = int(found.group(2))
            for pair in pairs.split():
                key, _, value = pair.partition("=")
                try:
                    _add(log, key, step, float(value))
                except ValueError:
                    continue
    for values in log.series.values():
        values.sort()
    return log


def _nemo_logs(folder: Path) -> list[Path]:
    return [f for f in sorted(folder.glob("*.log")) if f.is_file() and NEMO_STEP.search(
        f.read_text(encoding="utf-8", errors="replace")[:1 << 20])]


def find_trainer_logs(folder: Path) -> TrainerLog | None:
    """The newest HF `trainer_state.json` under the folder, else its TensorBoard scalars, else a NeMo Automodel
    console log, else None."""
    folder = Path(folder)
    states = [p for p in sorted(folder.glob("trainer_state.json")) + sorted(folder.glob("*/trainer_state.json"))
              if isinstance(read_json_object(p, missing="no trainer_state.json").get("log_history"), list)]
    if states:
        def global_step(p: Path) -> int:
            step = read_json_object(p, missing="no trainer_state.json").get("global_step")
            return step if isinstance(step, int) else -1
        return read_hf_trainer_state(max(states, key=global_step))
    log = read_tensorboard(folder)
    if log.series and trainer_of(log.series):
        log.source = f"{trainer_of(log.series)}: {log.source}"
    if not log.series and _nemo_logs(folder):
        log = read_nemo_console(_nemo_logs(folder))
    return log if log.series else None


def parse_version(text: Any) -> tuple[int, ...] | None:
    """'0.8.1' -> (0, 8, 1), '0.9.0.dev3' -> (0, 9, 0); None when it does not start with a number."""
    return _version(text)


def _version(text: Any) -> tuple[int, ...] | None:
    parts = []
    for piece in str(text).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def eal_note(versions: list[Any]) -> str | None:
    """Whether `eal` curves of checkpoints recorded with these speculators versions are comparable."""
    parsed = [v for v in (_version(x) for x in versions if x is not None) if v is not None]
    before = [v for v in parsed if v < EAL_CHANGED_IN]
    after = [v for v in parsed if v >= EAL_CHANGED_IN]
    if before and after:
        return ("eal is not comparable across these checkpoints: speculators changed its meaning in 0.9.0 "
                "(PR #1032); checkpoints were saved by versions on both sides")
    if before:
        return "eal here is speculators' pre-0.9.0 definition (changed in 0.9.0, PR #1032): not comparable to newer runs"
    return None


def value_at(series: list[tuple[int, float]], step: int | None) -> float | None:
    """The last value logged at or before `step` (a checkpoint saved at `step` was trained on those)."""
    if step is None:
        return None
    found = None
    for s, v in series:
        if s > step:
            break
        found = v
    return found


def rising_while_flat(metric: str, values: list[float | None], taus: list[float | None],
                      tau_margins: list[float | None]) -> str | None:
    """Flag a training metric that improved from the checkpoint where measured tau peaked to the last one,
    while measured tau at the last is below that peak by more than the peak's margin (half its interval;
    0 when unknown). Checkpoints in step order; None values are skipped."""
    pairs = [(v, t, m) for v, t, m in zip(values, taus, tau_margins) if v is not None and t is not None]
    if len(pairs) < 3:
        return None
    best = max(range(len(pairs)), key=lambda i: pairs[i][1])
    if best == len(pairs) - 1:
        return None
    sign = -1 if any(word in metric.lower() for word in LOWER_IS_BETTER) else 1
    (v0, t0, margin), (v1, t1, _) = pairs[best], pairs[-1]
    if sign * (v1 - v0) > 0 and t1 < t0 - (margin or 0.0):
        return (f"{metric} kept {'falling' if sign < 0 else 'rising'} ({v0:.4g} -> {v1:.4g}) after the checkpoint "
                f"where measured tau peaked ({t0:.3f}), while measured tau fell to {t1:.3f}")
    return None


# the training metrics set beside tau (not learning rates, norms, timings, objective weights)
SHOWN = ("eal", "acc", "loss", "tau", "recall", "accepted_length", "accept_len")
NOT_SHOWN = ("loss_weight_share", "lk_kl_weight", "perf/", "lambda")


def shown(name: str) -> bool:
    lowered = name.lower()
    return any(w in lowered for w in SHOWN) and not any(w in lowered for w in NOT_SHOWN)


def trainer_of(series: dict[str, list]) -> str | None:
    """Which trainer wrote these TensorBoard scalars, by the names only it uses (None: not told)."""
    names = set(series)
    if any("accept_rate@" in n for n in names) or "train/tau_probabilistic" in names:
        return "DeepSpec"
    if any(re.search(r"(^|/)(dflash2?/|position_\d+/|objective/lk_kl_weight)", n) for n in names):
        return "SpecForge"  # its #810 families (speculators' per-position names are position_<k>_acc)
    if "train/eal" in names or any(n.startswith("train/position_") for n in names):
        return "speculators"
    if "train/accuracy" in names or any(n.startswith(("train/ploss_", "train/acc_")) for n in names):
        return "SpecForge"
    return None


def trainer_values(sources: list[Path], step: int | None, checkpoint: Path | None) -> dict[str, Any] | None:
    """For one checkpoint of a tracked run: its trainer's logged metrics at its step, where found, with the
    speculators version its config records (for `eal`). A log that cannot be read is reported, not fatal."""
    version = None
    if checkpoint is not None and (Path(checkpoint) / "config.json").is_file():
        try:
            version = read_json_object(Path(checkpoint) / "config.json", missing="").get("speculators_version")
        except InputError:
            version = None
    for source in sources:
        folder = Path(source)
        try:
            log = find_trainer_logs(folder if folder.is_dir() else folder.parent)
        except InputError as exc:
            return {"error": exc.one_line(), "speculators_version": version}
        if log is not None:
            values = {name: value_at(series, step) for name, series in sorted(log.series.items()) if shown(name)}
            return {"source": log.source, "values": {k: v for k, v in values.items() if v is not None},
                    "speculators_version": version}
    return None
