"""Build the bundled demo models: ``python -m dflash_eval.demo.build [--out DIR] [--minutes M]``.

What it does, in order (single process, CPU, fixed seeds; about 7 minutes on 2 cores with the defaults):

1. **Corpus** (``corpus/``, licences in ``corpus/LICENSES.md``): every MBPP-sanitized solution (``code``)
   and every HumanEval ``prompt + canonical_solution``, each as one chat exchange -- user: the MBPP task
   text / HumanEval wrapped in z-lab's template; assistant: the code in a ```python block -- with the
   tokenizer's ChatML template and thinking off (the prompt ends with the empty think block that
   ``enable_thinking=False`` pre-fills), tokenized exactly as ``run`` tokenizes a prompt. So the target
   learns to answer coding requests in the chat format ``run`` sends.
2. **Tokenizer**: a byte-level BPE of :data:`VOCAB_SIZE` entries trained on that text with
   :func:`dflash_eval.demo.tiny_tokenizer.train_tokenizer` (Qwen's special tokens, ``<|mask|>``, the
   ChatML template).
3. **Target**: a hybrid ``qwen3_5_text`` model (:data:`TARGET_SHAPE`: Gated-DeltaNet *and* gated
   full-attention layers) trained from scratch as a language model on the corpus (AdamW, warm-up then
   cosine decay, packed sequences of :data:`SEQ_LEN` tokens) and saved in float32 safetensors with its
   tokenizer. ``--minutes`` sets the *number of steps* (``minutes * STEPS_PER_MINUTE``, calibrated on a
   2-core CPU), never a wall-clock deadline, so the result does not depend on the machine's speed.
4. **Drafters** (:func:`dflash_eval.demo.train.train_drafter`) on the target's *own* greedy
   continuations (``demo.train.greedy_sequences``, :data:`DRAFT_MAX_NEW` new tokens; half of them with
   thinking off, half with the family default, on) of the first :data:`DRAFT_PROMPTS` MBPP task prompts
   -- a training set disjoint from the demo prompts (``pipeline.prompts.DEMO_PROMPTS``) the demo evaluates
   on: ``demo-reference`` (speculators format, correct training mask ``p < a``) and ``demo-inhouse``
   (speculators format, trained with the anchor's own hidden state in its context, ``p <= a``: the bug of
   the story in ``shared/seeds``). The in-house drafter records its verifier as ``../target``, relative to its folder.
5. **Measurement**: ``commands.evaluate.evaluate`` (what ``dflash-eval run`` does) of both drafters on the
   12 demo prompts x 64 new tokens (thinking off, and the family default), written with everything else
   to ``BUILD.json``.

Reproducibility: every random draw comes from fixed seeds in one process, and the build pins torch to
:data:`BUILD_THREADS` CPU threads whatever the machine or ``OMP_NUM_THREADS`` say, because the thread count
changes the order of floating-point reductions. So a rebuild in the same environment (CPU type, torch and
transformers versions, as ``BUILD.json``'s ``machine`` records) gives byte-identical weights and the same
taus: that is what ``--check`` verifies, with a tolerance of zero. In another floating-point environment
the training trajectories diverge and the models are different models. Measured on one 2-core machine,
thinking off: torch's default 2 threads (no explicit pin) gave reference 5.12 / in-house 2.21, one
thread 5.71 / 3.64, the explicit pin of 2 threads (the committed models) 4.31 / 1.99; the reference was
ahead with non-overlapping intervals in all three. (Even "2 threads by default" and "2 threads set
explicitly" differ in bits with MKL, hence the pin.) The committed models, not a rebuild, are what the
demo and its tests rely on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from . import BUILD_JSON, CORPUS_DIR, HUMANEVAL_FILE, INHOUSE_NAME, MBPP_FILE, MODELS_DIR, REFERENCE_NAME, TARGET_NAME
from .target_training import (
    BATCH,
    DRAFT_MAX_NEW,
    LR,
    SEED,
    SEQ_LEN,
    TARGET_SHAPE,
    WARMUP_STEPS,
    WEIGHT_DECAY,
    conversations,
    document_ids,
    drafter_sequences,
    drafter_training_prompts,
    log_line,
    save_target,
    tokenizer_corpus,
    train_target,
)

VOCAB_SIZE = 1536  # BPE entries; the special tokens come on top
STEPS_PER_MINUTE = 150  # target steps per --minute (~0.35 s per step on an idle 2-core CPU)
DEFAULT_MINUTES = 4.0

EVAL_MAX_NEW = 64
TAU_TOLERANCE = 0.0  # in the build's own environment; see the module docstring
BUILD_THREADS = 2


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- corpus -------------------------------------------------------------------------------------------------


# -- target -------------------------------------------------------------------------------------------------


# -- drafters -----------------------------------------------------------------------------------------------


def drafter_config(**changes):
    """The demo drafters' training config (both drafters: only ``anchor_in_context`` differs)."""
    from .train import TrainConfig

    base = dict(block_size=8, num_layers=2, steps=400, lr=3e-3, anchors_per_step=128, gamma=8.0, seed=SEED,
                sliding_window=1, sliding_layers=2)
    return TrainConfig(**{**base, **changes})


def _relativise_drafter(folder: Path, target_dir: Path) -> None:
    """Record the verifier (speculators) and the training target (train_log.json) relative to the drafter
    folder, so the committed files hold no build machine's paths."""
    relative = os.path.relpath(target_dir, folder)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    verifier = config.get("speculators_config", {}).get("verifier")
    if verifier is not None:
        verifier["name_or_path"] = relative
        config_path.write_text(json.dumps(config, indent=2) + "\n")
    log_path = folder / "train_log.json"
    if log_path.exists():
        log = json.loads(log_path.read_text())
        log["target"] = relative
        log_path.write_text(json.dumps(log, indent=1) + "\n")


# -- measurement --------------------------------------------------------------------------------------------


def measure(models: Path, thinking: bool | None, max_new_tokens: int = EVAL_MAX_NEW, limit: int | None = None,
            seed: int = SEED) -> dict[str, Any]:
    """Evaluate both drafters on the demo prompts; the figures BUILD.json records."""
    from ..commands.evaluate import RunOptions, evaluate

    with tempfile.TemporaryDirectory(prefix="dflash-demo-measure-") as tmp:
        run = evaluate(RunOptions(
            drafters=[str(models / REFERENCE_NAME), str(models / INHOUSE_NAME)], target=str(models / TARGET_NAME),
            prompts="demo", limit=limit, max_new_tokens=max_new_tokens, thinking=thinking,
            out=Path(tmp) / "run", cache_dir=Path(tmp) / "cache", device="cpu", dtype="float32", seed=seed,
            argv=["dflash_eval.demo.build"]))
    out: dict[str, Any] = {"prompts": "demo", "limit": limit, "max_new_tokens": max_new_tokens,
                           "enable_thinking": run["provenance"]["enable_thinking"], "drafters": {}}
    for drafter in run["drafters"]:
        metrics, repetition = drafter["metrics"], drafter["repetition"] or {}
        out["drafters"][drafter["name"]] = {
            "format": drafter["format"],
            "tau_macro": metrics["tau_macro"], "tau_macro_ci95": metrics["tau_macro_ci"],
            "tau_micro": metrics["tau_micro"], "steps": metrics["steps"],
            "reach": metrics["reach"], "histogram": metrics["histogram"],
            "flagged_share": repetition.get("flagged_share"), "flagged_blocks": repetition.get("flagged_blocks"),
            "blocks": repetition.get("blocks"), "flagged_prompts": repetition.get("flagged_prompts"),
        }
    return out


def sample_continuations(target, prompts: list[str], max_new_tokens: int) -> list[dict[str, str]]:
    from .train import greedy_sequences

    out = []
    for (ids, prompt_len), prompt in zip(greedy_sequences(target, prompts, max_new_tokens), prompts):
        out.append({"prompt": prompt, "continuation": target.tokenizer.decode(ids[prompt_len:].tolist())})
    return out


# -- the whole build ----------------------------------------------------------------------------------------


def build(out: Path = MODELS_DIR, minutes: float = DEFAULT_MINUTES, *, steps: int | None = None,
          measure_runs: bool = True, seed: int = SEED) -> dict[str, Any]:
    """Build everything into `out` (see the module docstring), with torch pinned to BUILD_THREADS threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        return _build(Path(out), minutes, steps, measure_runs, seed)
    finally:
        torch.set_num_threads(threads)


def environment() -> dict[str, Any]:
    """What decides the floating-point results of a build (BUILD.json's ``machine``)."""
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "platform": platform.platform(),
            "cpu": _cpu_model(), "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build(out: Path, minutes: float, steps: int | None, measure_runs: bool, seed: int) -> dict[str, Any]:
    from ..model.target import load_target
    from ..pipeline.prompts import DEMO_PROMPTS
    from .tiny_tokenizer import train_tokenizer
    from .train import train_drafter

    began = time.perf_counter()
    timings: dict[str, float] = {}
    torch.manual_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (TARGET_NAME, REFERENCE_NAME, INHOUSE_NAME, BUILD_JSON):
        stale = out / name
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    target_steps = steps if steps is not None else max(1, round(minutes * STEPS_PER_MINUTE))

    # 1-2. corpus and tokenizer
    pairs = conversations()
    with tempfile.TemporaryDirectory(prefix="dflash-demo-tokenizer-") as tmp:
        tokenizer_dir = train_tokenizer(Path(tmp) / "tokenizer", corpus=tokenizer_corpus(pairs),
                                        vocab_size=VOCAB_SIZE)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        docs = [document_ids(tokenizer, u, a) for u, a in pairs]
        timings["tokenizer"] = time.perf_counter() - began

        # 3. target
        t0 = time.perf_counter()
        model, loss_log = train_target(tokenizer, docs, target_steps, seed)
        save_target(model, tokenizer_dir, out / TARGET_NAME)
        del model
        timings["target"] = time.perf_counter() - t0

    # 4. drafters, on the target as the evaluator loads it
    t0 = time.perf_counter()
    target = load_target(str(out / TARGET_NAME), device="cpu", dtype="float32")
    samples = sample_continuations(target, list(DEMO_PROMPTS[:3]), 48)
    for sample in samples:
        log_line(f"sample: {sample['prompt']!r} ->\n{sample['continuation']}\n")
    train_prompts = drafter_training_prompts()
    sequences = drafter_sequences(target, train_prompts)
    timings["continuations"] = time.perf_counter() - t0
    drafters: dict[str, Any] = {}
    # both speculators format: the fixture design (one-row windows from the anchor) is speculators' rule; under
    # z-lab's (window from the query) a one-row window sees no context, see train.train_drafter
    for name, fmt, bug in ((REFERENCE_NAME, "speculators", False), (INHOUSE_NAME, "speculators", True)):
        t0 = time.perf_counter()
        config = drafter_config(anchor_in_context=bug, seed=seed)
        folder = train_drafter(target, sequences, config, out / name, fmt)
        _relativise_drafter(folder, out / TARGET_NAME)
        train_log = json.loads((folder / "train_log.json").read_text())
        losses = train_log["loss"]
        drafters[name] = {"format": fmt, "anchor_in_context": bug, "config": train_log["config"],
                          "taps": train_log["taps_recorded"], "loss_first": losses[0],
                          "loss_last_50_mean": sum(losses[-50:]) / len(losses[-50:]),
                          "seconds": train_log["seconds"]}
        timings[name] = time.perf_counter() - t0
        log_line(f"{name}: {fmt}, anchor_in_context={bug}, loss {losses[0]:.3f} -> "
             f"{drafters[name]['loss_last_50_mean']:.3f} in {train_log['seconds']:.1f}s")
    del target

    # 5. measurement
    measured: dict[str, Any] = {}
    if measure_runs:
        t0 = time.perf_counter()
        measured["thinking_off"] = measure(out, thinking=False, seed=seed)
        measured["family_default"] = measure(out, thinking=None, seed=seed)
        timings["measure"] = time.perf_counter() - t0
        for key, run in measured.items():
            for name, d in run["drafters"].items():
                low, high = d["tau_macro_ci95"]
                log_line(f"{key:15s} {name:15s} tau {d['tau_macro']:.3f} [{low:.3f}, {high:.3f}]  "
                     f"flagged share {d['flagged_share']:.3f}")

    info = {
        "built_by": "python -m dflash_eval.demo.build",
        "seed": seed,
        "minutes": minutes, "target_steps": target_steps,
        "seconds": round(time.perf_counter() - began, 1),
        "seconds_by_stage": {k: round(v, 1) for k, v in timings.items()},
        "machine": environment(),
        "corpus": {MBPP_FILE: {"sha256": _sha256(CORPUS_DIR / MBPP_FILE), "license": "CC BY 4.0"},
                   HUMANEVAL_FILE: {"sha256": _sha256(CORPUS_DIR / HUMANEVAL_FILE), "license": "MIT"},
                   "documents": len(pairs), "format": "ChatML prompt (generation prompt, enable_thinking=False) + "
                                                     "```python block + <|im_end|>"},
        "tokenizer": {"bpe_vocab_size": VOCAB_SIZE, "len": len(tokenizer)},
        "target": {"model_type": "qwen3_5_text", "shape": TARGET_SHAPE, "seq_len": SEQ_LEN, "batch": BATCH,
                   "lr": LR, "warmup_steps": WARMUP_STEPS, "weight_decay": WEIGHT_DECAY,
                   "steps_per_minute": STEPS_PER_MINUTE, "loss": loss_log,
                   "loss_first": loss_log[0][1], "loss_last": loss_log[-1][1], "samples": samples},
        "drafter_training": {"prompts": f"the first {len(train_prompts)} MBPP sanitized task texts (file order; "
                                        "disjoint from DEMO_PROMPTS)",
                             "count": len(train_prompts), "max_new_tokens": DRAFT_MAX_NEW,
                             "enable_thinking": "off for even-indexed prompts, on for odd ones",
                             "continuation_tokens": sum(int(ids.numel()) - p for ids, p in sequences)},
        "drafters": drafters,
        "measured": measured,
        "tau_tolerance": TAU_TOLERANCE,
    }
    (out / BUILD_JSON).write_text(json.dumps(info, indent=1) + "\n")
    log_line(f"built {out} in {info['seconds']:.0f}s")
    return info


def compare_builds(committed: dict[str, Any], rebuilt: dict[str, Any], committed_dir: Path,
                   rebuilt_dir: Path) -> list[str]:
    """The rebuild check: per measurement and drafter, |tau_rebuilt - tau_committed| <= TAU_TOLERANCE; the
    weights byte-identical when the environment is the build's; the story still holds in the rebuild (reference above in-house, intervals apart, in-house flagged more
    often). Prints a line per comparison and the environment differences that would explain a mismatch;
    returns the failures (empty: the check passes)."""
    failures = []
    same_environment = True
    for key, was in committed.get("machine", {}).items():
        now = rebuilt["machine"].get(key)
        if key not in ("cpu_count", "platform") and now != was:
            same_environment = False
            log_line(f"environment differs: {key} {was!r} at build time, {now!r} now (results may differ)")
    for key, run in committed["measured"].items():
        fresh = rebuilt["measured"][key]["drafters"]
        for name, d in run["drafters"].items():
            delta = fresh[name]["tau_macro"] - d["tau_macro"]
            ok = abs(delta) <= TAU_TOLERANCE + 1e-12
            log_line(f"{key:15s} {name:15s} tau committed {d['tau_macro']:.3f} rebuilt {fresh[name]['tau_macro']:.3f} "
                 f"delta {delta:+.3f} ({'ok' if ok else 'beyond'} tolerance {TAU_TOLERANCE})")
            if not ok:
                failures.append(f"{key}/{name}: tau moved by {delta:+.3f}")
        ref, bug = fresh[REFERENCE_NAME], fresh[INHOUSE_NAME]
        if not ref["tau_macro_ci95"][0] > bug["tau_macro_ci95"][1]:
            failures.append(f"{key}: the rebuilt drafters' intervals overlap")
        if not bug["flagged_share"] > ref["flagged_share"]:
            failures.append(f"{key}: the rebuilt in-house drafter is not flagged more often")
    for name in (TARGET_NAME, REFERENCE_NAME, INHOUSE_NAME):
        same = _sha256(committed_dir / name / "model.safetensors") == _sha256(rebuilt_dir / name / "model.safetensors")
        log_line(f"{name:15s} weights {'byte-identical' if same else 'differ'} (sha256 of model.safetensors)")
        if not same and same_environment:
            failures.append(f"{name}: weights differ in the build's own environment")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_eval.demo.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=MODELS_DIR, help=f"output folder (default: {MODELS_DIR})")
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                        help=f"target training length in 2-core CPU minutes; sets the step count to "
                             f"minutes x {STEPS_PER_MINUTE} (default {DEFAULT_MINUTES})")
    parser.add_argument("--steps", type=int, default=None, help="target training steps (overrides --minutes)")
    parser.add_argument("--no-measure", action="store_true", help="skip the tau measurement")
    parser.add_argument("--check", action="store_true",
                        help="rebuild into a temporary folder (or --out when given) and compare its weights and "
                             f"taus with the committed ones (tau tolerance {TAU_TOLERANCE} in the build's "
                             "environment); exit 1 when beyond it")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not args.check:
        build(args.out, args.minutes, steps=args.steps, measure_runs=not args.no_measure)
        return 0
    committed = json.loads((MODELS_DIR / BUILD_JSON).read_text())
    with tempfile.TemporaryDirectory(prefix="dflash-demo-rebuild-") as tmp:
        rebuilt_dir = args.out if args.out != MODELS_DIR else Path(tmp)
        rebuilt = build(rebuilt_dir, committed["minutes"], steps=committed["target_steps"], seed=committed["seed"])
        failures = compare_builds(committed, rebuilt, MODELS_DIR, rebuilt_dir)
    for failure in failures:
        log_line(f"FAIL {failure}")
    log_line("rebuild check: " + ("passed" if not failures else f"{len(failures)} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
