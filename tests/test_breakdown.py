"""Where acceptance is lost: depth buckets, segments and token classes, on hand-computed rows, and their
partition of a real run's totals."""

from __future__ import annotations

import csv
import io
import json

import pytest

from dflash_eval.core import breakdown as BD
from dflash_eval.core import metrics as M
from dflash_eval.core.documents.results import metrics_summary as summary
from dflash_eval.core.errors import InputError
from dflash_eval.core.text_kinds import byte_level_text, labels, segment_labels, token_classes

NS = -1  # engine.NOT_SCORED

# p = 3, continuation of 7 tokens (T = 10), B = 4. Walk: a=3 commits 2 (n=1), a=5 commits 3 (n=2), a=8 commits
# 1 (clipped: one token left; n=0, one slot scored). Anchors 3..8 with slot bits (bit k-1 = slot k right);
# a=7's bit 3 lies past what is scored there (T-1-7 = 2 slots) and must not count.
PIECES = ["<think>", "hmm", "</think>", "\n\n", "```", "x", " ="]
BITS = [0b001, 0b101, 0b011, 0b111, 0b100, 0b001]
ROW = {"prompt_id": "p", "prompt_len": 3, "continuation_len": 7, "walk_anchors": [3, 5, 8],
       "walk_accept_lengths": [2, 3, 1], "walk_drafted": [3, 3, 1], "anchor_slot_correct": BITS,
       "continuation_pieces": PIECES}


def table_of(bits, anchors, T, B):
    """The engine's slot_correct table the bits stand for (1, 0 or NOT_SCORED)."""
    return [[(b >> (j - 1)) & 1 if j <= min(B - 1, T - 1 - a) else NS for j in range(1, B)] for b, a in zip(bits, anchors)]


def totals(row, B=4):
    import numpy as np

    T = row["prompt_len"] + row["continuation_len"]
    table = np.array(table_of(row["anchor_slot_correct"], range(row["prompt_len"], T - 1), T, B))
    walk = M.AcceptanceCounts.from_walk(row["prompt_id"], [n - 1 for n in row["walk_accept_lengths"]], B, row["walk_drafted"])
    return walk + M.AcceptanceCounts.from_marginal(np.where(table < 0, 0, table), B, valid=table >= 0)


def test_slot_bits_round_trip():
    assert BD.slot_bits([[1, 0, 1], [0, 1, NS], [1, NS, NS]]) == [0b101, 0b010, 0b001]
    right, scored = BD.slot_table([0b101, 0b111], [3, 8], 10, 4)
    assert right.tolist() == [[True, False, True], [True, True, True]]
    assert scored.tolist() == [[True, True, True], [True, False, False]]


def test_depth_buckets_hand_computed():
    split = BD.breakdown_counts([ROW], 4, edges=(5,))["depth"]
    first, second = split[0].to_dict(), split[1].to_dict()
    assert first == {"block_size": 4, "per_prompt": {"p": [1, 2]}, "steps": 1, "accepted_draft_tokens": 1,
                     "drafted_tokens": 3, "accept_length_histogram": [0, 1, 0, 0], "reach_counts": [1, 0, 0],
                     "reach_denominators": [1, 1, 1], "marginal_correct": [2, 0, 1], "marginal_total": [2, 2, 2]}
    assert second == {"block_size": 4, "per_prompt": {"p": [2, 4]}, "steps": 2, "accepted_draft_tokens": 2,
                      "drafted_tokens": 4, "accept_length_histogram": [1, 0, 1, 0], "reach_counts": [1, 1, 0],
                      "reach_denominators": [2, 1, 1], "marginal_correct": [3, 2, 1], "marginal_total": [4, 3, 2]}
    # tau per step of the deep bucket: (2 + ... ) committed 4 over 2 steps
    assert M.tau_micro(split[1]) == 2.0 and M.tau_micro(split[0]) == 2.0
    assert M.reach(split[1], denominator="all") == [0.5, 0.5, 0.0]


def test_segments_and_classes_hand_computed():
    assert segment_labels(PIECES) == ["thinking", "thinking", "thinking", "answer_prose", "answer_code",
                                      "answer_code", "answer_code"]
    assert token_classes(PIECES) == ["special", "word", "special", "newline", "operator", "identifier", "operator"]
    split = BD.breakdown_counts([ROW], 4, edges=(5,))
    seg = {k: v.to_dict() for k, v in split["segment"].items()}
    assert seg["thinking"]["accept_length_histogram"] == [0, 1, 0, 0]
    assert (seg["thinking"]["marginal_correct"], seg["thinking"]["marginal_total"]) == ([2, 0, 1], [2, 2, 2])
    assert seg["answer_prose"] == {"block_size": 4, "per_prompt": {"p": [1, 3]}, "steps": 1,
                                   "accepted_draft_tokens": 2, "drafted_tokens": 3,
                                   "accept_length_histogram": [0, 0, 1, 0], "reach_counts": [1, 1, 0],
                                   "reach_denominators": [1, 1, 1], "marginal_correct": [1, 1, 0],
                                   "marginal_total": [1, 1, 1]}
    assert seg["answer_code"] == {"block_size": 4, "per_prompt": {"p": [1, 1]}, "steps": 1,
                                  "accepted_draft_tokens": 0, "drafted_tokens": 1,
                                  "accept_length_histogram": [1, 0, 0, 0], "reach_counts": [0, 0, 0],
                                  "reach_denominators": [1, 0, 0], "marginal_correct": [2, 1, 1],
                                  "marginal_total": [3, 2, 1]}
    cls = {k: v.to_dict() for k, v in split["token_class"].items()}
    # steps: a=3 predicts "hmm" (word), a=5 "\n\n" (newline), a=8 " =" (operator)
    assert {k: v["steps"] for k, v in cls.items()} == {"word": 1, "newline": 1, "operator": 1, "special": 0,
                                                       "identifier": 0}
    # anchors: a=4 predicts "</think>" (special), a=6 "```" (operator), a=7 "x" (identifier)
    assert (cls["special"]["marginal_correct"], cls["special"]["marginal_total"]) == ([1, 0, 1], [1, 1, 1])
    assert (cls["identifier"]["marginal_correct"], cls["identifier"]["marginal_total"]) == ([0, 0, 0], [1, 1, 0])
    assert (cls["operator"]["marginal_correct"], cls["operator"]["marginal_total"]) == ([2, 1, 1], [2, 1, 1])


def test_every_split_adds_up_to_the_totals():
    doc = BD.breakdown_documents([ROW], 4, totals(ROW), summary, edges=(5,))
    assert [e["bucket"] for e in doc["by_depth"]] == ["0-5", "5+"]
    assert doc["by_depth"][1]["from"] == 5 and doc["by_depth"][1]["to"] is None
    assert [e["segment"] for e in doc["by_segment"]] == ["thinking", "answer_prose", "answer_code"]
    for key in ("by_depth", "by_segment", "by_token_class"):
        summed = M.AcceptanceCounts(block_size=4)
        for e in doc[key]:
            summed = M.pool_samples(summed, M.AcceptanceCounts.from_dict(e["counts"]))
        assert summed == totals(ROW)
    wrong = dict(ROW, anchor_slot_correct=[0] * 6)
    with pytest.raises(RuntimeError, match="does not add up"):
        BD.breakdown_documents([wrong], 4, totals(ROW), summary, edges=(5,))


def test_samples_of_one_prompt_pool_and_live_rows_have_no_marginal():
    live = {k: v for k, v in ROW.items() if k != "anchor_slot_correct"}
    second = dict(live, sample=1)
    walk_total = M.AcceptanceCounts.from_walk("p", [1, 2, 0], 4, [3, 3, 1])
    total = M.pool_samples(walk_total, walk_total)
    doc = BD.breakdown_documents([live, second], 4, total, summary, edges=(5,))
    assert doc["by_depth"][1]["counts"]["per_prompt"] == {"p": [4, 8]}
    assert doc["by_depth"][0]["metrics"]["marginal"] == []
    assert "breakdown_note" in doc


def test_depth_bucket_option():
    assert BD.parse_depth_buckets(None) == (1024, 2048, 4096, 8192, 16384, 32768)
    assert BD.parse_depth_buckets("0,512,2048") == (512, 2048)
    assert BD.parse_depth_buckets("1K, 4k") == (1024, 4096)
    for bad in ("512,256", "a,b", "0", "1K,1K", ""):
        with pytest.raises(ValueError):
            BD.parse_depth_buckets(bad)
    assert [BD.depth_label(lo, hi) for lo, hi in BD.depth_bounds((1024, 2048))] == ["0-1K", "1K-2K", "2K+"]
    assert [BD.depth_bucket(a, (1024, 2048)) for a in (0, 1023, 1024, 2047, 2048, 10**6)] == [0, 0, 1, 1, 2, 2]

    from dflash_eval.core.settings.work import Breakdown

    with pytest.raises(InputError, match="--depth-buckets"):
        Breakdown(depth_buckets="9,3").check()
    with pytest.raises(InputError, match="--draft-window"):
        Breakdown(draft_window=0).check()


def test_qwen_byte_level_pieces_and_classes():
    # raw vocabulary strings of Qwen's byte-level BPE: Ġ = space, Ċ = newline, ĉ = tab
    assert byte_level_text("Ġfoo") == " foo"
    assert byte_level_text("ĊĠĠĠĠ") == "\n    "
    assert byte_level_text("ĉ") == "\t"
    assert byte_level_text("<think>") == "<think>"
    raw = ["```", "python", "Ċ", "def", "Ġadd", "(a", ",", "Ġb", "):ĊĠĠĠ", "Ġreturn", "Ġa", "Ġ+", "Ġ", "1",
           "0", "Ġ#", "Ġok", "ĊĠĠĠ", "Ġs", "Ġ=", "Ġ'", "hi", "'", "Ċ", "```"]
    pieces = [byte_level_text(t) for t in raw]
    classes = token_classes(["Sure", ":\n", *pieces])
    assert classes[:2] == ["word", "operator"]
    assert dict(zip(raw, classes[2:])) | {} == {
        "```": "operator", "python": "identifier", "Ċ": "newline", "def": "keyword", "Ġadd": "identifier",
        "(a": "operator", ",": "operator", "Ġb": "identifier", "):ĊĠĠĠ": "operator", "Ġreturn": "keyword",
        "Ġa": "identifier", "Ġ+": "operator", "Ġ": "whitespace", "1": "number", "0": "number", "Ġ#": "comment",
        "Ġok": "comment", "ĊĠĠĠ": "newline", "Ġs": "identifier", "Ġ=": "operator", "Ġ'": "string", "hi": "string",
        "'": "string"}


def test_segment_rules():
    # the chat template opened the think block (Qwen3 thinking-2507): thinking until the first </think>
    assert segment_labels(["plan", ".", "</think>", "\n\n", "ok"]) == ["thinking"] * 3 + ["answer_prose"] * 2
    # a fence left open while thinking does not run into the answer; tilde fences; tool calls
    pieces = ["<think>", "```", "\n", "x", "</think>", "A", "\n", "~~~", "\n", "y", "\n", "~~~", "\n", "B",
              "<tool_call>", '{"a"', "}", "</tool_call>", "C"]
    assert segment_labels(pieces) == (["thinking"] * 5 + ["answer_prose"] * 2 + ["answer_code"] * 5
                                      + ["answer_prose"] * 2 + ["tool_call"] * 4 + ["answer_prose"])
    # a shorter fence does not close a longer one (the line break after a closing fence is prose again)
    assert segment_labels(["````", "\n", "```", "\n", "z", "\n", "````", "\n", "w"]) == (
        ["answer_code"] * 7 + ["answer_prose"] * 2)
    assert labels([]) == ((), ())


def test_split_parts_name_each_part():
    drafter = {"name": "d", "metrics": {}, **BD.breakdown_documents([ROW], 4, totals(ROW), summary, edges=(5,))}
    parts = [(split, part) for split, part, _ in BD.split_parts(drafter)]
    assert parts[:2] == [("depth", "0-5"), ("depth", "5+")]
    assert ("segment", "thinking") in parts and ("token_class", "newline") in parts


def test_run_splits_add_up_and_reach_the_csv(trained, tmp_path):
    """A real run on the test bed: by_depth / by_segment / by_token_class in run.json, each adding up to the
    drafter's totals (marginal included), and the parts' rows in per_position.csv."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    out = tmp_path / "run"
    run = evaluate(RunOptions(drafters=[str(trained["qwen3"]["good"])], target=str(trained["qwen3"]["target"]),
                              out=out, prompts="demo", limit=3, max_new_tokens=24, device="cpu",
                              cache_dir=tmp_path / "cache", depth_buckets="0,40,48", argv=["test"])).document
    d = run["drafters"][0]
    assert d["depth_edges"] == [40, 48]
    assert [e["bucket"] for e in d["by_depth"]] == ["0-40", "40-48", "48+"]
    total = M.AcceptanceCounts.from_dict(d["counts"])
    assert sum(e["counts"]["steps"] for e in d["by_depth"]) == total.steps > 0
    for key in ("by_depth", "by_segment", "by_token_class"):
        summed = M.AcceptanceCounts(block_size=total.block_size)
        for e in d[key]:
            summed = M.pool_samples(summed, M.AcceptanceCounts.from_dict(e["counts"]))
        assert summed == total, key
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(len(r["anchor_slot_correct"]) == len(r["anchor_accepted"]) for r in rows)
    names = [r["drafter"] for r in csv.DictReader(io.StringIO((out / "per_position.csv").read_text()))]
    assert names == [d["name"]]  # one row per drafter; the parts in their own file, those with steps
    parts = list(csv.DictReader(io.StringIO((out / "per_position_splits.csv").read_text())))
    assert ("depth", "40-48") in {(r["split"], r["part"]) for r in parts} and any(r["split"] == "token_class" for r in parts)
    assert [r["part"] for r in parts if r["split"] == "depth"] == [e["bucket"] for e in d["by_depth"] if e["metrics"]["steps"]]
    assert json.loads((out / "run.json").read_text())["drafters"][0]["by_depth"] == d["by_depth"]


BROWSER_CHECKS = """(() => {
  const section = document.getElementById("breakdown");
  if (!section) return null;
  const chart = section.querySelector("svg.chart");
  const box = chart ? chart.getBoundingClientRect() : {width: 0, height: 0};
  const rows = [...section.querySelectorAll("table.breakdown tbody tr")].map(r => r.cells[1].textContent.trim());
  const nav = [...document.querySelectorAll("a[href='#breakdown']")].length;
  return {label: chart && chart.getAttribute("aria-label"), width: box.width, height: box.height, rows, nav,
          over: section.getBoundingClientRect().right > innerWidth + 1};
})()"""


def test_the_breakdown_section_in_headless_chromium(tmp_path):
    """The stored report run, split here (its rows hold no slot bits: no marginal per part, said so), in a
    real headless Chromium: the section, its depth curve drawn at a real size, its tables, no error."""
    import copy

    from test_html import STORED, DevTools, required_chromium

    from dflash_eval.core.documents.results import read_run_document, read_samples
    from dflash_eval.render.html import render_run_html, write_html

    binary = required_chromium()
    run, rows = copy.deepcopy(read_run_document(STORED)), read_samples(STORED / "samples.jsonl")
    for d in run["drafters"]:
        mine = [r for r in rows if r["drafter"] == d["name"]]
        d.update(BD.breakdown_documents(mine, d["spec"]["block_size"], M.AcceptanceCounts.from_dict(d["counts"]),
                                        summary, edges=(40, 60)))
    assert "no marginal per part" in run["drafters"][0]["breakdown_note"]
    html = render_run_html(run, rows)
    assert 'aria-label="tau by depth chart"' in html and html.count('id="breakdown"') == 1
    report = write_html(tmp_path / "report.html", html)
    browser = DevTools(binary, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": report.resolve().as_uri()}, session=session)
        browser.wait_event("Page.loadEventFired")
        checks = browser.send("Runtime.evaluate", {"expression": BROWSER_CHECKS, "returnByValue": True},
                              session=session)["result"]["value"]
    finally:
        browser.close()
    errors = [e for e in browser.events if e["method"] in ("Runtime.exceptionThrown",)
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    assert checks["label"] == "tau by depth chart" and checks["width"] > 100 and checks["height"] > 100
    assert "0-40" in checks["rows"] and any(s in checks["rows"] for s in ("thinking", "answer_prose", "answer_code"))
    assert checks["nav"] == 1 and not checks["over"]


def test_depth_pairs_hand_computed():
    """diff by bucket: A is ROW; B commits 3, 2, 1 from anchors 3, 6, 8. Bucket [0, 5): tau 2 -> 3 (+1);
    [5, inf): tau 2 (4 tokens / 2 steps) -> 1.5 (3 / 2), -0.5."""
    b = dict(ROW, walk_anchors=[3, 6, 8], walk_accept_lengths=[3, 2, 1], walk_drafted=[3, 3, 1])
    pairs = BD.depth_pairs([ROW], [b], 4, 4, (5,))
    assert [(p["bucket"], p["tau_macro_a"], p["tau_macro_b"]) for p in pairs] == [("0-5", 2.0, 3.0), ("5+", 2.0, 1.5)]
    assert [p["delta_tau_macro"]["estimate"] for p in pairs] == [1.0, -0.5]
    assert [p["delta_tau_macro"]["n"] for p in pairs] == [1, 1]
