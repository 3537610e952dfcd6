"""Results are never destroyed while the tool reports success (issue 36, class 1).

`diff A B --html-file RUN/run.json`, `report RUN --html-file RUN/run.json`, `served B A --html-file RUN/run.json` and
`export-serving RUN --out RUN/run.json` each overwrote the run, exit 0. Every output option of every command
goes through one guard (core/paths.output_path); here each one is pointed at each file of a real result
folder (a run, a track's run folder, the command's own input), directly and through a symbolic link, and
must refuse with one line, leaving every byte as it was. And a run folder's lock is held from the first
look at it to the last file written (report.html included), so a second `run --overwrite` is refused while
the first still writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(escaped_run, tmp_path_factory) -> dict:
    """The finished run, a served dump, and a track folder whose runs/ holds a copy of the run."""
    root = tmp_path_factory.mktemp("guard")
    run = root / "run"
    shutil.copytree(escaped_run["folder"], run)
    dump = root / "metrics.txt"
    dump.write_text("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
                    "vllm:spec_decode_num_accepted_tokens_total 12\n")
    track = root / "track"
    (track / "runs").mkdir(parents=True)
    shutil.copytree(run, track / "runs" / "step-000000010-abc")
    for name in ("track_state.json", "track.jsonl", "track.csv", "track.html"):
        (track / name).write_text("{}\n")
    (track / "written.json").write_text(json.dumps(["runs", "runs/step-000000010-abc", "track_state.json", "track.jsonl",
                                                    "track.csv", "track.html", "written.json"]))
    return {"root": root, "run": run, "dump": dump, "track": track, "a": escaped_run["a"], "b": escaped_run["b"]}


def file_options(w, target: Path) -> dict[str, list[str]]:
    """Every command's file output option, pointed at `target`."""
    run, a, b = w["run"], w["a"], w["b"]
    return {"report --html": ["report", str(run), "--html-file", str(target)],
            "diff --html": ["diff", f"{run}:{a}", f"{run}:{b}", "--html-file", str(target)],
            "served --html": ["served", str(w["dump"]), "--run", f"{run}:{a}", "--html-file", str(target)],
            "export-serving --out": ["export-serving", str(run), "--engine", "vllm", "--drafter-name", a, "--out", str(target)]}


def refused(result, fragment: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


RESULT_FILES = ("run.json", "samples.jsonl", "per_position.csv", "run_state.json", "written.json", "run.lock",
                "report.html", "doctor.json", "run.partial.json")


@pytest.mark.parametrize("name", RESULT_FILES)
def test_no_file_output_lands_on_a_file_of_a_run_folder(world, name, tmp_path):
    """Each file a run folder holds (or will hold: doctor.json, run.partial.json), as each file option's path,
    directly and through a symbolic link elsewhere: refused, the folder byte for byte as it was."""
    before = snapshot(world["run"])
    link = tmp_path / "innocent.html"
    link.symlink_to(world["run"] / name)
    for target in (world["run"] / name, link):
        for option, args in file_options(world, target).items():
            # a link to a file the run does not hold yet is refused as a dangling link, by name too
            fragment = "symbolic link" if target == link and not link.exists() else "of the dflash-eval result folder"
            line = refused(runner.invoke(app, args, env=ENV), fragment)
            assert name in line, (option, line)
    assert snapshot(world["run"]) == before


@pytest.mark.parametrize("name", ["track.jsonl", "track.csv", "track_state.json", "runs/step-000000010-abc/run.json"])
def test_no_file_output_lands_on_a_file_of_a_track(world, name):
    before = snapshot(world["track"])
    for _option, args in file_options(world, world["track"] / name).items():
        refused(runner.invoke(app, args, env=ENV), "of the dflash-eval result folder")
    assert snapshot(world["track"]) == before


def test_an_output_never_overwrites_the_commands_own_input(world):
    before = world["dump"].read_bytes()
    refused(runner.invoke(app, ["served", str(world["dump"]), "--html-file", str(world["dump"])], env=ENV),
            "is also an input of this command")
    assert world["dump"].read_bytes() == before
    shard = world["root"] / "shard"
    shutil.copytree(world["run"], shard)
    kept = snapshot(shard)
    refused(runner.invoke(app, ["merge", str(shard), "--out", str(shard), "--overwrite", "--no-html"], env=ENV),
            "is also an input of this command")
    assert snapshot(shard) == kept


@pytest.mark.parametrize("option", ["run --out", "merge --out", "doctor --out", "track --out", "track --tensorboard"])
def test_no_folder_output_lands_on_a_run_a_track_keeps(world, option, test_bed, drafter_dirs):
    """A track's runs/<label> (and runs/ itself) is the track's: no command's folder option writes there."""
    before = snapshot(world["track"])
    for target in (world["track"] / "runs" / "step-000000010-abc", world["track"] / "runs"):
        args = {"run --out": ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--limit",
                              "1", "--max-new-tokens", "4", "--device", "cpu", "--overwrite", "--out", str(target)],
                "merge --out": ["merge", str(world["run"]), "--out", str(target), "--overwrite"],
                "doctor --out": ["doctor", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
                                 "--limit", "1", "--max-new-tokens", "4", "--device", "cpu", "--out", str(target)],
                "track --out": ["track", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--limit", "1",
                                "--max-new-tokens", "4", "--device", "cpu", "--overwrite", "--out", str(target)],
                "track --tensorboard": ["track", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
                                        "--limit", "1", "--out", str(world["root"] / "t2"), "--tensorboard",
                                        str(target)]}[option]
        refused(runner.invoke(app, args, env=ENV), "of the dflash-eval result folder")
    assert snapshot(world["track"]) == before


def test_a_new_file_beside_a_run_is_allowed(world, tmp_path):
    out = tmp_path / "report-copy.html"
    result = runner.invoke(app, ["report", str(world["run"]), "--html-file", str(out)], env=ENV)
    assert result.exit_code == 0 and out.is_file(), result.output


# ------------------------------------------------------------------------------------------------ one writer


def _holder(lock: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from filelock import FileLock
        lock = FileLock({str(lock)!r})
        lock.acquire()
        print("locked", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_overwrite_is_refused_at_the_first_look_while_another_run_writes(world, tmp_path):
    """`run --overwrite` passed the folder check (no lock looked at), loaded its models, and took the lock the
    first run had just released between its results and its report.html. The check now takes the lock."""
    from dflash_eval.core.errors import InputError
    from dflash_eval.pipeline.run_folder import RunFolder

    out = tmp_path / "busy"
    shutil.copytree(world["run"], out)
    before = snapshot(out)
    holder = _holder(out / "run.lock")
    try:
        with pytest.raises(InputError, match="is in use: another dflash-eval process is writing into it"):
            RunFolder(out, {}).check(overwrite=True)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert snapshot(out) == before
    free = RunFolder(out, {})
    free.check(overwrite=True)  # the holder is gone: the check takes the lock and keeps it
    try:
        with pytest.raises(InputError, match="is in use"):
            RunFolder(out, {}).check(overwrite=True)
    finally:
        free.close()


def test_report_html_is_written_under_the_runs_lock(test_bed, drafter_dirs, tmp_path, monkeypatch):
    """evaluate writes its own page (commands write their pages), with the results, before the lock is released."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.errors import InputError
    from dflash_eval.pipeline.run_folder import FolderLock
    from dflash_eval.render import html

    out = tmp_path / "run"
    seen = []

    def report(run, rows, **_) -> str:
        with pytest.raises(InputError, match="is in use"):
            FolderLock(out).acquire()  # another writer: still refused while the report is written
        seen.append(len(rows))
        return "<html></html>"

    monkeypatch.setattr(html, "render_run_html", report)
    options = RunOptions(drafters=[str(drafter_dirs["zlab"])], target=str(test_bed["qwen3"]), out=out, limit=2,
                         max_new_tokens=6, device="cpu")
    evaluate(options)
    assert seen == [2] and (out / "report.html").read_text() == "<html></html>"
    assert "report.html" in json.loads((out / "written.json").read_text())
    lock = FolderLock(out)
    lock.acquire()  # released once everything is written
    lock.release()


def test_an_overwrite_started_while_a_run_writes_is_refused_and_the_run_keeps_its_results(
        test_bed, drafter_dirs, repeat_anchor_drafter, tmp_path, monkeypatch):
    """Issue 49 A, the deterministic race: run A (two drafters, 13 prompts x 48 tokens) is writing; when its
    samples.jsonl holds 2 rows, B = `run -p two_prompts.jsonl --overwrite` starts into the same folder. B's
    preparation (imports, tokenizer, hashing: seconds) outlasted A, which finished, printed `results:` and
    exited 0; then B took the free lock and deleted A's results. Here B's preparation is made to outlast A
    for certain (it waits for A's process to end): B must be refused at its start, naming the lock, and A's
    26 rows and run.json stay."""
    import os

    import dflash_eval.commands.evaluate as evaluate_module

    out, cache = tmp_path / "run", tmp_path / "cache"
    two = tmp_path / "two_prompts.jsonl"
    two.write_text('{"id": "x/0", "prompt": "Write a function."}\n{"id": "x/1", "prompt": "Sort a list."}\n')
    thirteen = tmp_path / "thirteen.jsonl"
    thirteen.write_text("".join(json.dumps({"id": f"p/{i}", "prompt": f"Write function number {i} in Python."}) + "\n"
                                for i in range(13)))
    first = subprocess.Popen(
        [sys.executable, "-m", "dflash_eval", "run", "-d", str(drafter_dirs["zlab"]), "-d", str(repeat_anchor_drafter),
         "--target", str(test_bed["qwen3"]), "-p", str(thirteen), "--max-new-tokens", "48", "--device", "cpu",
         "--out", str(out), "--no-html", "--cache-dir", str(cache)],
        env={**os.environ, "DFLASH_EVAL_SLOW_PROMPTS": "0.4", "COLUMNS": "200"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        import time

        deadline = time.monotonic() + 600
        while not (out / "samples.jsonl").is_file() or len((out / "samples.jsonl").read_text().splitlines()) < 2:
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        real = evaluate_module.prepare_inputs

        def outlasting(options, *args, **kwargs):
            first.wait()  # B's preparation ends after A has finished and released its lock
            return real(options, *args, **kwargs)

        monkeypatch.setattr(evaluate_module, "prepare_inputs", outlasting)
        second = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
                                     "-p", str(two), "--max-new-tokens", "48", "--device", "cpu", "--out", str(out),
                                     "--overwrite", "--no-html", "--cache-dir", str(cache)], env=ENV)
    finally:
        stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0 and "results:" in stdout, stderr
    refused(second, "run.lock")
    assert len((out / "samples.jsonl").read_text().splitlines()) == 26
    run = json.loads((out / "run.json").read_text())
    assert run["provenance"]["prompts"]["count"] == 13 and len(run["drafters"]) == 2
