"""Datasets written into a Hugging Face hub cache folder in huggingface_hub's own layout, for tests of the
`hf:` and named prompt sources (formats/hf_cache.py).

The layout huggingface_hub's `hf_hub_download` / `snapshot_download` leave (huggingface_hub/file_download.py,
`_create_symlink`, `_cache_commit_hash_for_specific_revision`): `datasets--ORG--NAME/blobs/<hash>` holds
each file's bytes once, `snapshots/<commit>/<path>` is a relative symlink to its blob, and `refs/main`
holds the commit the main branch pointed to when it was downloaded. Parquet files are written with
pyarrow, arrow files with datasets' own `save_to_disk` (the Arrow IPC stream of its ArrowWriter), so the
bytes are what the real programs write.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path


def parquet_bytes(columns: dict[str, list]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def arrow_bytes(columns: dict[str, list], scratch: Path) -> bytes:
    """The data file `datasets.Dataset.save_to_disk` writes for these columns."""
    from datasets import Dataset

    Dataset.from_dict(columns).save_to_disk(str(scratch))
    (data,) = sorted(scratch.glob("data-*.arrow"))
    return data.read_bytes()


def card(configs: list[dict] | None) -> bytes:
    """A dataset card (README.md) whose YAML header lists `configs` as the Hub's cards do."""
    if configs is None:
        return b"# a dataset\n"
    lines = ["---", "configs:"]
    for config in configs:
        lines.append(f"- config_name: {config['config_name']}")
        if config.get("default"):
            lines.append("  default: true")
        lines.append("  data_files:")
        for split, path in config["data_files"].items():
            lines += [f"  - split: {split}", f"    path: {path}"]
    return ("\n".join(lines + ["---", "", "# a dataset", ""])).encode()


def write_dataset(cache: Path, repo: str, files: dict[str, bytes], revision: str | None = None,
                  main: bool = True) -> Path:
    """`files` (path in the repo -> bytes) as snapshot `revision` of dataset `repo` under hub cache `cache`;
    refs/main names it when `main`. Returns the snapshot folder."""
    root = Path(cache) / ("datasets--" + repo.replace("/", "--"))
    revision = revision or hashlib.sha1(repr(sorted(files)).encode() + repo.encode()).hexdigest()
    snapshot = root / "snapshots" / revision
    for relative, content in files.items():
        blob = root / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = snapshot / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    if main:
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / "main").write_text(revision)
    return snapshot


def _bundled(name: str) -> list[dict]:
    from importlib import resources

    text = (resources.files("dflash_eval") / "data" / "prompts" / f"{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _lcb_row(qid: str, starter: str) -> dict:
    return {"question_title": f"title {qid}", "question_content": f"Solve {qid}.", "platform": "atcoder",
            "question_id": qid, "contest_id": "abc1", "contest_date": "2024-01-01T00:00:00", "starter_code": starter,
            "difficulty": "easy", "public_test_cases": "[]", "private_test_cases": "eJy...", "metadata": "{}"}


def write_paper_sets(cache: Path, scratch: Path) -> None:
    """Every set of the paper's table into hub cache `cache` (real column names and file layouts, a few
    made-up rows each; HumanEval and MBPP with the bundled sets' rows), and a chat dataset stored as arrow."""
    gsm = [f"Natalia sold {i} clips {{x}} in April." for i in range(20)]
    write_dataset(cache, "openai/gsm8k", {
        "README.md": card([{"config_name": "main", "data_files": {"train": "main/train-*", "test": "main/test-*"}},
                           {"config_name": "socratic", "data_files": {"train": "socratic/train-*",
                                                                      "test": "socratic/test-*"}}]),
        "main/test-00000-of-00001.parquet": parquet_bytes({"question": gsm, "answer": [f"#### {i}" for i in range(20)]}),
        "main/train-00000-of-00001.parquet": parquet_bytes({"question": ["train q"], "answer": ["#### 1"]}),
        "socratic/test-00000-of-00001.parquet": parquet_bytes({"question": ["socratic q"], "answer": ["#### 2"]}),
        "socratic/train-00000-of-00001.parquet": parquet_bytes({"question": ["socratic t"], "answer": ["#### 3"]})})
    write_dataset(cache, "HuggingFaceH4/MATH-500", {"README.md": card(None), "test.jsonl": jsonl_bytes([
        {"problem": f"Compute $x_{i}$.", "solution": "...", "answer": str(i), "subject": "Algebra", "level": 2,
         "unique_id": f"test/algebra/{100 + i}.json"} for i in range(6)])})
    write_dataset(cache, "HuggingFaceH4/aime_2024", {
        "README.md": card([{"config_name": "default", "data_files": {"train": "data/train-*"}}]),
        "data/train-00000-of-00001.parquet": parquet_bytes({
            "id": [60, 61], "problem": ["Every morning Aya walks.", "Let $ABC$ be a triangle."],
            "solution": ["s", "s"], "answer": ["204", "113"], "url": ["u", "u"], "year": ["2024", "2024"]})})
    write_dataset(cache, "MathArena/aime_2025", {
        "README.md": card([{"config_name": "default", "data_files": {"train": "data/train-*"}}]),
        "data/train-00000-of-00001.parquet": parquet_bytes({
            "problem_idx": [1, 2], "problem": ["Find the sum of all bases.", "In triangle $ABC$ ..."],
            "answer": [70, 588], "problem_type": [["Number Theory"], ["Geometry"]]})})
    write_dataset(cache, "livecodebench/code_generation_lite", {
        "README.md": card(None), "code_generation_lite.py": b"# the loading script\n",
        **{name: jsonl_bytes([_lcb_row(f"{k}a", "class Solution:\n    def f(self):\n        "), _lcb_row(f"{k}b", "")])
           for k, name in enumerate(["test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                                     "test6.jsonl", "test7.jsonl"])}})
    swe = ["repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
           "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit"]
    write_dataset(cache, "princeton-nlp/SWE-bench_Lite", {
        "README.md": card([{"config_name": "default", "data_files": {"dev": "data/dev-*", "test": "data/test-*"}}]),
        "data/test-00000-of-00001.parquet": parquet_bytes(
            {c: [f"astropy__astropy-{i}" if c == "instance_id" else f"{c} {i}\nline" for i in range(3)] for c in swe}),
        "data/dev-00000-of-00001.parquet": parquet_bytes({c: ["dev"] for c in swe})})
    write_dataset(cache, "HuggingFaceH4/mt_bench_prompts", {
        "README.md": card([{"config_name": "default", "data_files": {"train": "data/train-*"}}]),
        "data/train-00000-of-00001.parquet": parquet_bytes({
            "prompt": [[f"Compose a travel blog post {i}.", f"Rewrite it, {i}, starting every sentence with A."]
                       for i in range(6)],
            "prompt_id": [81 + i for i in range(6)], "category": ["writing"] * 6, "reference": [[]] * 6})})
    write_dataset(cache, "tatsu-lab/alpaca", {
        "README.md": card([{"config_name": "default", "data_files": {"train": "data/train-*"}}]),
        "data/train-00000-of-00001-a09b74b3ef9c3b56.parquet": parquet_bytes({
            "instruction": ["Give three tips for staying healthy.", "Classify the sentence."],
            "input": ["", "The sky is blue."], "output": ["1.", "fact"], "text": ["t", "t"]})})
    humaneval = [re.fullmatch(r"(?s).*?```python\n(.*)\n```", row["text"])[1] for row in _bundled("humaneval")]
    write_dataset(cache, "openai/openai_humaneval", {
        "README.md": card([{"config_name": "openai_humaneval", "data_files": {"test": "openai_humaneval/test-*"}}]),
        "openai_humaneval/test-00000-of-00001.parquet": parquet_bytes({
            "task_id": [r["id"] for r in _bundled("humaneval")], "prompt": humaneval,
            "canonical_solution": [""] * 164, "test": [""] * 164, "entry_point": ["f"] * 164})})
    mbpp = _bundled("mbpp")
    write_dataset(cache, "google-research-datasets/mbpp", {
        "README.md": card([{"config_name": "full", "default": True, "data_files": {"test": "full/test-*"}},
                           {"config_name": "sanitized", "data_files": {"test": "sanitized/test-*"}}]),
        "full/test-00000-of-00001.parquet": parquet_bytes({"task_id": [1], "text": ["full"], "code": [""]}),
        "sanitized/test-00000-of-00001.parquet": parquet_bytes({
            "source_file": ["f"] * len(mbpp), "task_id": [int(r["id"].split("/")[1]) for r in mbpp],
            "prompt": [r["text"] for r in mbpp], "code": [""] * len(mbpp), "test_imports": [[]] * len(mbpp),
            "test_list": [["assert True"]] * len(mbpp)})})
    write_dataset(cache, "someone/chats", {  # arrow as datasets' save_to_disk writes it, split from the folder
        "train/data-00000-of-00001.arrow": arrow_bytes({"messages": [
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."},
             {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Another?"},
             {"role": "assistant", "content": "Blue."}]]}, scratch)})
