"""`run --reference` measures the gap and explains it in one command, on the same prompts (issue 48): doctor's
variants replayed on the run's own trajectories (no second target pass), the verdict block first in every
report, the reference named the way `diff` reads it back."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.explanation import explain_drafter, explanation_documents
from dflash_eval.core.verdict import verdict_block
from dflash_eval.pipeline.prompts import DEMO_PROMPTS

# 13 coding prompts: the demo's twelve (the fixture drafters' training prompts) and one they never saw
THIRTEEN = [*DEMO_PROMPTS, "Write a function that sums the digits of an integer."]


def invoke(args, columns: int = 200):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


# ------------------------------------------------------------------------------------------ by hand

def rows_of(taus: dict[str, list[float]], flagged: dict[str, list[int]] | None = None, steps: int = 10,
            reference: str = "ref") -> list[dict]:
    """Rows of a run: drafter "mine" (with `explain`) and the reference; each prompt's tau t as (steps, t * steps)
    committed. taus: {"mine": [...], "ref": [...], variant: [...]}, one value per prompt."""
    flagged = flagged or {}
    variants = [name for name in taus if name not in ("mine", reference)]
    rows = []
    for i in range(len(taus["mine"])):
        pid = f"p{i}"
        for name in ("mine", reference):
            row = {"prompt_id": pid, "drafter": name, "counts": {"per_prompt": {pid: [steps, round(taus[name][i] * steps)]}},
                   "repetition": {"flagged_blocks": (flagged.get(name) or [0] * 99)[i], "blocks": steps}}
            if name == "mine":
                row["explain"] = {"reference": reference, "variants": [
                    {"variant": v, "bug": f"trained as {v}", "check": f"the {v} part",
                     "counts": [steps, round(taus[v][i] * steps)], "flagged": [(flagged.get(v) or [0] * 99)[i], steps]}
                    for v in variants]}
            rows.append(row)
    return rows


def test_the_explanation_by_hand():
    """8 prompts: mine tau 2.0..2.7, the reference 4 (+/- 0.1), the anchor variant 4.1..4.4 and another equal
    to mine. Every figure over the 8 prompts: gap = mean(ref) - mean(mine), the anchor's delta and share,
    flagged shares summed from the rows."""
    mine = [2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7]
    ref = [4.0, 3.9, 4.1, 4.0, 3.9, 4.1, 4.0, 4.0]
    anchor = [4.1, 4.2, 4.3, 4.4, 4.1, 4.2, 4.3, 4.4]
    rows = rows_of({"mine": mine, "ref": ref, "anchor": anchor, "other": mine},
                   flagged={"mine": [5] * 8, "anchor": [1] * 8, "other": [5, 5, 5, 5, 4, 4, 4, 4]})
    e = explain_drafter(rows, "mine")
    gap = sum(ref) / 8 - sum(mine) / 8
    closed = sum(anchor) / 8 - sum(mine) / 8
    assert e["behind"] and e["reference"] == "ref" and e["prompts"] == 8
    assert e["gap"]["gap"]["estimate"] == pytest.approx(gap) and e["gap"]["gap"]["n"] == 8 == e["gap"]["paired_prompts"]
    assert e["gap"]["reference_tau_macro"] == pytest.approx(sum(ref) / 8)
    table = {v["variant"]: v for v in e["variants"]}
    assert list(table)[0] == "as configured" and table["as configured"]["flagged_share"] == 0.5
    assert table["anchor"]["delta"]["estimate"] == pytest.approx(closed) and table["anchor"]["flagged_share"] == 0.1
    assert table["other"]["delta"]["estimate"] == 0 and table["other"]["flagged_share"] == pytest.approx(36 / 80)
    share = next(v for v in e["gap"]["variants"] if v["variant"] == "anchor")
    assert share["share"] == pytest.approx(closed / gap) and share["share_ci"][0] > 0
    assert e["finding"] == "anchor" and e["verdict"].startswith("behaves as if trained as anchor: tau 2.35 -> 4.25 ")
    assert e["gap"]["explained_by"] == "anchor" and "Check the anchor part." in e["gap"]["paragraph"]
    assert explanation_documents(rows) == [e]  # one entry: only "mine" carries variants


def test_no_gap_no_explanation_and_a_row_without_its_variants_is_refused():
    same = [2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7]
    level = explain_drafter(rows_of({"mine": same, "ref": same, "anchor": [t + 1 for t in same]}), "mine")
    assert not level["behind"] and level["finding"] is None
    assert level["verdict"].startswith("mine is not measurably behind ref (gap: delta +0.00")
    silent = rows_of({"mine": [0.0] * 8, "ref": [0.0] * 8, "anchor": [0.0] * 8}, steps=0)  # every continuation ended
    nothing = explain_drafter(silent, "mine")
    assert not nothing["behind"] and nothing["variants"][1]["delta"] is None
    assert nothing["verdict"] == "mine is not measurably behind ref (gap: no prompt with steps on both sides): no gap to explain"
    rows = rows_of({"mine": same, "ref": [4.0] * 8, "anchor": [4.0] * 8})
    del rows[4]["explain"]  # prompt p2's row of mine
    with pytest.raises(ValueError, match=r"the rows of prompts \['p2'\] carry no explanation"):
        explain_drafter(rows, "mine")


def test_the_verdict_block_by_hand():
    """Taus, the paired delta to the reference in diff's words, the explanation's share, RUN:NAME commands."""
    mine = [2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7]
    rows = rows_of({"mine": mine, "ref": [4.0] * 8, "anchor": [t + 2 for t in mine]}, flagged={"mine": [5] * 8})

    def drafter(name, path):
        per_prompt = {r["prompt_id"]: r["counts"]["per_prompt"][r["prompt_id"]] for r in rows if r["drafter"] == name}
        flagged = sum(r["repetition"]["flagged_blocks"] for r in rows if r["drafter"] == name)
        return {"name": name, "path": path, "metrics": {"tau_macro": sum(c / s for s, c in per_prompt.values()) / 8,
                                                        "tau_macro_ci": [1.0, 5.0]},
                "counts": {"per_prompt": per_prompt}, "repetition": {"flagged_blocks": flagged, "flagged_share": flagged / 80}}

    run = {"provenance": {"reference": {"name": "ref", "given": "my refs/ref"}, "prompts": {"count": 8}},
           "drafters": [drafter("mine", "ck/mine"), drafter("ref", "my refs/ref")],
           "explanation": explanation_documents(rows)}
    view = verdict_block(run, "runs/my run")
    assert view["title"] == "mine vs ref" and view["compared_to"] == view["reference"] == "ref"
    mine_row, ref_row = view["drafters"]
    assert ref_row["reference"] and "line" not in ref_row
    assert mine_row["line"].startswith("mine is worse than ref: delta tau = -1.65 ")
    closing = mine_row["explanation"]["closing"]
    assert closing["variant"] == "anchor" and closing["share"] == pytest.approx(2 / 1.65)
    assert (closing["paired_prompts"], closing["prompts"]) == (8, 8) and closing["flagged_configured"] == 0.5
    commands = [step["command"] for step in view["next"]]
    assert commands == ["dflash-eval show 'runs/my run' --flagged --drafter-name mine",
                        "dflash-eval diff 'runs/my run:ref' 'runs/my run:mine'",
                        "dflash-eval doctor --drafter ck/mine --reference 'my refs/ref' --out 'runs/my run'"]
    assert shlex.split(commands[1])[2:] == ["runs/my run:ref", "runs/my run:mine"]  # as diff reads it back


# ----------------------------------------------------------------------------- the case, end to end

@pytest.fixture(scope="module")
def zlab_reference(trained, tmp_path_factory) -> Path:
    """A z-lab-format reference folder, trained correctly (full attention) on the drafters' training data."""
    from dflash_eval.demo.train import TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    target = load_target(str(trained["qwen3"]["target"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), 40)
    return train_drafter(target, sequences, TrainConfig(block_size=4), tmp_path_factory.mktemp("zlab") / "zlab-ref", "zlab")


@pytest.fixture(scope="module")
def thirteen(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "coding.jsonl"
    path.write_text("".join(json.dumps({"id": f"code-{i}", "prompt": text}) + "\n" for i, text in enumerate(THIRTEEN)))
    return path


@pytest.fixture(scope="module")
def explained_run(trained, zlab_reference, thirteen, tmp_path_factory):
    """`run -d ANCHOR_BUG:mine --reference ./zlab-ref` on 13 prompts: the speculators-format drafter trained with
    the anchor in its context against a local z-lab-format reference folder, as the issue tried it."""
    root = tmp_path_factory.mktemp("explained")
    out = root / "runs" / "mine"
    args = ["run", "-d", f"{trained['qwen3']['anchor_bug']}:mine", "--reference", zlab_reference, "--target",
            trained["qwen3"]["target"], "--prompts", thirteen, "--max-new-tokens", "40", "--cache-dir", root / "cache"]
    result = invoke([*args, "--out", out])
    assert result.exit_code == 0, result.output
    plain = invoke([*args, "--no-explain", "--out", root / "plain"])
    assert plain.exit_code == 0, plain.output
    return out, result, root / "plain"


def test_one_run_names_the_anchor_bug_with_its_share_on_all_13_prompts(explained_run, trained, zlab_reference):
    from dflash_eval.formats.checkpoints import read_spec

    assert read_spec(zlab_reference)[0].format == "zlab" and read_spec(trained["qwen3"]["anchor_bug"])[0].format == "speculators"
    out, result, _ = explained_run
    run = json.loads((out / "run.json").read_text())
    reference = next(d for d in run["drafters"] if d["name"] == "zlab-ref")
    assert run["provenance"]["reference"] == {"name": "zlab-ref", "given": str(zlab_reference)}
    (e,) = run["explanation"]
    assert e["behind"] and e["finding"] == "anchor in context (p <= a)"
    assert e["verdict"].startswith("behaves as if trained with the anchor's own hidden state in its context: tau ")
    gap = e["gap"]
    assert gap["paired_prompts"] == 13 and gap["gap"]["n"] == gap["gap"]["total"] == 13  # every prompt, none lost
    assert gap["reference_tau_macro"] == pytest.approx(reference["metrics"]["tau_macro"], abs=1e-12)  # the run's tau
    assert gap["explained_by"] == "anchor in context (p <= a)"
    share = next(v for v in gap["variants"] if v["variant"] == gap["explained_by"])
    assert share["share_ci"] is not None and share["share_ci"][0] > 0
    assert run["provenance"]["work"]["tap_passes"] == 13  # one target pass per prompt: no second one
    # the terminal: the verdict block first, naming the bug, the share with its interval, 13 of 13 prompts
    stdout = result.stdout
    block = stdout[stdout.index("verdict: mine vs zlab-ref"):stdout.index("next:")]
    assert stdout.index("verdict: mine vs zlab-ref") < stdout.index("tau macro")  # before any table
    flat = " ".join(line.strip("│ ") for line in block.splitlines())
    assert "behaves as if trained with the anchor's own hidden state in its context" in flat
    ci = share["share_ci"]
    assert f"it closes {100 * share['share']:.0f}% [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%] of the gap to zlab-ref over 13 of 13 prompts" in flat
    assert f"zlab-ref (reference): tau {reference['metrics']['tau_macro']:.2f}" in flat
    assert "explaining the gap to zlab-ref: " in result.output and "no more target passes" in result.output


def test_the_explanation_changes_none_of_the_runs_numbers(explained_run):
    out, _, plain = explained_run
    a, b = (json.loads((folder / "run.json").read_text()) for folder in (out, plain))
    assert [d["metrics"] for d in a["drafters"]] == [d["metrics"] for d in b["drafters"]]
    assert [d["counts"] for d in a["drafters"]] == [d["counts"] for d in b["drafters"]]
    assert "explanation" not in b and b["provenance"]["explain"] is False
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    plain_rows = [json.loads(line) for line in (plain / "samples.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "explain"} for r in rows] == plain_rows
    assert all(("explain" in r) == (r["drafter"] == "mine") for r in rows)


def test_the_printed_commands_run_as_printed(explained_run):
    """The verdict's next commands name the reference as diff reads it back (RUN:NAME), and run."""
    from dflash_eval.cli.common import program

    out, result, _ = explained_run
    words = program()  # as this shell reaches dflash-eval: the bare name on PATH, else the venv's script
    lines = [line.strip() for line in result.stdout.splitlines()]
    commands = [shlex.split(line)[len(words):] for line in lines if line.startswith(shlex.join(words) + " ")]
    diff = next(c for c in commands if c[0] == "diff")
    assert diff[1:] == [f"{out}:zlab-ref", f"{out}:mine"]
    compared = invoke(diff)
    assert compared.exit_code == 0 and "mine is worse than zlab-ref" in compared.stdout
    shown = invoke(next(c for c in commands if c[0] == "show"))
    assert shown.exit_code == 0 and "flagged as repetitive, worst first" in shown.stdout


def test_report_opens_with_the_verdict_in_every_format(explained_run):
    out, _, _ = explained_run
    terminal = invoke(["report", out]).stdout
    assert terminal.lstrip().startswith("╭─ verdict: mine vs zlab-ref, 13 prompts")
    markdown = invoke(["report", out, "--markdown"]).stdout
    assert markdown.startswith("### Verdict: mine vs zlab-ref, 13 prompts")
    assert "(doctor, run --reference): behaves as if trained with the anchor's own hidden state" in markdown
    data = json.loads(invoke(["report", out, "--json"]).stdout)
    assert list(data)[0] == "verdict" and data["verdict"]["drafters"][0]["explanation"]["finding"] == "anchor in context (p <= a)"
    page = (out / "report.html").read_text()
    assert page.index('<section id="verdict">') < page.index('<section id="summary">')
    assert "<title>dflash-eval: mine vs zlab-ref on qwen3</title>" in page


def test_reference_path_name_is_parsed_as_drafter_path_name(trained, zlab_reference, thirteen, tmp_path):
    """--reference PATH:NAME names the reference NAME (the README's `diff runs/mine:z-lab ...` with a local one)."""
    out = tmp_path / "runs" / "mine"
    result = invoke(["run", "-d", trained["qwen3"]["anchor_bug"], "--reference", f"{zlab_reference}:z-lab", "--target",
                     trained["qwen3"]["target"], "--prompts", thirteen, "--limit", "2", "--max-new-tokens", "8",
                     "--no-explain", "--cache-dir", tmp_path / "c", "--out", out])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert [d["name"] for d in run["drafters"]] == ["qwen3-anchor-bug", "z-lab"]
    assert Path(run["drafters"][1]["path"]) == zlab_reference
    assert invoke(["diff", f"{out}:z-lab", f"{out}:qwen3-anchor-bug"]).exit_code == 0


def test_every_section_of_the_page_has_its_link(explained_run):
    import re

    page = (explained_run[0] / "report.html").read_text()
    nav = page[page.index("<nav>"):page.index("</nav>")]
    sections = re.findall(r'<section id="([^"]+)"', page)
    assert "explanation" in sections and sections[0] == "verdict"
    assert [s for s in sections if f'href="#{s}"' not in nav] == []


def test_no_loading_bar_on_stderr(explained_run):
    """transformers' "Loading weights" bar used to reach every command's stderr (model/target.quiet_weight_loading)."""
    assert "Loading weights" not in explained_run[1].stderr


# ------------------------------------------------------------- refused before torch or transformers is imported

REFUSE = """
import json, sys
from typer.testing import CliRunner
from dflash_eval.cli import app
result = CliRunner().invoke(app, sys.argv[1:], env={"COLUMNS": "200"})
print(json.dumps({"code": result.exit_code, "stderr": result.stderr,
                  "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def refused(args: list) -> dict:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", REFUSE, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_bad_arguments_are_refused_before_torch_is_imported(explained_run, trained, zlab_reference, thirteen, tmp_path):
    """A bad --reference, an unknown target, a resume with other settings, z-lab for a local target: one line,
    exit 2, and neither torch nor transformers imported (pipeline/preflight.py): seconds, not 9-11 s."""
    out, _, _ = explained_run
    mine, target = trained["qwen3"]["anchor_bug"], trained["qwen3"]["target"]
    cases = [
        ("no such file or directory", ["run", "-d", mine, "--reference", tmp_path / "nope", "--target", target,
                                       "--out", tmp_path / "o"]),
        ("not a local folder and not found in the Hugging Face cache", ["run", "-d", mine, "--target", "nobody/nothing",
                                                                        "--out", tmp_path / "o"]),
        ("already holds a run with different settings (max_new_tokens: 40 -> 41)", [  # the run above, resumed
            "run", "-d", f"{mine}:mine", "--reference", zlab_reference, "--target", target, "--prompts", thirteen,
            "--max-new-tokens", "41", "--out", out]),
        ("give a reference checkpoint folder instead: --reference PATH or PATH:NAME", [
            "run", "-d", mine, "--reference", "z-lab", "--target", target, "--out", tmp_path / "o"]),
        ("no such file or directory", ["doctor", "-d", mine, "--reference", f"{tmp_path / 'nope'}:ref", "--target", target]),
    ]
    for expected, args in cases:
        answer = refused(args)
        assert answer["code"] == 2 and expected in answer["stderr"], (args, answer)
        assert answer["stderr"].count("\n") == 1 and answer["heavy"] == [], (args, answer)


def test_merged_shards_explain_as_one_run(explained_run, trained, zlab_reference, thirteen, tmp_path):
    """The explanation is rebuilt from the rows: two shards merged give the one run's section, figure for figure."""
    out, _, _ = explained_run
    args = ["run", "-d", f"{trained['qwen3']['anchor_bug']}:mine", "--reference", zlab_reference, "--target",
            trained["qwen3"]["target"], "--prompts", thirteen, "--max-new-tokens", "40", "--no-html",
            "--cache-dir", out.parent.parent / "cache"]
    for index in (0, 1):
        done = invoke([*args, "--shard", f"{index}/2", "--out", tmp_path / f"s{index}"])
        assert done.exit_code == 0, done.output
    merged = invoke(["merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "m", "--no-html"])
    assert merged.exit_code == 0, merged.output
    one, joined = (json.loads((folder / "run.json").read_text()) for folder in (out, tmp_path / "m"))
    assert joined["explanation"] == one["explanation"]
    assert joined["provenance"]["reference"] == one["provenance"]["reference"]
