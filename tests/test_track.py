"""`dflash-eval track`: a training run's checkpoints, discovered as the trainers lay them out, evaluated once
each on one trajectory per prompt, and every row equal to what `run` gives for that checkpoint alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.formats.checkpoint_scan import scan
from dflash_eval.pipeline.track_folder import read_log, read_rows

runner = CliRunner()
TOKENS = "40"  # the fixture drafters were trained on 40-token continuations of the demo prompts


@pytest.fixture(scope="module")
def training_run(test_bed, tmp_path_factory) -> Path:
    """A real training run's save folder: the fixture trainer saving checkpoint-40 .. checkpoint-160 (HF layout)."""
    from dflash_eval.demo.train import CheckpointSaves, fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    save = tmp_path_factory.mktemp("training") / "save"
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), int(TOKENS))
    train_drafter(target, sequences, fixture_config(block_size=4, steps=160), None, saves=CheckpointSaves(save, 40))
    return save


def _track_args(target: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    return ["--target", str(target), "--out", str(out), "--max-new-tokens", TOKENS, "--device", "cpu",
            "--cache-dir", str(cache), "--settle", "0.2", *extra]


def _run_alone(checkpoint: Path, target: Path, out: Path, cache: Path) -> tuple[dict, list[dict]]:
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.documents.results import read_samples

    result = evaluate(RunOptions(drafters=[str(checkpoint)], target=str(target), out=out, max_new_tokens=int(TOKENS),
                                 device="cpu", cache_dir=cache)).document
    return result, read_samples(out / "samples.jsonl")


def _without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "evaluated_at"} for r in rows]


def assert_rows_equal_run(track_dir: Path, target: Path, cache: Path, tmp_path: Path) -> None:
    """Every checkpoint row (and its run folder) equals `run` on that checkpoint alone, same prompts."""
    from dflash_eval.core.documents.results import read_samples

    for number, row in enumerate(r for r in read_rows(track_dir) if r["role"] == "checkpoint"):
        alone, samples = _run_alone(Path(row["path"]), target, tmp_path / f"alone-{number}", cache)
        drafter = alone["drafters"][0]
        assert row["metrics"] == drafter["metrics"], row["name"]
        assert row["counts"] == drafter["counts"] and row["fingerprint"] == drafter["fingerprint"]
        assert row["repetition_share"] == drafter["repetition"]["flagged_share"]
        assert read_samples(track_dir / row["run"] / "samples.jsonl") == samples


# ------------------------------------------------------------------------------------------- discovery

def _checkpoint(source: Path, folder: Path, state: dict | None = None, state_name: str = "trainer_state.json") -> Path:
    shutil.copytree(source, folder)
    if state is not None:
        (folder / state_name).write_text(json.dumps(state))
    return folder


def test_layouts_of_the_trainers_are_discovered_and_ordered_by_step(drafter_dirs, tmp_path):
    ckpt = drafter_dirs["zlab"]
    hf = tmp_path / "hf"
    for step in (1000, 500):  # "checkpoint-1000" sorts before "checkpoint-500" by name: order is by step
        _checkpoint(ckpt, hf / f"checkpoint-{step}", {"global_step": step})
    (hf / "runs").mkdir()  # a trainer's log folder: not a checkpoint, not reported
    found = scan([hf])
    assert [(f.name, f.step, f.step_source) for f in found.checkpoints] == [
        ("checkpoint-500", 500, "trainer_state.json global_step"),
        ("checkpoint-1000", 1000, "trainer_state.json global_step")]

    spec = tmp_path / "speculators"  # speculators 0.9: <epoch>/ + training_state.json, symlinks, interrupted/
    for epoch, step in ((0, 300), (1, 600), (10, 3300)):
        _checkpoint(ckpt, spec / str(epoch), {"epoch": epoch, "local_step": 0, "global_step": step},
                    "training_state.json")
    (spec / "checkpoint_best").symlink_to("1", target_is_directory=True)
    (spec / "epoch1_end").symlink_to("1", target_is_directory=True)
    _checkpoint(ckpt, spec / "interrupted")
    found = scan([spec])
    assert [(f.name, f.step) for f in found.checkpoints] == [("0", 300), ("1", 600), ("10", 3300)]
    assert found.best == {"checkpoint_best": "1"}
    assert all(f.problem is None for f in found.checkpoints)

    forge = tmp_path / "specforge"
    for epoch, step in ((1, 2000), (0, 1000)):
        _checkpoint(ckpt, forge / f"epoch_{epoch}_step_{step}")
        (forge / f"epoch_{epoch}_step_{step}" / "training_state.pt").write_bytes(b"never unpickled")
    assert [(f.step, f.step_source) for f in scan([forge]).checkpoints] == [
        (1000, "folder name epoch_E_step_S (SpecForge)"), (2000, "folder name epoch_E_step_S (SpecForge)")]

    loose = tmp_path / "loose"
    first = _checkpoint(ckpt, loose / "first")
    time.sleep(0.01)
    _checkpoint(ckpt, loose / "second")
    os.utime(first / "config.json")  # newest file decides among checkpoints without a step
    assert [f.name for f in scan([loose]).checkpoints] == ["second", "first"]
    assert scan([loose]).checkpoints[0].step is None
    # checkpoints named one by one
    assert [f.name for f in scan([hf / "checkpoint-500", loose / "second"]).checkpoints] == ["checkpoint-500", "second"]


def test_incomplete_checkpoints_say_why(drafter_dirs, tmp_path):
    ckpt = drafter_dirs["zlab"]
    save = tmp_path / "save"
    (save / "checkpoint-7").mkdir(parents=True)  # named like a checkpoint, nothing written yet
    (save / "notes").mkdir()  # any other empty folder is not a checkpoint
    half = _checkpoint(ckpt, save / "checkpoint-8")
    data = (half / "model.safetensors").read_bytes()
    (half / "model.safetensors").write_bytes(data[: len(data) // 2])
    torn = _checkpoint(ckpt, save / "checkpoint-9")
    (torn / "config.json").write_text('{"architectures": ["DFlash')
    sharded = _checkpoint(ckpt, save / "checkpoint-10")
    (sharded / "model.safetensors").rename(sharded / "model-00001-of-00002.safetensors")
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    problems = {f.name: f.problem for f in scan([save]).checkpoints}
    assert set(problems) == {"checkpoint-7", "checkpoint-8", "checkpoint-9", "checkpoint-10"}
    assert problems["checkpoint-7"] == "no config.json yet"
    assert "truncated safetensors file" in problems["checkpoint-8"]
    assert "not valid JSON" in problems["checkpoint-9"]
    assert "model-00002-of-00002.safetensors" in problems["checkpoint-10"] and "missing" in problems["checkpoint-10"]


# -------------------------------------------------------------------------------------------- one shot

def test_track_evaluates_each_checkpoint_once_on_one_pass_per_prompt_and_equals_run(training_run, trained, test_bed,
                                                                                   tmp_path):
    target, cache, out = test_bed["qwen3"], tmp_path / "cache", tmp_path / "track"
    reference = trained["qwen3"]["good"]
    args = ["track", str(training_run), *_track_args(target, out, cache, "--reference", str(reference))]
    result = runner.invoke(app, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert [r["role"] for r in rows] == ["reference"] + ["checkpoint"] * 4
    assert [r["step"] for r in rows[1:]] == [40, 80, 120, 160]
    taus = [r["metrics"]["tau_macro"] for r in rows[1:]]
    assert taus[-1] > taus[0] + 1.0, taus  # training works, and the curve shows it
    # one target pass per prompt per batch: the reference's batch, then all four checkpoints together
    batches = [e for e in read_log(out) if e["event"] == "batch"]
    assert [(len(b["drafters"]), b["prompts"], b["target_passes"]) for b in batches] == [(1, 12, 12), (4, 12, 12)]
    assert "tau macro per step" in result.stdout and "best" in result.stdout and "reference" in result.stdout
    csv_lines = (out / "track.csv").read_text().splitlines()
    assert len(csv_lines) == 6 and csv_lines[0].startswith("role,step,") and "acceptance_at_pos_3" in csv_lines[0]
    html = (out / "track.html").read_text()
    assert "dfe-reference-line" in html and "Reach per slot" in html
    # a run folder per checkpoint that report/show/diff read
    shown = runner.invoke(app, ["report", str(out / rows[-1]["run"])])
    assert shown.exit_code == 0, shown.output
    assert_rows_equal_run(out, target, cache, tmp_path)
    # the reference row is what `run --reference PATH` gives
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    alone = evaluate(RunOptions(drafters=[], reference=str(reference), target=str(target), out=tmp_path / "ref",
                                max_new_tokens=int(TOKENS), device="cpu", cache_dir=cache)).document
    assert rows[0]["metrics"] == alone["drafters"][0]["metrics"]

    # nothing new: nothing is evaluated again
    again = runner.invoke(app, args, env={"COLUMNS": "160"})
    assert again.exit_code == 0, again.output
    assert len(read_rows(out)) == 5 and len([e for e in read_log(out) if e["event"] == "batch"]) == 2


def test_deleted_and_rewritten_checkpoints_keep_their_rows(drafter_dirs, test_bed, tmp_path):
    """speculators rewrites <epoch>/ in place, save limits delete folders: rows are per content, and stay."""
    from dflash_eval.testing.testbed import write_random_drafter

    save, target, cache, out = tmp_path / "save", test_bed["qwen3"], tmp_path / "cache", tmp_path / "track"
    for epoch, seed in ((0, 1), (1, 2)):
        write_random_drafter(target, save / str(epoch), "zlab", seed=seed, block_size=4, num_layers=2)
        (save / str(epoch) / "training_state.json").write_text(json.dumps({"global_step": 10 * (epoch + 1)}))
    args = ["track", str(save), *_track_args(target, out, cache, "--limit", "3", "--no-html")]
    assert runner.invoke(app, args).exit_code == 0
    first = read_rows(out)
    assert [r["step"] for r in first] == [10, 20]
    shutil.rmtree(save / "0")  # rotated away
    write_random_drafter(target, save / "1", "zlab", seed=3, block_size=4, num_layers=2)  # rewritten mid-epoch
    (save / "1" / "training_state.json").write_text(json.dumps({"global_step": 30}))
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert _without_time(rows[:2]) == _without_time(first) and [r["step"] for r in rows] == [10, 20, 30]
    assert len({r["fingerprint"] for r in rows}) == 3
    assert result.stdout.count("folder gone or rewritten") == 2


def test_invalid_checkpoint_is_reported_and_skipped_not_fatal(drafter_dirs, test_bed, tmp_path):
    save, target = tmp_path / "save", test_bed["qwen3"]
    _checkpoint(drafter_dirs["zlab"], save / "checkpoint-1", {"global_step": 1})
    bad = _checkpoint(drafter_dirs["zlab"], save / "checkpoint-2", {"global_step": 2})
    config = json.loads((bad / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = [1, 2, 99]  # a tap the target does not have
    (bad / "config.json").write_text(json.dumps(config))
    out = tmp_path / "track"
    result = runner.invoke(app, ["track", str(save), *_track_args(target, out, tmp_path / "c", "--limit", "3",
                                                                   "--no-html")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in read_rows(out)] == [1]
    assert "checkpoint-2: invalid" in result.stdout and "looked at again" in result.stdout
    assert [e["name"] for e in read_log(out) if e["event"] == "invalid"] == ["checkpoint-2"]


@pytest.mark.parametrize("change, message", [
    (["--max-new-tokens", "32"], "max_new_tokens: 40 -> 32"),
    (["--thinking"], "thinking: false -> true"),
])
def test_continuing_a_track_with_other_settings_is_refused_by_name(drafter_dirs, test_bed, tmp_path, change, message):
    save, target, out = tmp_path / "save", test_bed["qwen3"], tmp_path / "track"
    _checkpoint(drafter_dirs["zlab"], save / "checkpoint-1", {"global_step": 1})
    base = ["track", str(save), *_track_args(target, out, tmp_path / "c", "--limit", "2", "--no-html")]
    assert runner.invoke(app, base).exit_code == 0
    before = (out / "track.jsonl").read_text()
    refused = runner.invoke(app, [*base, *change])
    assert refused.exit_code == 2 and message in refused.stderr and "Traceback" not in refused.output
    assert (out / "track.jsonl").read_text() == before


@pytest.mark.parametrize("args, message", [
    (["--semantics", "x=zlab"], "track applies one rule set to every checkpoint"),
    (["--interval", "0"], "invalid value for '--interval': 0 is not > 0"),
    (["--draft-lengths", "2", "--temperature", "0.7"], "--draft-lengths at temperature > 0"),
    (["--draft-lengths", "2,x"], "expected 'all' or k,k,..."),
    (["--depth-buckets", "64,32"], "--depth-buckets '64,32': edges must increase"),
])
def test_track_options_refused_by_name(drafter_dirs, test_bed, tmp_path, args, message):
    save = tmp_path / "save"
    _checkpoint(drafter_dirs["zlab"], save / "checkpoint-1")
    result = runner.invoke(app, ["track", str(save), *_track_args(test_bed["qwen3"], tmp_path / "o", tmp_path / "c"),
                                 *args])
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "o").exists()


def test_track_needs_a_target_and_an_existing_folder(test_bed, tmp_path):
    missing = runner.invoke(app, ["track", str(tmp_path / "nope"), "--target", str(test_bed["qwen3"]), "--out",
                                  str(tmp_path / "o")])
    assert missing.exit_code == 2 and "no such folder (with --watch the tracker waits for it)" in missing.stderr
    (tmp_path / "empty").mkdir()
    untargeted = runner.invoke(app, ["track", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert untargeted.exit_code == 2 and "track needs --target" in untargeted.stderr
    nothing = runner.invoke(app, ["track", str(tmp_path / "empty"), *_track_args(test_bed["qwen3"], tmp_path / "o",
                                                                                  tmp_path / "c")])
    assert nothing.exit_code == 2 and "no checkpoints found" in nothing.stderr


def test_tensorboard_scalars_equal_the_rows(training_run, test_bed, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, logs = tmp_path / "track", tmp_path / "tb"
    result = runner.invoke(app, ["track", str(training_run), *_track_args(test_bed["qwen3"], out, tmp_path / "c",
                                                                          "--limit", "5", "--no-html",
                                                                          "--tensorboard", str(logs))])
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(logs))
    events.Reload()
    rows = read_rows(out)
    taus = [(e.step, e.value) for e in events.Scalars("dflash/tau_macro")]
    assert [s for s, _ in taus] == [40, 80, 120, 160]
    assert [v for _, v in taus] == pytest.approx([r["metrics"]["tau_macro"] for r in rows], rel=1e-6)
    slot1 = [e.value for e in events.Scalars("dflash/reach/slot_01")]
    assert slot1 == pytest.approx([r["metrics"]["reach"][0] for r in rows], rel=1e-6)
    assert "dflash/repetition_share" in events.Tags()["scalars"]


@pytest.mark.slow
def test_killed_track_resumes_to_the_same_track_jsonl(training_run, test_bed, tmp_path):
    target, cache = test_bed["qwen3"], tmp_path / "cache"
    whole = runner.invoke(app, ["track", str(training_run), *_track_args(target, tmp_path / "whole", cache,
                                                                          "--no-html")])
    assert whole.exit_code == 0, whole.output
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "dflash_eval.cli", "track", str(training_run),
               *_track_args(target, out, cache, "--no-html")]
    env = {**os.environ, "DFLASH_EVAL_SLOW_PROMPTS": "0.4", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        samples = list((out / "runs").glob("*/samples.jsonl")) if (out / "runs").exists() else []
        if samples and len(samples[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert read_rows(out) == []  # killed inside the batch: no row yet, prompts kept in the run folders
    resumed = runner.invoke(app, ["track", str(training_run), *_track_args(target, out, cache, "--no-html")])
    assert resumed.exit_code == 0, resumed.output
    assert _without_time(read_rows(out)) == _without_time(read_rows(tmp_path / "whole"))
    batches = [e for e in read_log(out) if e["event"] == "batch"]
    assert len(batches) == 1 and batches[0]["target_passes"] < 12  # the prompts done before the kill were kept
    for row in read_rows(out):
        assert (out / row["run"] / "samples.jsonl").read_text().count("\n") == 12


# ------------------------------------------------------------------------------------ watch, live training

def _wait(condition, what: str, timeout: float = 240.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the tracker exited ({process.returncode}) while waiting for {what}: "
                                 f"{process.stdout.read() if process.stdout else ''}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_watch_follows_a_training_run_as_it_writes(test_bed, trained, tmp_path):
    """The trainer saves checkpoints in a background process while `track --watch` polls its folder: each
    checkpoint is evaluated once, a truncated one is skipped and picked up once complete, the curve rises,
    and every row equals `run` on that checkpoint."""
    target, cache, out, save = test_bed["qwen3"], tmp_path / "cache", tmp_path / "track", tmp_path / "save"
    save.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    tracker = subprocess.Popen(
        [sys.executable, "-m", "dflash_eval.cli", "track", str(save), "--watch", "--interval", "0.3",
         *_track_args(target, out, cache, "--reference", str(trained["qwen3"]["good"]), "--no-html")],
        env={**env, "COLUMNS": "160"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: any(r["role"] == "reference" for r in read_rows(out)), "the reference row", process=tracker)
        # a final save caught half-written: its weights cut in half
        late = _checkpoint(trained["qwen3"]["good"], save / "checkpoint-1000", {"global_step": 1000})
        whole = (late / "model.safetensors").read_bytes()
        (late / "model.safetensors").write_bytes(whole[: len(whole) // 2])
        trainer = subprocess.run(
            [sys.executable, "-m", "dflash_eval.demo.train", "--target", str(target), "--save-dir", str(save),
             "--steps", "160", "--save-every", "40", "--max-new-tokens", TOKENS, "--pause", "0.5"],
            env=env, capture_output=True, text=True, timeout=300)
        assert trainer.returncode == 0, trainer.stderr[-2000:]
        _wait(lambda: len(read_rows(out)) == 5, "four checkpoint rows", process=tracker)
        assert any(e["event"] == "incomplete" and e["name"] == "checkpoint-1000" for e in read_log(out))
        assert "checkpoint-1000" not in {r["name"] for r in read_rows(out)}
        (late / "model.safetensors").write_bytes(whole)  # the save completes
        _wait(lambda: len(read_rows(out)) == 6, "the completed checkpoint's row", process=tracker)
        time.sleep(1.0)  # a few more polls: nothing is evaluated twice
    finally:
        tracker.send_signal(signal.SIGINT)
        output, _ = tracker.communicate(timeout=60)
    assert tracker.returncode == 0, output
    assert "stopped;" in output and "tau macro per step" in output
    rows = read_rows(out)
    checkpoints = [r for r in rows if r["role"] == "checkpoint"]
    assert [r["step"] for r in sorted(checkpoints, key=lambda r: r["step"])] == [40, 80, 120, 160, 1000]
    assert len({r["fingerprint"] for r in checkpoints}) == 5  # each once
    evaluated = [d for e in read_log(out) if e["event"] == "batch" for d in e["drafters"]]
    assert len(evaluated) == len(set(evaluated)) == 6
    assert all(e["target_passes"] == e["prompts"] == 12 for e in read_log(out) if e["event"] == "batch")
    by_step = {r["step"]: r["metrics"]["tau_macro"] for r in checkpoints}
    assert by_step[160] > by_step[40] + 1.0, by_step
    assert_rows_equal_run(out, target, cache, tmp_path)


@pytest.mark.parametrize("layout, names, source", [
    ("speculators", ["0", "1"], "training_state.json global_step"),
    ("specforge", ["epoch_0_step_10", "epoch_0_step_20"], "folder name epoch_E_step_S (SpecForge)"),
    ("hf", ["checkpoint-10", "checkpoint-20"], "trainer_state.json global_step"),
])
def test_the_trainer_s_own_layouts_are_what_the_scan_reads(test_bed, tmp_path, layout, names, source):
    """The fixture trainer writes each trainer's layout (CheckpointSaves); the scan reads steps back from it."""
    from dflash_eval.demo.train import CheckpointSaves, fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS)[:2], 8)
    train_drafter(target, sequences, fixture_config(steps=20, warmup_steps=2), None,
                  saves=CheckpointSaves(tmp_path / "save", 10, layout))
    found = scan([tmp_path / "save"])
    assert [(f.name, f.step, f.step_source, f.problem) for f in found.checkpoints] == [
        (name, step, source, None) for name, step in zip(names, (10, 20))]
    assert found.best == ({"checkpoint_best": "1"} if layout == "speculators" else {})


def test_read_track_is_a_dataframe_of_the_curve(training_run, test_bed, tmp_path):
    import dflash_eval

    out = tmp_path / "track"
    assert runner.invoke(app, ["track", str(training_run), *_track_args(test_bed["qwen3"], out, tmp_path / "c",
                                                                        "--limit", "5", "--no-html")]).exit_code == 0
    frame = dflash_eval.read_track(out)
    assert list(frame.step) == [40, 80, 120, 160]
    assert list(frame.tau_macro) == [r["metrics"]["tau_macro"] for r in read_rows(out)]
    assert {"reach_1", "reach_2", "reach_3", "tau_macro_low", "repetition_share"} <= set(frame.columns)


# ------------------------------------------------------------------------------------- the curve, by hand

def _row(step, walks: dict[str, list[int]], role: str = "checkpoint", block_size: int = 4) -> dict:
    """A track row whose counts come from per-prompt walks (n per step), as metrics would give them."""
    from dflash_eval.core.metrics import AcceptanceCounts, tau_macro

    counts = AcceptanceCounts(block_size=block_size)
    for pid, walk in walks.items():
        counts = counts + AcceptanceCounts.from_walk(pid, walk, block_size)
    return {"role": role, "name": f"ckpt-{step}", "step": step, "fingerprint": f"fp{step}{role}",
            "metrics": {"tau_macro": tau_macro(counts)}, "counts": counts.to_dict()}


@pytest.mark.parametrize("values, low, high, expected", [
    ([1.0, 2.0, 3.0], None, None, "▁▅█"),  # (2 - 1) / 2 * 7 = 3.5 -> level 4
    ([1.0, None, 1.0], None, None, "▁ ▁"),  # no range: lowest bar; None: blank
    ([2.0], 0.0, 4.0, "▅"),  # 2 / 4 * 7 = 3.5 -> 4
    ([9.0, -1.0], 0.0, 4.0, "█▁"),  # clipped to [low, high]
])
def test_sparkline(values, low, high, expected):
    from dflash_eval.core.track_summary import sparkline

    assert sparkline(values, low, high) == expected


def test_curve_best_so_far_gap_and_a_significant_regression():
    from dflash_eval.core.track_summary import curve

    prompts = [f"p{i}" for i in range(8)]
    good = {p: [3, 3] for p in prompts}  # tau 4 on every prompt
    mid = {p: [1, 1] for p in prompts}  # tau 2
    bad = {p: [0, 0] for p in prompts}  # tau 1
    rows = [_row(None, {p: [2, 2] for p in prompts}, role="reference"),  # tau 3
            _row(300, bad), _row(100, mid), _row(200, good)]
    c = curve(rows)
    assert [p.row["step"] for p in c.points] == [100, 200, 300]  # by step, not by evaluation order
    assert [p.tau for p in c.points] == [2.0, 4.0, 1.0]
    assert [p.best_so_far for p in c.points] == [2.0, 4.0, 4.0]
    assert [p.gap for p in c.points] == [-1.0, 1.0, -2.0]
    assert c.best.row["step"] == 200 and c.latest.row["step"] == 300
    # 8 prompts all worse by 3: exact permutation p = 2 / 2^8, interval [-3, -3]
    assert c.latest_vs_best.estimate == -3.0 and c.latest_vs_best.p_value == pytest.approx(2 / 256)
    assert c.regression and "step 300 is worse than step 200" in c.latest_vs_best_verdict
    assert "is worse than reference" in c.latest_vs_reference_verdict

    steady = curve(rows + [_row(400, good)])  # the latest ties the best: the earliest equal one is the best
    assert steady.best.row["step"] == 200 and steady.latest.row["step"] == 400
    assert steady.latest_vs_best.estimate == 0.0 and steady.latest_vs_best.p_value == 1.0
    assert not steady.regression and "indistinguishable" in steady.latest_vs_best_verdict


def test_track_at_temperature_above_zero_is_an_estimate_equal_to_run(training_run, test_bed, tmp_path):
    """At T > 0 each checkpoint's row is its offline estimate, equal to `run` on it alone, and labelled."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    target, cache, out = test_bed["qwen3"], tmp_path / "cache", tmp_path / "track"
    result = runner.invoke(app, ["track", str(training_run), *_track_args(target, out, cache, "--limit", "5",
                                                                          "--temperature", "0.7", "--samples", "2")],
                           env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "ESTIMATE" in result.stdout
    rows = read_rows(out)
    assert [r["step"] for r in rows] == [40, 80, 120, 160] and all(r["metrics"]["estimate"] for r in rows)
    batches = [e for e in read_log(out) if e["event"] == "batch"]
    assert [(b["prompts"], b["target_passes"]) for b in batches] == [(5, 10)]  # one pass per prompt per sample
    alone = evaluate(RunOptions(drafters=[rows[-1]["path"]], target=str(target), out=tmp_path / "alone", limit=5,
                                max_new_tokens=int(TOKENS), device="cpu", cache_dir=cache, temperature=0.7,
                                samples=2)).document
    assert rows[-1]["metrics"] == alone["drafters"][0]["metrics"]
    assert "ESTIMATE" in (out / "track.html").read_text()


def test_track_draft_lengths_and_depth_equal_run_on_the_checkpoint(training_run, test_bed, tmp_path):
    """--draft-lengths: every checkpoint also replayed at each k on the batch's one pass per prompt, its
    per-k table and (--depth-buckets) its by-depth split in the row, equal to `run` on it alone; shown in
    the terminal, track.html and track.csv; a checkpoint whose block cannot hold a k is reported invalid."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    target, cache, out = test_bed["qwen3"], tmp_path / "cache", tmp_path / "track"
    extra = ("--limit", "3", "--draft-lengths", "1,2", "--depth-buckets", "0,40,48")
    sources = [str(training_run / "checkpoint-80"), str(training_run / "checkpoint-160")]
    result = runner.invoke(app, ["track", *sources, *_track_args(target, out, cache, *extra)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert [r["step"] for r in rows] == [80, 160]
    assert [(b["prompts"], b["target_passes"]) for b in read_log(out) if b["event"] == "batch"] == [(3, 3)]
    latest = rows[-1]
    alone = evaluate(RunOptions(drafters=[latest["path"]], target=str(target), out=tmp_path / "alone", limit=3,
                                max_new_tokens=int(TOKENS), device="cpu", cache_dir=cache, draft_lengths="1,2",
                                depth_buckets="0,40,48")).document["drafters"][0]
    assert [e["k"] for e in latest["by_draft_length"]] == [1, 2, 3]
    assert latest["by_draft_length"] == alone["by_draft_length"]
    assert latest["depth_edges"] == [40, 48] and latest["by_depth"] == alone["by_depth"]
    assert sum(1 for e in latest["by_depth"] if e["metrics"]["steps"]) >= 2  # the split is not trivial
    out_text = result.stdout
    assert "tau macro per draft length k" in out_text and "k=1" in out_text
    own = f"{latest['metrics']['tau_macro']:.2f}*"  # the checkpoint's own block, marked, equal to its tau
    assert own in out_text and "latest checkpoint by context depth: step 160" in out_text and "40-48" in out_text
    html = (out / "track.html").read_text()
    assert 'id="draft-lengths"' in html and 'id="depth"' in html and "k = 2" in html
    header = (out / "track.csv").read_text().splitlines()[0]
    assert header.endswith("tau_macro_at_k_1,tau_macro_at_k_2,tau_macro_at_k_3")
    refused = runner.invoke(app, ["track", *sources, *_track_args(target, out, cache, "--limit", "3",
                                                                   "--draft-lengths", "1")])
    assert refused.exit_code == 2 and "draft_lengths" in refused.stderr  # a resume with other k, by name
    too_long = runner.invoke(app, ["track", sources[0], *_track_args(target, tmp_path / "k5", cache, "--limit", "3",
                                                                     "--draft-lengths", "5", "--no-html")])
    assert too_long.exit_code == 0 and "k = 5 outside 1..3" in too_long.stdout and read_rows(tmp_path / "k5") == []
