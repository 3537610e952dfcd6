"""Host seconds per prompt per drafter, before and after issue 47, side by side in one process, on a bed with a
real vocabulary's size (248,320 tokens, Qwen3.5's).

    python benchmarks/host_work.py [--prompts 8] [--max-new-tokens 256] [--repeat 2] [--json FILE]

The bed, built in a temporary folder: a byte-level BPE tokenizer trained on HumanEval and MBPP code and
filled to 248,310 BPE entries with merges of learned tokens (`train_tokenizer(fill_to=...)`) plus the 10
special tokens; a tiny hybrid target over it (`qwen3_5_text`, hidden 64, vocabulary 248,320: every table and
the tokenizer at full size, the layers small so the host work shows) and two random-weight z-lab drafters,
B = 16. Random drafters accept almost nothing, so a walk takes a step per token: the most host work per
prompt a walk can ask for.

The same `evaluate()` (HumanEval prompts, trajectory mode, continuations generated once into a cache before
timing) runs "before" and "after", alternating, best of --repeat. "Before" puts back, by patching, what issue
47 replaced: the tokenizer serialised and hashed for every run document, `git rev-parse` run for every
document, run.partial.json rewritten after every prompt, and the repetition flags as they were (every
detector on every block, the reference measured at every period, every reason's text written:
tests/reference_repetition.py). Timed inside each run: the rows (`finish_rows`: repetition flags and decoded
pieces; appending them), the partial documents, the final document; host seconds per prompt per drafter =
(rows + partial documents) / (prompts x drafters); the final document apart (once per run). Also, once: a first run's weight hashing, the old loop
(one file after the other) against `file_digests` (threads, `hashing_threads`), over synthetic shards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # reference_repetition: the flags as they were
os.environ.setdefault("HF_HUB_OFFLINE", "1")



def corpus() -> list[str]:
    """Code to train the tokenizer on: the bundled demo corpus (HumanEval and MBPP)."""
    corpus_dir = ROOT / "dflash_eval" / "demo" / "corpus"
    texts = []
    for line in (corpus_dir / "humaneval.jsonl").read_text().splitlines():
        row = json.loads(line)
        texts.append(row["prompt"] + row["canonical_solution"])
    texts += [row["code"] for row in json.loads((corpus_dir / "mbpp_sanitized.json").read_text())]
    return texts


def build_bed(root: Path, vocab: int) -> dict[str, Path]:
    from dflash_eval.demo.tiny_tokenizer import ADDED_TOKENS, train_tokenizer
    from dflash_eval.testing.testbed import write_random_drafter
    from dflash_eval.testing.tiny import build_target

    tokenizer = train_tokenizer(root / "tokenizer", corpus(), vocab_size=vocab, fill_to=vocab - len(ADDED_TOKENS))
    target = build_target("qwen3_5_text", root / "target", tokenizer, hidden_size=64)
    drafters = [write_random_drafter(target, root / f"drafter-{i}", "zlab", seed=i, block_size=16) for i in range(2)]
    return {"tokenizer": tokenizer, "target": target, "drafters": drafters}


class Timers:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    def wrap(self, owner, name: str, label):
        """Time every call of owner.name under `label` (a string, or a function of the call's keyword arguments)."""
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            key = label(kwargs) if callable(label) else label
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - started
        setattr(owner, name, timed)
        return inner


@contextmanager
def configuration(before: bool, timers: Timers):
    """The product as it is ("after"), or with issue 47's host work put back ("before"); the host parts timed."""
    import reference_repetition

    import dflash_eval.commands.evaluate as evaluate_module
    import dflash_eval.core.repetition as repetition
    import dflash_eval.pipeline.document as document
    from dflash_eval.pipeline.continuations import sha256_text
    from dflash_eval.pipeline.run_folder import RunFolder

    saved = [(repetition, "flag_block", repetition.flag_block), (document, "tokenizer_hash", document.tokenizer_hash),
             (document, "_git_sha", document._git_sha),
             (evaluate_module, "PartialSchedule", evaluate_module.PartialSchedule),
             (evaluate_module, "finish_rows", evaluate_module.finish_rows),
             (RunFolder, "append", RunFolder.append), (RunFolder, "write_partial", RunFolder.write_partial),
             (RunFolder, "finish", RunFolder.finish), (evaluate_module, "assemble", evaluate_module.assemble)]
    if before:
        def every_document_hash(tokenizer):
            backend = getattr(tokenizer, "backend_tokenizer", None)
            return sha256_text(backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True))

        class EveryPrompt(document.PartialSchedule):
            def due(self) -> bool:
                return True

        repetition.flag_block = reference_repetition.flag_block
        document.tokenizer_hash = every_document_hash
        document._git_sha = document._git_sha.__wrapped__
        evaluate_module.PartialSchedule = EveryPrompt
    timers.wrap(evaluate_module, "finish_rows", "rows")
    timers.wrap(RunFolder, "append", "rows")
    # the final document is built with the breakdown (assemble(..., breakdown=True)), the partial ones without
    timers.wrap(evaluate_module, "assemble", lambda kwargs: "final document" if kwargs.get("breakdown", True)
                else "documents")
    timers.wrap(RunFolder, "write_partial", "documents")
    timers.wrap(RunFolder, "finish", "final document")
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def one_run(bed, out: Path, cache: Path, prompts: int, new: int, before: bool) -> dict:
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    timers = Timers()
    partials = [0]
    from dflash_eval.pipeline.run_folder import RunFolder

    with configuration(before, timers):
        counted = RunFolder.write_partial

        def counting(self, *args, **kwargs):
            partials[0] += 1
            return counted(self, *args, **kwargs)
        RunFolder.write_partial = counting
        started = time.perf_counter()
        evaluate(RunOptions(drafters=[str(d) for d in bed["drafters"]], target=str(bed["target"]), out=out,
                            prompts="humaneval", limit=prompts, max_new_tokens=new, device="cpu", cache_dir=cache,
                            overwrite=True, argv=["benchmark"]))
        wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {"wall": wall, "partial_documents": partials[0], "steps": sum(len(r["walk_anchors"]) for r in rows),
            **timers.seconds}


def hashing(root: Path, files: int, size: int) -> dict:
    """A first run's weight hashing: the old loop against file_digests, cold memo each time, files in the page cache."""
    from dflash_eval.formats.files import _sha256_file, file_digests, hashing_threads

    shards = []
    for i in range(files):
        path = root / f"model-{i:05d}.safetensors"
        with path.open("wb") as sink:
            for _ in range(size >> 24):
                sink.write(os.urandom(1 << 24))
        shards.append(path)
    for path in shards:
        _sha256_file(path)  # into the page cache
    best = {"one after the other": float("inf"), "file_digests": float("inf")}
    for _ in range(2):
        started = time.perf_counter()
        old = [_sha256_file(p) for p in shards]
        best["one after the other"] = min(best["one after the other"], time.perf_counter() - started)
        started = time.perf_counter()
        new = file_digests(shards, None)
        best["file_digests"] = min(best["file_digests"], time.perf_counter() - started)
        assert old == new
    return {"files": files, "bytes": files * size, "threads": hashing_threads(files), **best}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=248320)
    parser.add_argument("--hash-files", type=int, default=4)
    parser.add_argument("--hash-mib", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        bed = build_bed(tmp / "bed", args.vocab)
        built = time.perf_counter() - started
        one_run(bed, tmp / "warm", tmp / "cache", args.prompts, args.max_new_tokens, before=False)  # continuations
        runs = {"before": [], "after": []}
        for n in range(args.repeat):
            for label in ("before", "after"):
                runs[label].append(one_run(bed, tmp / f"{label}-{n}", tmp / "cache", args.prompts, args.max_new_tokens,
                                           before=label == "before"))
        (tmp / "hash").mkdir()
        hashed = hashing(tmp / "hash", args.hash_files, args.hash_mib << 20)
    drafters = 2
    report = {"vocab": args.vocab, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "drafters": drafters,
              "torch_threads": torch.get_num_threads(), "bed_seconds": round(built, 1), "hashing": hashed, "runs": {}}
    for label, rs in runs.items():
        best = min(rs, key=lambda r: r["rows"] + r.get("documents", 0.0))
        best.setdefault("documents", 0.0)
        per = args.prompts * drafters
        report["runs"][label] = {**{k: round(v, 4) if isinstance(v, float) else v for k, v in best.items()},
                                 "host_per_prompt_per_drafter": (best["rows"] + best["documents"]) / per,
                                 "rows_per_prompt_per_drafter": best["rows"] / per,
                                 "documents_per_prompt_per_drafter": best["documents"] / per}
    b, a = report["runs"]["before"], report["runs"]["after"]
    print(f"{args.prompts} HumanEval prompts x {args.max_new_tokens} new tokens, 2 random-weight B = 16 drafters, "
          f"vocabulary {args.vocab:,}, CPU, {torch.get_num_threads()} torch thread(s), best of {args.repeat}")
    print(f"{'':34s}{'before':>10s}{'after':>10s}{'before/after':>14s}")
    for key, name in (("rows_per_prompt_per_drafter", "rows (flags, pieces, append)"),
                      ("documents_per_prompt_per_drafter", "partial documents"),
                      ("host_per_prompt_per_drafter", "host s per prompt per drafter")):
        print(f"{name:34s}{b[key]:10.4f}{a[key]:10.4f}{b[key] / a[key]:13.1f}x")
    print(f"{'partial documents written':34s}{b['partial_documents']:10d}{a['partial_documents']:10d}")
    print(f"{'final document, s per run':34s}{b['final document']:10.3f}{a['final document']:10.3f}"
          f"{b['final document'] / a['final document']:13.1f}x")
    print(f"{'evaluate() wall seconds':34s}{b['wall']:10.2f}{a['wall']:10.2f}{b['wall'] / a['wall']:13.2f}x")
    print(f"walk steps per run: {a['steps']} (before {b['steps']})")
    h = hashed
    print(f"first-run hashing of {h['files']} x {args.hash_mib} MiB: one after the other {h['one after the other']:.2f} s, "
          f"file_digests ({h['threads']} threads) {h['file_digests']:.2f} s: "
          f"{h['one after the other'] / h['file_digests']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
