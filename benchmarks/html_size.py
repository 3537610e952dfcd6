"""Size of the HTML report for a HumanEval-sized run: 164 prompts x 3 drafters, ~300-token continuations, B = 16.

    python benchmarks/html_size.py [--prompts 164] [--tokens 300] [--out DIR]

No model is needed: the run is synthetic but schema-valid. Token ids and their decoded pieces come from the
stored run in tests/data/report_run (its continuations, repeated with random substitutions, become ~300-token
continuations); three drafters of different quality walk them (a strong one, a middling one and one that
often repeats its anchor, so the repetition detectors fire for real); counts, metrics and repetition
summaries are computed by the package's own code, exactly as `run` does. The run is written to DIR
(run.json + samples.jsonl; a temporary folder by default), read back, rendered with `render_run_html`, and
the page's size is printed, split into charts, decoded samples and the rest.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dflash_eval.core import metrics as M
from dflash_eval.core.documents import results as R
from dflash_eval.pipeline.document import repetition_summary as _repetition_summary
from dflash_eval.pipeline.rows import add_repetition as _add_repetition
from dflash_eval.render.html import render_run_html, write_html

STORED = Path(__file__).resolve().parent.parent / "tests" / "data" / "report_run"
BLOCK = 16
# name -> (chance each drafted slot is accepted given the previous one was, chance a block repeats its anchor)
DRAFTERS = {"z-lab/Qwen3-8B-DFlash-b16": (0.86, 0.0), "my-drafter-step-40k": (0.78, 0.02),
            "my-drafter-anchor-bug": (0.45, 0.35)}


def vocabulary(rows: list[dict]) -> dict[int, str]:
    pieces = {}
    for row in rows:
        pieces.update(zip(row["continuation_ids"], row["continuation_pieces"]))
        for ids, texts in zip(row["walk_drafts"], row["walk_draft_pieces"]):
            pieces.update(zip(ids, texts))
    return pieces


def continuation(rng: random.Random, stored: list[list[int]], ids: list[int], length: int) -> list[int]:
    out: list[int] = []
    while len(out) < length:
        for token in rng.choice(stored):
            out.append(rng.choice(ids) if rng.random() < 0.15 else token)
    return out[:length]


def walk_row(rng: random.Random, pid: str, name: str, quality: float, loop: float, prompt_len: int,
             cont: list[int], ids: list[int]) -> dict:
    slots, total = BLOCK - 1, len(cont)
    anchors, lengths, drafted, drafts = [], [], [], []
    j = 0  # index of the anchor inside the continuation
    while j < total - 1:
        d = min(slots, total - 1 - j)
        n = 0
        while n < d and rng.random() < quality:
            n += 1
        truth = cont[j + 1: j + 1 + d]
        if rng.random() < loop:  # the anchor-bug signature: the anchor again and again
            draft = [cont[j]] * d
            n = next((i for i, token in enumerate(truth) if token != cont[j]), d)
        else:
            draft = truth[:n]
            if n < d:  # the first rejected slot holds a wrong token, the slots after it anything
                draft.append(rng.choice([t for t in ids if t != truth[n]]))
                draft += [rng.choice(ids) for _ in range(d - n - 1)]
        anchors.append(prompt_len + j)
        lengths.append(n + 1)
        drafted.append(d)
        drafts.append(draft)
        j += n + 1
    anchor_accepted = [min(slots, total - 1 - a, int(rng.expovariate(1 - quality + 1e-3)))
                       for a in range(total - 1)]
    correct = [[int(rng.random() < quality ** (0.5 + 0.1 * s)) for s in range(slots)] for _ in anchor_accepted]
    valid = [[s < total - 1 - a for s in range(slots)] for a in range(len(anchor_accepted))]
    counts = (M.AcceptanceCounts.from_walk(pid, [n - 1 for n in lengths], BLOCK, drafted)
              + M.AcceptanceCounts.from_marginal(correct, BLOCK, valid))
    return {"prompt_id": pid, "prompt_set": "humaneval", "drafter": name, "prompt_len": prompt_len,
            "continuation_len": total, "continuation_ids": cont, "walk_anchors": anchors,
            "walk_accept_lengths": lengths, "walk_drafted": drafted, "walk_drafts": drafts,
            "anchor_accepted": anchor_accepted, "self_consistency": [total, total], "counts": counts.to_dict()}


def build(out: Path, prompts: int, tokens: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    stored_run = R.read_run_document(STORED)
    stored_rows = R.read_samples(STORED / R.SAMPLES)
    pieces = vocabulary(stored_rows)
    ids = sorted(pieces)
    stored = [row["continuation_ids"] for row in stored_rows]
    rows = []
    for i in range(prompts):
        pid = f"humaneval/{i}"
        cont = continuation(rng, stored, ids, rng.randint(int(tokens * 0.8), int(tokens * 1.2)))
        prompt_len = rng.randint(60, 240)
        for name, (quality, loop) in DRAFTERS.items():
            q = min(0.97, max(0.05, quality + rng.gauss(0, 0.05) - (0.3 if rng.random() < 0.03 else 0)))
            row = walk_row(rng, pid, name, q, loop, prompt_len, cont, ids)
            _add_repetition(row)
            row["continuation_pieces"] = [pieces[t] for t in row["continuation_ids"]]
            row["walk_draft_pieces"] = [[pieces[t] for t in d] for d in row["walk_drafts"]]
            rows.append(row)
    template = stored_run["drafters"][0]
    drafters = []
    for name in DRAFTERS:
        mine = [r for r in rows if r["drafter"] == name]
        per_prompt = {r["prompt_id"]: M.AcceptanceCounts.from_dict(r["counts"]) for r in mine}
        total = M.AcceptanceCounts(block_size=BLOCK)
        for counts in per_prompt.values():
            total = total + counts
        metrics = R.metrics_summary(total)
        spec = {**template["spec"], "block_size": BLOCK, "taps": [1, 9, 17, 25, 33],
                "speculators_taps": [2, 10, 18, 26, 34], "path": f"/checkpoints/{name}"}
        drafters.append({"name": name, "path": f"/checkpoints/{name}", "format": "zlab",
                         "fingerprint": f"{abs(hash(name)):064x}"[:64], "spec": spec,
                         "metrics": {**metrics, "prompts_without_steps": 0},
                         "by_prompt_set": {"humaneval": metrics}, "counts": total.to_dict(),
                         "repetition": _repetition_summary(mine, per_prompt, BLOCK, 0)})
    provenance = {**stored_run["provenance"],
                  "target": {**stored_run["provenance"]["target"], "name": "Qwen/Qwen3-8B",
                             "path": "/models/Qwen/Qwen3-8B", "num_layers": 36, "hidden_size": 4096,
                             "vocab_size": 151936},
                  "max_new_tokens": int(tokens * 1.2), "device": "cuda", "dtype": "bfloat16",
                  "prompts": {"source": "humaneval", "count": prompts, "sets": {"humaneval": prompts}},
                  "self_consistency": {"agree": sum(r["continuation_len"] for r in rows[::3]),
                                       "total": sum(r["continuation_len"] for r in rows[::3])},
                  "work": {"tap_passes": prompts, "continuations_generated": prompts, "prompts_evaluated": prompts}}
    out.mkdir(parents=True, exist_ok=True)
    run = {"schema_version": R.SCHEMA_VERSION, "provenance": provenance, "drafters": drafters}
    R.atomic_write(out / R.RUN_JSON, json.dumps(run, indent=1) + "\n")
    R.atomic_write(out / R.SAMPLES, "".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=164)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="folder for the run and report.html")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "run"
        started = time.perf_counter()
        build(out, args.prompts, args.tokens)
        built = time.perf_counter()
        run, rows = R.read_run_document(out), R.read_samples(out / R.SAMPLES)
        html = render_run_html(run, rows)
        rendered = time.perf_counter()
        path = write_html(out / "report.html", html)
        size = len(html.encode())
        charts = sum(len(m.group(0).encode()) for m in re.finditer(r"<svg class=\"chart\".*?</svg>", html, re.S))
        samples = html.find('<section id="samples">'), html.find('<section id="legend">')
        sample_bytes = len(html[samples[0]:samples[1]].encode())
        blocks = html.count('<div class="blk')
        print(f"{len(run['drafters'])} drafters x {len({r['prompt_id'] for r in rows})} prompts, "
              f"{sum(r['continuation_len'] for r in rows) // len(rows)} tokens per continuation on average, "
              f"B = {BLOCK}; samples.jsonl {(out / R.SAMPLES).stat().st_size / 1024:.0f} KB")
        print(f"report.html: {size / 1024:.0f} KB  (charts {charts / 1024:.0f} KB, decoded samples "
              f"{sample_bytes / 1024:.0f} KB in {blocks} blocks, rest {(size - charts - sample_bytes) / 1024:.0f} KB)")
        print(f"build {built - started:.1f} s, render {rendered - built:.1f} s; written to {path}"
              + ("" if args.out else " (temporary, deleted on exit)"))


if __name__ == "__main__":
    main()
