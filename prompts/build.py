"""Regenerate the bundled coding prompt sets from the benchmark data in ../shared/data.

    python prompts/build.py                  # writes dflash_eval/data/prompts/*.jsonl (the one shipped copy)
    python prompts/build.py --check          # exit 1 if any of those files differs from a fresh build
    python prompts/build.py --data DIR       # read the sources from DIR instead of ../shared/data

Run it from anywhere (paths are relative to this file); it needs only the standard library. The
sources are checked against the sha256 recorded in prompts/LICENSES.md before anything is written.

Each output row is {"id", "set", "text"}: `text` is the user message exactly as z-lab's DFlash
benchmark (dflash/benchmark.py) builds it, so that tau measured on these prompts can be set beside the
published numbers:

- humaneval: all 164 problems of HumanEval (the single test split), in task order, with
  "Write a solution to the following problem and make sure that it passes the tests:\\n```python\\n{prompt}\\n```"
- mbpp: the MBPP sanitized test split (task ids 11-510, 257 problems; Hugging Face
  google-research-datasets/mbpp, config sanitized, split test), in task-id order, the raw `prompt`.

Rows are written one JSON object per line with ASCII escapes (json.dumps defaults), "\\n" line ends.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
OUTPUT_DIRS = (REPO / "dflash_eval" / "data" / "prompts",)  # one copy, inside the package

HUMANEVAL_TEMPLATE = ("Write a solution to the following problem and make sure that it passes the tests:\n"
                      "```python\n{prompt}\n```")
MBPP_TEST_IDS = range(11, 511)  # MBPP's test split by task id (1-10 few-shot, 511-600 validation, 601- train)

SOURCES = {  # file in the data folder -> sha256 (as recorded in ../shared/data/README.md and LICENSES.md)
    "humaneval.jsonl": "1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2",
    "mbpp_sanitized.json": "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9",
}


def read_source(data: Path, name: str) -> bytes:
    raw = (data / name).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SOURCES[name]:
        raise SystemExit(f"{data / name}: sha256 {digest} differs from the recorded {SOURCES[name]}")
    return raw


def humaneval_rows(data: Path) -> list[dict]:
    problems = [json.loads(line) for line in read_source(data, "humaneval.jsonl").decode().splitlines() if line.strip()]
    return [{"id": p["task_id"], "set": "humaneval", "text": HUMANEVAL_TEMPLATE.format(prompt=p["prompt"])}
            for p in problems]


def mbpp_rows(data: Path) -> list[dict]:
    problems = json.loads(read_source(data, "mbpp_sanitized.json"))
    test = sorted((p for p in problems if p["task_id"] in MBPP_TEST_IDS), key=lambda p: p["task_id"])
    return [{"id": f"mbpp/{p['task_id']}", "set": "mbpp", "text": p["prompt"]} for p in test]


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def build(data: Path = DEFAULT_DATA) -> dict[str, str]:
    """File name -> content of every prompt set file."""
    return {"humaneval.jsonl": render(humaneval_rows(data)), "mbpp.jsonl": render(mbpp_rows(data))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with humaneval.jsonl and mbpp_sanitized.json")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on any difference")
    args = parser.parse_args(argv)
    files = build(args.data)
    stale = []
    for folder in OUTPUT_DIRS:
        for name, content in files.items():
            path = folder / name
            if args.check:
                if not path.exists() or path.read_text(encoding="utf-8") != content:
                    stale.append(path)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(content, encoding="utf-8", newline="\n")
                print(f"wrote {path.relative_to(REPO)} ({content.count(chr(10))} prompts)")
    for path in stale:
        print(f"differs from a fresh build: {path.relative_to(REPO)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
