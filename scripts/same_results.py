"""Every result file of the demo and of a test-bed session, recorded so that two versions of dflash-eval can be
compared byte for byte (issue 50: a refactor must leave every result file as it was).

    python scripts/same_results.py record DIR FIXTURES   # the session, with the dflash_eval on PYTHONPATH
    python scripts/same_results.py compare DIR_A DIR_B

FIXTURES holds what the session evaluates (a tiny test bed, drafters trained on it, training data, a folder of
sources), built on first use and then reused: a trained checkpoint's files record when they were written, so
two builds differ in their fingerprints; compare two records made on the same FIXTURES.

`record` runs, each as a user types it (`python -m dflash_eval.cli ...`, with the interpreter running this
script and whatever `dflash_eval` its PYTHONPATH finds): the demo; a tiny test bed (`dflash_eval.testing.tiny`)
with a drafter trained on it (`dflash_eval.demo.train`); `run` under the settings that shape a run folder
(a reference and its explanation, draft lengths with roofline step times, depth buckets, a draft window,
vLLM rules and full final blocks, sampling (the offline estimate), the live loop, `--responses`, long
`repo:` prompts, shards and their `merge`); `doctor` (into a run folder, into its own, `--engines`), `track`,
`trained-taps`, `served`, `export-serving`, `report --json/--markdown`, `show`, `diff`, `plan --json` and
`inspect`; where the checkout has them, `run --tree-budgets`, `run --serving-target`, `doctor --tree-budgets`
and `inspect --engines`. It keeps every file they write and each command's stdout, and writes DIR/manifest.json: each
file's sha256 after the normalisation below.

What is normalised, and nothing else: the session's own folder and the checkout's root (absolute paths:
`<work>`, `<root>`; give the two checkouts paths of one length, as the terminal pads around them, and make
each a git checkout); the digest of a folder's settings (taken over those paths; the settings themselves are
compared); ISO timestamps (`created`); the git commit (`git_sha`, a 40-hex word); and the wall
clock (a live loop's timings, the measured step times and the speedups computed from them: the HTML and terminal
text of a live run are compared with their decimals masked; trained-taps' `seconds`; the progress lines on
stdout; the machine's available memory in `plan`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SIZE = ["--limit", "4", "--max-new-tokens", "16", "--device", "cpu"]
TIMED = re.compile(r"seconds$|^one_token_step$")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?")
SHA = re.compile(r"\b[0-9a-f]{40}\b")
LIVE_NUMBERS = re.compile(r"\d+\.\d+")
BEST_K = re.compile(r"best k per batch: .*")


def sh(work: Path, name: str, *args: str, module: str = "dflash_eval.cli", ok=(0,)) -> None:
    """`python -m MODULE ARGS`, its stdout kept as WORK/stdout/NAME.txt; a failure stops the recording."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "120",
           "DFLASH_EVAL_CACHE": str(work / "cache"), "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=work, env=env, capture_output=True, text=True)
    (work / "stdout").mkdir(exist_ok=True)
    (work / "stdout" / f"{name}.txt").write_text(done.stdout)
    print(f"same-results: {name}: exit {done.returncode}", flush=True)
    if done.returncode not in ok:
        sys.exit(f"same-results: {name} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def fixtures(fix: Path, T: Path) -> None:
    """The test bed, two checkpoints trained on its qwen3 target, training data of the demo target, sources."""
    if (fix / "done").is_file():
        return
    if fix.exists():
        shutil.rmtree(fix)
    fix.mkdir(parents=True)
    f = str(fix)
    sh(fix, "bed", f"{f}/bed", module="dflash_eval.testing.tiny")
    sh(fix, "train", "--target", f"{f}/bed/qwen3", "--save-dir", f"{f}/save", "--steps", "30", "--save-every", "15",
       "--max-new-tokens", "16", module="dflash_eval.demo.train")
    sh(fix, "taps-data", f"{f}/taps", "--target", str(T), "--taps", "1,2,3", module="dflash_eval.testing.trainer_data")
    repo = fix / "repo"
    repo.mkdir()
    for i in range(6):
        (repo / f"m{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(40)))
    (fix / "responses.jsonl").write_text("".join(json.dumps({"id": f"demo/{i}", "response": "def f(x):\n    return x"})
                                                 + "\n" for i in range(12)))
    (fix / "done").write_text("")


def session(work: Path, fix: Path) -> None:
    import dflash_eval

    root = Path(dflash_eval.__file__).resolve().parents[1]
    demo = root / "dflash_eval" / "demo" / "models"
    T, REF, INH = demo / "target", demo / "demo-reference", demo / "demo-inhouse"
    fixtures(fix, T)
    w, f = str(work), str(fix)
    sh(work, "demo", "demo", "--out", f"{w}/demo", "--max-new-tokens", "24")
    bed = f"{f}/bed/qwen3"
    ckpts = sorted(p for p in (fix / "save").iterdir() if p.is_dir())
    early, late = str(ckpts[0]), str(ckpts[-1])
    base = ["--target", bed, *SIZE]
    sh(work, "run-ref", "run", *base, "-d", f"{late}:late", "--reference", f"{early}:early", "--draft-lengths", "1,2",
       "--accelerator", "h200", "--depth-buckets", "0,16,32", "--out", f"{w}/run-ref")
    sh(work, "run-rules", "run", *base, "-d", f"{late}:late", "--semantics", "vllm", "--final-block", "full",
       "--draft-window", "8", "--anchor-batch", "3", "--tap-chunk", "7", "--out", f"{w}/run-rules")
    sh(work, "run-sampled", "run", *base, "-d", f"{late}:late", "-d", f"{early}:early", "--temperature", "0.7",
       "--top-p", "0.9", "--samples", "2", "--seed", "3", "--out", f"{w}/run-sampled")
    sh(work, "run-both", "run", *base, "-d", f"{late}:late", "--temperature", "0.5", "--draft-policy", "both",
       "--out", f"{w}/run-both")
    sh(work, "run-live", "run", *base, "-d", f"{late}:late", "--mode", "live", "--draft-lengths", "2",
       "--out", f"{w}/run-live")
    sh(work, "run-responses", "run", *base, "-d", f"{late}:late", "--responses", f"{f}/responses.jsonl",
       "--out", f"{w}/run-responses")
    sh(work, "run-long", "run", "--target", str(T), "-d", str(REF), "--prompts", f"repo:{f}/repo", "--context-tokens",
       "160", "--max-new-tokens", "8", "--device", "cpu", "--no-thinking", "--numerics-check", "1",
       "--out", f"{w}/run-long")
    for i in range(2):
        sh(work, f"shard{i}", "run", *base, "-d", f"{late}:late", "--shard", f"{i}/2", "--no-html", "--out",
           f"{w}/shard{i}")
    sh(work, "merge", "merge", f"{w}/shard0", f"{w}/shard1", "--out", f"{w}/merged")
    sh(work, "report-json", "report", f"{w}/run-ref", "--json")
    sh(work, "report-md", "report", f"{w}/run-ref", "--markdown")
    sh(work, "show", "show", f"{w}/run-ref", "--worst", "3")
    sh(work, "diff", "diff", f"{w}/run-ref:early", f"{w}/run-ref:late")
    sh(work, "doctor-run", "doctor", "-d", f"{late}:late", "--out", f"{w}/run-ref", "--device", "cpu",
       "--no-context-variants")
    sh(work, "doctor", "doctor", "-d", late, "--reference", early, *base, "--depth-buckets", "0,16",
       "--draft-window", "8", "--out", f"{w}/doctor")
    sh(work, "doctor-engines", "doctor", "-d", late, *base, "--engines", "--out", f"{w}/engines")
    sh(work, "track", "track", f"{f}/save", "--reference", early, *base, "--out", f"{w}/track")
    sh(work, "trained-taps", "trained-taps", f"{f}/taps", "--target", str(T), "-d", str(REF), "--limit", "3",
       "--noise-samples", "2", "--device", "cpu", "--out", f"{w}/trained-taps")
    sh(work, "served-dump", f"{w}/run-ref:late", f"{w}/before.txt", f"{w}/after.txt", "--k", "2", "--model", "m",
       module="dflash_eval.testing.served_dump")
    sh(work, "served", "served", f"{w}/before.txt", f"{w}/after.txt", "--model", "m", "--run", f"{w}/run-ref:late")
    sh(work, "export", "export-serving", f"{w}/run-ref", "--drafter-name", "late", "--engine", "vllm", "--k", "2",
       "--out", f"{w}/spec.txt")
    sh(work, "plan", "plan", "--target", str(T), "-d", str(REF), "-d", str(INH), "--limit", "6",
       "--max-new-tokens", "24", "--accelerator", "h200", "--doctor", "--json")
    sh(work, "inspect", "inspect", str(INH), "--target", str(T))
    if (root / "dflash_eval" / "core" / "tree.py").exists():  # issues 51-53's flags, where the checkout has them
        sh(work, "run-trees", "run", *base, "-d", f"{late}:late", "--tree-budgets", "2,4", "--accelerator", "h200",
           "--out", f"{w}/run-trees")
        sh(work, "run-copy", "run", *base, "-d", f"{late}:late", "--serving-target", bed, "--out", f"{w}/run-copy")
        sh(work, "doctor-trees", "doctor", "-d", late, *base, "--tree-budgets", "2,4", "--no-context-variants",
           "--out", f"{w}/doctor-trees")
        sh(work, "inspect-engines", "inspect", str(INH), "--target", str(T), "--engines")


SETTINGS_HASH = re.compile(r'"settings_hash": "[0-9a-f]{64}"')  # over absolute paths; the settings are compared
PROGRESS = re.compile(r"^[\w-]+ \d+/\d+ \(\d+%\), .*elapsed.*\n", re.M)
AVAILABLE = re.compile(r'\([\d.]+ available\)|"machine_available_bytes": \d+')


def normalise(path: Path, work: Path, root: Path, fix: Path) -> bytes:
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    for folder, label in ((str(work), "<work>"), (str(fix), "<fix>"), (str(root), "<root>")):
        text = text.replace(folder, label)
    text = SETTINGS_HASH.sub('"settings_hash": "<hash of the settings beside it>"', SHA.sub("<sha>", ISO.sub("<time>", text)))
    if path.parent.name == "stdout":
        text = AVAILABLE.sub("<available>", PROGRESS.sub("", text))
    live = "run-live" in path.parts or path.stem == "run-live"
    if path.suffix in (".json", ".jsonl") and live:
        lines = text.splitlines(keepends=True) if path.suffix == ".jsonl" else [text]
        text = "".join(json.dumps(untimed(json.loads(line)), sort_keys=True) + "\n" for line in lines if line.strip())
    elif live:  # the decimals of time, and the best k they decide
        text = BEST_K.sub("best k <k>", LIVE_NUMBERS.sub("<n>", text).replace('class="n best"', 'class="n"'))
    if path.name == "trained_taps.json":
        text = json.dumps({**json.loads(text), "seconds": "<time>"}, indent=1)
    return text.encode("utf-8", "surrogateescape")


def untimed(value):
    """A live run's document without the wall clock: timing keys, measured step times and their speedups."""
    if isinstance(value, dict):
        return {k: "<time>" if TIMED.search(k) or k in ("speedup", "step_times") else untimed(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def record(out: Path, fix: Path) -> None:
    import dflash_eval

    root = Path(dflash_eval.__file__).resolve().parents[1]
    work = out / "work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    session(work, fix)
    manifest = {}
    for path in sorted(work.rglob("*")):
        rel = path.relative_to(work)
        if path.is_file() and rel.parts[0] != "cache" and path.suffix != ".lock":
            manifest[str(rel)] = hashlib.sha256(normalise(path, work, root, fix)).hexdigest()
    (out / "manifest.json").write_text(json.dumps({"root": str(root), "fixtures": str(fix), "files": manifest},
                                                  indent=1) + "\n")
    print(f"same-results: {len(manifest)} files recorded in {out / 'manifest.json'} (dflash_eval from {root})")


def compare(a: Path, b: Path) -> int:
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    fa, fb = ma["files"], mb["files"]
    only = sorted(set(fa) ^ set(fb))
    differ = sorted(k for k in set(fa) & set(fb) if fa[k] != fb[k])
    for name in only:
        print(f"only in {'A' if name in fa else 'B'}: {name}")
    for name in differ:
        print(f"differs: {name}")
        import difflib

        old, new = (normalise(d / "work" / name, d / "work", Path(m["root"]), Path(m["fixtures"]))
                    .decode("utf-8", "replace").splitlines()
                    for d, m in ((a, ma), (b, mb)))
        for line in list(difflib.unified_diff(old, new, lineterm="", n=1))[:30]:
            print("    " + line[:200])
    same = len(set(fa) & set(fb)) - len(differ)
    print(f"same-results: {same} files identical, {len(differ)} differ, {len(only)} in one only")
    return 1 if differ or only else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve())
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
