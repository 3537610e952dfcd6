"""What got in a newcomer's way (issue 34, points 2-9), each read where the user reads it: the terminal text,
the files, the HTML in a headless browser at 1400 and 700 px."""

from __future__ import annotations

import base64
import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "dflash_eval" / "demo" / "models"
STORED = Path(__file__).parent / "data" / "report_run"


def invoke(args, columns: int = 100):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def panel_body(output: str) -> str:
    """The text inside a Rich panel (its borders and the one space of padding either side taken off)."""
    lines = output.splitlines()
    return "\n".join(line[2:-2].rstrip() for line in lines[1:-1]).rstrip()


# ------------------------------------------------------------------------ 2: prompts show = what run sends

def test_prompts_show_prints_what_run_sends_with_runs_thinking_rule(tmp_path):
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.inputs import prepare_inputs

    shown = invoke(["prompts", "show", "demo", "--id", "demo/3"], columns=200)
    assert shown.exit_code == 0, shown.output
    assert "thinking on (family default)" in shown.stdout.splitlines()[0]  # the demo target: qwen3_5_text
    inputs = prepare_inputs(RunOptions(drafters=[str(DEMO / "demo-reference")], target=str(DEMO / "target"),
                                       prompts="demo", out=tmp_path / "unused", cache_dir=tmp_path / "c"))
    assert inputs.thinking is True
    sent = inputs.tokenizer.decode(inputs.prompt_ids()["demo/3"])
    assert panel_body(shown.stdout) == sent.rstrip("\n")
    off = invoke(["prompts", "show", "demo", "--id", "demo/3", "--no-thinking"], columns=200)
    assert "thinking off" in off.stdout.splitlines()[0] and "family default" not in off.stdout.splitlines()[0]
    assert "</think>" in panel_body(off.stdout) and "</think>" not in panel_body(shown.stdout)


# ----------------------------------------------------------------------- 3: --limit N costs about N prompts

def test_limit_20_generates_20_continuations_and_plan_says_20(test_bed, drafter_dirs, tmp_path):
    common = ["--target", test_bed["qwen3"], "--prompts", "humaneval", "--limit", "20", "--max-new-tokens", "4"]
    planned = invoke(["plan", "-d", drafter_dirs["zlab"], *common, "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["prompts"]["sequences"] == 20 and "LOWER BOUND" in plan["seconds_are"]
    ran = invoke(["run", "-d", drafter_dirs["zlab"], *common, "--cache-dir", tmp_path / "cache", "--no-html",
                  "--out", tmp_path / "r"])
    assert ran.exit_code == 0, ran.output
    work = json.loads((tmp_path / "r" / "run.json").read_text())["provenance"]["work"]
    assert work["continuations_generated"] == plan["prompts"]["sequences"] == 20
    assert "companion" not in ran.output and "generate 20/20" in ran.output
    cached = [p for p in (tmp_path / "cache").glob("*.json") if p.name != "fingerprints.json"]
    assert len(cached) == 20  # nothing generated beyond what was asked
    shown = invoke(["plan", "-d", drafter_dirs["zlab"], *common])
    assert "time: at least" in shown.stdout and "roofline LOWER BOUND" in shown.stdout and "lower bound" in shown.stdout


def test_a_bf16_limit_run_says_in_one_line_that_its_batches_can_move_a_result(test_bed, drafter_dirs, tmp_path):
    ran = invoke(["run", "-d", drafter_dirs["zlab"], "--target", test_bed["qwen3"], "--limit", "2", "--max-new-tokens",
                  "4", "--dtype", "bfloat16", "--cache-dir", tmp_path / "c", "--no-html", "--out", tmp_path / "r"],
                 columns=400)
    assert ran.exit_code == 0, ran.output
    line = next(x for x in ran.output.splitlines() if "batches planned over the 2 prompts of this --limit" in x)
    assert "in bfloat16 a greedy text can depend on the prompts batched with it" in line and "--numerics-check" in line


# ------------------------------------------------------------------------------- 4: Ctrl-C says what is true

def test_ctrl_c_says_what_was_kept_at_each_stage(test_bed, drafter_dirs, tmp_path, monkeypatch):
    from dflash_eval.commands import evaluate as E
    from dflash_eval.model import target as T
    from dflash_eval.pipeline import continuations as C

    out, cache = tmp_path / "r", tmp_path / "cache"
    args = ["run", "-d", drafter_dirs["zlab"], "--target", test_bed["qwen3"], "--limit", "3", "--max-new-tokens", "4",
            "--generation-batch", "1", "--cache-dir", cache, "--no-html", "--out", out]

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:  # while the models load
        patch.setattr(T, "load_target", interrupt)
        loading = invoke(args, columns=300)
    assert loading.exit_code == 130 and not out.exists()
    assert f"interrupted before this run wrote anything ({out} is as it was)" in loading.stderr

    real, calls = C.generate_greedy, []

    def second_batch_interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as patch:  # while generating: one continuation made and cached
        patch.setattr(C, "generate_greedy", second_batch_interrupted)
        generating = invoke(args, columns=300)
    assert generating.exit_code == 130
    assert f"interrupted: 1 of 3 continuations generated, cached in {cache}; no prompt evaluated yet" in \
        generating.stderr and "report has nothing to show" in generating.stderr
    report = invoke(["report", out])
    assert report.exit_code == 2 and "incomplete run: 0 of 3 prompts done" in report.stderr

    with monkeypatch.context() as patch:  # after the first prompt's rows are written
        patch.setattr(E, "pause_after_prompt", interrupt)
        evaluating = invoke(args, columns=300)
    assert evaluating.exit_code == 130 and "generate 2/2" in evaluating.output  # the cached one reused
    assert f"interrupted: 1 of 3 prompts evaluated and kept in {out} (`dflash-eval report {out} --partial`" in \
        evaluating.stderr
    assert "INCOMPLETE RUN: 1 of 3 prompts done" in invoke(["report", out, "--partial"]).stdout
    assert invoke(args).exit_code == 0


# ------------------------------------------------------------------ 6: per-position file, depth views (HTML)

@pytest.fixture(scope="module")
def runs(trained, tmp_path_factory):
    """The trained qwen3 drafter, 3 demo prompts x 24 tokens: with the default depth buckets (every anchor
    under 1K), and split at 40 and 48 tokens (three buckets with steps); the first with the modelled speedup."""
    root = tmp_path_factory.mktemp("views")
    common = ["-d", f"{trained['qwen3']['good']}:good", "--target", trained["qwen3"]["target"], "--limit", "3",
              "--max-new-tokens", "24", "--cache-dir", root / "cache"]
    one = invoke(["run", *common, "--draft-lengths", "1,3", "--accelerator", "h200", "--out", root / "one"])
    split = invoke(["run", *common, "--depth-buckets", "0,40,48", "--out", root / "split"])
    assert one.exit_code == 0 and split.exit_code == 0, one.output + split.output
    return {"one": root / "one", "split": root / "split", "one_output": one.stdout}


def test_per_position_csv_is_one_row_per_drafter_and_the_splits_hold_steps(runs):
    rows = list(csv.DictReader((runs["one"] / "per_position.csv").open()))
    assert [r["drafter"] for r in rows] == ["good"] and "acceptance_at_pos_1" in rows[0]
    parts = list(csv.DictReader((runs["one"] / "per_position_splits.csv").open()))
    assert [(r["split"], r["part"]) for r in parts if r["split"] in ("draft_length", "depth")] == [
        ("draft_length", "1"), ("depth", "0-1K")]  # k = 3 is the checkpoint's own block; empty buckets left out
    assert all(float(r["tau_macro"]) >= 1 for r in parts)


LAYOUT = """(() => {
  const section = document.getElementById(%s);
  const over = [...document.querySelectorAll("main *")].filter(e => e.getBoundingClientRect().right > innerWidth + 1
      && !e.closest(".scroll, table.sortable, .blk, figure")).map(e => e.tagName + "." + e.className);
  const svg = section ? [...section.querySelectorAll("svg")].map(s => {
      const b = s.getBoundingClientRect(); return {w: b.width, h: b.height, right: b.right}; }) : null;
  if (section) scrollTo(0, section.getBoundingClientRect().top + scrollY - 90);  // below the sticky menu
  return {text: section ? section.textContent : null, svg, over, page: document.documentElement.scrollWidth,
          window: innerWidth};
})()"""


def screenshots(pages: dict[str, tuple[Path, str]], out: Path) -> dict:
    """Each page at 1400 and 700 px in headless Chromium: the section's text, its charts' boxes, anything
    overflowing the window, and a screenshot of the section (printed for the test log)."""
    from test_html import DevTools, required_chromium

    binary = required_chromium()
    browser = DevTools(binary, out / "profile", out / "chromium.log")
    seen = {}
    try:
        session = browser.page_session()
        for name, (page, section) in pages.items():
            for width in (1400, 700):
                browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                                                                    "deviceScaleFactor": 1, "mobile": False},
                             session=session)
                browser.events.clear()
                browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
                browser.wait_event("Page.loadEventFired")
                seen[name, width] = browser.send("Runtime.evaluate", {"expression": LAYOUT % json.dumps(section),
                                                                      "returnByValue": True},
                                                 session=session)["result"]["value"]
                shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
                path = out / f"{name}-{width}px.png"
                path.write_bytes(base64.b64decode(shot["data"]))
                print(f"\nscreenshot {name} at {width} px: {path}")
    finally:
        browser.close()
    return seen


def test_depth_views_draw_only_buckets_with_steps_in_the_browser(runs, trained, tmp_path):
    save = tmp_path / "save" / "checkpoint-10"  # a training run's one checkpoint, HF Trainer's layout
    shutil.copytree(trained["qwen3"]["good"], save)
    (save / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    track = invoke(["track", save.parent, "--target", trained["qwen3"]["target"], "--limit", "3",
                    "--max-new-tokens", "24", "--cache-dir", tmp_path / "cache", "--out", tmp_path / "track"])
    assert track.exit_code == 0, track.output
    seen = screenshots({"one-bucket": (runs["one"] / "report.html", "breakdown"),
                        "three-buckets": (runs["split"] / "report.html", "breakdown"),
                        "track": (tmp_path / "track" / "track.html", "depth"),
                        "speedup": (runs["one"] / "report.html", "draft-lengths")}, tmp_path)
    for width in (1400, 700):
        one, three, tracked = seen["one-bucket", width], seen["three-buckets", width], seen["track", width]
        for page in (one, three, tracked, seen["speedup", width]):
            assert page["page"] <= page["window"] and page["over"] == [], (width, page)
        # every anchor under 1K: no curve of one dot, a line saying why
        assert one["svg"] == [] and "every anchor lies in one depth bucket (0-1K tokens): no curve" in one["text"]
        assert tracked["svg"] == [] and "every anchor lies in one depth bucket" in tracked["text"]
        # split at 40 and 48: one curve over the three buckets that hold steps, inside the window
        assert len(three["svg"]) == 1 and "every anchor lies" not in three["text"]
        assert three["svg"][0]["w"] > 200 and three["svg"][0]["right"] <= width
        assert "the modelled speedup rises with the batch here" in seen["speedup", width]["text"]
    assert "note: the modelled speedup rises with the batch here" in " ".join(runs["one_output"].split())


def test_the_depth_chart_spans_the_buckets_with_steps():
    from dflash_eval.render.breakdown import depth_buckets_with_data, depth_note

    def bucket(name, tau):
        return {"bucket": name, "metrics": {"tau_macro": tau, "steps": 0 if tau is None else 9}}

    drafters = [{"name": "a", "by_depth": [bucket("0-1K", 2.0), bucket("1K-2K", None), bucket("2K-4K", 3.0)]},
                {"name": "b", "by_depth": [bucket("0-1K", None), bucket("1K-2K", 1.5), bucket("2K-4K", None)]}]
    assert depth_buckets_with_data(drafters) == ["0-1K", "1K-2K", "2K-4K"] and depth_note(drafters) is None
    assert depth_buckets_with_data(drafters[:1]) == ["0-1K", "2K-4K"]
    assert depth_note([{"name": "a", "by_depth": [bucket("0-1K", 2.0), bucket("1K-2K", None)]}]).startswith(
        "every anchor lies in one depth bucket (0-1K tokens)")


# ------------------------------------------------------------------------- 7: numbers that invite a budget

def test_a_speedup_rising_with_the_batch_is_explained_and_a_falling_one_is_not():
    from dflash_eval.core.speedup import rising_with_batch

    def table(speedups, target, drafter):
        return {"batches": [1, 64], "target_seconds_one_token": [1.0, 2.0],
                "rows": [{"k": 3, "block": 4, "speedup": speedups, "target_seconds": target, "drafter_seconds": drafter}]}

    # a tiny target: 4 tokens cost 1.1x one at batch 64, the drafter a fixed 0.5 s (1/3 of a batch-1 step)
    note = rising_with_batch(table([1.3, 1.6], [1.0, 2.2], [0.5, 0.5]))
    assert note.startswith("the modelled speedup rises with the batch here: at batch 64 verifying k + 1 = 4 tokens "
                           "still costs the target 1.10x one token") and "33% of a step at batch 1" in note
    assert rising_with_batch(table([2.0, 1.2], [1.0, 7.0], [0.1, 0.2])) is None  # a real target's shape
    assert rising_with_batch(table([2.0, None], [1.0, None], [0.1, None])) is None  # unknown cells: no claim


# --------------------------------------------------- 8: a summary for machines and for pasting, live numbers

def test_report_json_and_markdown_carry_the_summary_slots_and_verdict(runs):
    from dflash_eval.commands.diff import diff

    for folder in (STORED, runs["one"]):  # two drafters (a verdict); a current run (counts beside each share)
        run = json.loads((folder / "run.json").read_text())
        data = json.loads(invoke(["report", folder, "--json"]).stdout)
        assert [d["name"] for d in data["drafters"]] == [d["name"] for d in run["drafters"]]
        for mine, theirs in zip(data["drafters"], run["drafters"]):
            m = theirs["metrics"]
            assert (mine["tau_macro"], mine["tau_micro"], mine["steps"]) == (m["tau_macro"], m["tau_micro"], m["steps"])
            assert [s["reach"] for s in mine["slots"]] == m["reach"]
            if "slot_counts" in m:
                assert [s["reach_count"] for s in mine["slots"]] == m["slot_counts"]["reach"]
        lines = invoke(["report", folder, "--markdown"]).stdout.splitlines()
        assert lines[0].startswith("### Verdict: ")  # the verdict block first (core/verdict.py)
        assert any(line.startswith(f"**dflash-eval run** `{folder}`") for line in lines)
        first = run["drafters"][0]
        assert f"| {first['metrics']['tau_macro']:.2f}" in next(x for x in lines if x.startswith(f"| {first['name']} |"))
        slot = next(line for line in lines if line.startswith("| 1 |"))
        counts = first["metrics"].get("slot_counts")
        shown = f"{first['metrics']['reach'][0]:.3f}" + (" ({}/{})".format(*counts["reach"][0]) if counts else "")
        assert f"| {shown} |" in slot
    assert data["drafters"][0]["slots"][0]["reach_count"]  # the current run's counts
    verdict = diff(f"{STORED}:trained", f"{STORED}:repeat-anchor")["verdict"]
    assert [v["verdict"] for v in json.loads(invoke(["report", STORED, "--json"]).stdout)["verdicts"]] == [verdict]
    assert f"- {verdict}" in invoke(["report", STORED, "--markdown"]).stdout.splitlines()
    both = invoke(["report", STORED, "--json", "--markdown"])
    assert both.exit_code == 2 and "give one of them" in both.stderr


def test_live_mode_prints_tokens_per_second_step_latency_and_measured_speedup(trained, tmp_path):
    out = tmp_path / "live"
    ran = invoke(["run", "-d", f"{trained['qwen3']['good']}:good", "--target", trained["qwen3"]["target"], "--limit", "2",
                  "--max-new-tokens", "12", "--mode", "live", "--draft-lengths", "1", "--cache-dir", tmp_path / "c",
                  "--no-html", "--out", out], columns=300)
    assert ran.exit_code == 0, ran.output
    drafter = json.loads((out / "run.json").read_text())["drafters"][0]
    committed = sum(c for _, c in drafter["counts"]["per_prompt"].values())
    line = next(x for x in ran.stdout.splitlines() if x.startswith("live loop, good: "))
    speed = json.loads(invoke(["report", out, "--json"]).stdout)["drafters"][0]["live"]
    assert speed["tokens_per_second"] == pytest.approx(committed / drafter["live"]["seconds"])
    assert f"{speed['tokens_per_second']:,.1f} tokens/s over {drafter['live']['steps']} steps" in line
    assert f"{1000 * drafter['live']['seconds'] / drafter['live']['steps']:.2f} ms per step on cpu" in line
    assert f"measured speedup over plain decoding {speed['measured_speedup']:.2f}x (batch 1)" in line


def test_an_offline_cache_miss_for_a_target_prints_the_hf_download_command(drafter_dirs, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    result = invoke(["run", "-d", drafter_dirs["zlab"], "--target", "Qwen/Qwen3-8B", "--out", tmp_path / "r"])
    assert result.exit_code == 2 and not (tmp_path / "r").exists()
    assert "Qwen/Qwen3-8B: not a local folder and not found in the Hugging Face cache" in result.stderr
    assert "download it with: hf download Qwen/Qwen3-8B" in result.stderr


# ---------------------------------------------------------------------------------------------- 9: smaller

def test_text_rows_are_a_documented_alias_of_prompt(tmp_path):
    from dflash_eval.pipeline.prompts import read_prompts_file

    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "text": "Reverse a string."}\n{"id": "b", "prompt": "Sort a list."}\n')
    assert [(p.id, p.text, p.chat()) for p in read_prompts_file(path)] == [
        ("a", "Reverse a string.", [{"role": "user", "content": "Reverse a string."}]),
        ("b", "Sort a list.", [{"role": "user", "content": "Sort a list."}])]
    assert '"text"' in (ROOT / "docs" / "prompts.md").read_text() and '"text"' in (ROOT / "README.md").read_text()


def test_a_byte_identical_copy_of_the_verifier_is_the_verifier(test_bed, drafter_dirs, tmp_path):
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.inputs import prepare_inputs

    def warnings(target):
        options = RunOptions(drafters=[str(drafter_dirs["speculators"])], target=str(target), prompts="demo",
                             limit=1, out=tmp_path / "unused", cache_dir=tmp_path / "cache")
        return [w for w in prepare_inputs(options).warnings if "records verifier" in w]

    copy = tmp_path / "copy-of-the-target"
    shutil.copytree(test_bed["qwen3"], copy)
    assert warnings(copy) == []  # the drafter records test_bed["qwen3"]: the same bytes elsewhere
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # one bit of the last tensor's data: still a valid file, other weights
    weights.write_bytes(bytes(data))
    assert len(warnings(copy)) == 1 and "another config or other weights" in warnings(copy)[0]


def test_show_help_and_worst_blocks_taken_across_prompts():
    from dflash_eval.core.documents.results import read_samples
    from dflash_eval.core.samples import select_blocks

    shown = " ".join(invoke(["show", "--help"], columns=200).stdout.split())
    assert "--worst K The K blocks with the shortest accepted prefix, taken across prompts" in shown
    assert "--first N The first N blocks" in shown and "--random K K blocks at random" in shown
    rows = read_samples(STORED / "samples.jsonl")
    worst = select_blocks(rows, drafter="repeat-anchor", worst=2)
    assert [b.accepted for b in worst] == [0, 0] and len({b.prompt_id for b in worst}) == 2
    every = select_blocks(rows, drafter="repeat-anchor", worst=1000)
    zero = [b.prompt_id for b in every if b.accepted == 0 and b.first_rejected is not None]
    firsts = zero[:len(set(zero))]
    assert len(set(firsts)) == len(firsts)  # each prompt's worst before any prompt's second


def test_doctor_tables_fit_80_columns_and_the_window_title_follows_columns():
    from rich.console import Console

    from dflash_eval.doctor.views.terminal import render_doctor
    from dflash_eval.doctor.views.windows import render_windows

    rope = ("RoPE: the target's (default, theta 10000000.0, mrope_interleaved True, mrope_section 2/1/1, "
            "partial_rotary_factor 0.25)")

    def variant(name):
        return {"variant": name, "tau_macro": 1.99, "identical_drafts": 0.77,
                "delta": {"estimate": 0.02, "low": -0.02, "high": 0.07, "p_value": 0.000488, "n": 12, "total": 12}}

    result = {"drafter": "demo-inhouse", "prompts": 12, "mask_row": {"ok": True, "detail": "fine"},
              "kernels": {"compared": False, "detail": "dense"}, "verdict": "no mismatch found",
              "variants": [{"variant": "as configured", "tau_macro": 1.96, "identical_drafts": None, "delta": None},
                           variant("anchor in context (p <= a)"), variant(rope)]}
    console = Console(width=80, record=True, highlight=False)
    render_doctor(console, result)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if "RoPE: the" in line)
    assert "target's (1)" in lines[start + 1] and lines[start + 2].startswith("└")  # the row: 2 lines, not 10
    assert "<0.001" in lines[start]
    assert any(line.startswith("1. RoPE: the target's: default, theta 10000000.0") for line in lines)
    section = {"verdict": "nothing falls away", "curves": [
        {"name": "as configured", "buckets": [{"bucket": "0-1K", "steps": 5, "counts": None}]}]}
    wide = Console(width=200, record=True, highlight=False)
    render_windows(wide, section)
    assert wide.export_text().splitlines()[0] == ("window variants by depth: tau macro (walk steps) per bucket of "
                                                   "the anchor's position, on the same trajectories")
