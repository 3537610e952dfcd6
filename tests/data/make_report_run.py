"""Regenerate tests/data/report_run/ (the small stored run behind the report snapshot test).

    HF_HUB_OFFLINE=1 python tests/data/make_report_run.py && \
        COLUMNS=120 dflash-eval report tests/data/report_run > tests/data/report_run.snapshot.txt

Two drafters on the tiny qwen3 target, 3 demo prompts x 16 tokens: one trained by the fixture trainer
and one that repeats its anchor. Temporary paths are replaced by stable placeholders so the files (and
the snapshot) do not depend on where they were built. Review the snapshot diff before committing it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dflash_eval.commands.evaluate import RunOptions, evaluate
from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
from dflash_eval.model.target import load_target
from dflash_eval.pipeline.prompts import DEMO_PROMPTS
from dflash_eval.testing.testbed import write_repeat_anchor_drafter
from dflash_eval.testing.tiny import build_test_bed

HERE = Path(__file__).resolve().parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bed = build_test_bed(root / "bed")
        target = load_target(str(bed["qwen3"]), device="cpu")
        good = train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 40), fixture_config(block_size=4),
                             root / "good")
        loop = write_repeat_anchor_drafter(bed["qwen3"], root / "loop", block_size=4)
        out = root / "run"
        evaluate(RunOptions(drafters=[f"{good}:trained", f"{loop}:repeat-anchor"], out=out, target=str(bed["qwen3"]),
                            max_new_tokens=16, limit=3, cache_dir=root / "cache",
                            argv=["dflash-eval", "run", "..."]))
        dest = HERE / "report_run"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        for name in ("run.json", "samples.jsonl", "per_position.csv"):
            text = (out / name).read_text().replace(str(root), "<tmp>")
            text = re.sub(r'"created": "[^"]+"', '"created": "2026-11-29T00:00:00+00:00"', text)
            (dest / name).write_text(text)
        run = json.loads((dest / "run.json").read_text())
        print({d["name"]: d["metrics"]["tau_macro"] for d in run["drafters"]})


if __name__ == "__main__":
    main()
