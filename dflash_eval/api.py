"""`evaluate()`: the library entry point behind `dflash-eval run`.

One run = one target, N drafters, one prompt set. Everything that can be refused is refused before the
output folder is touched (drafter validation against the target's config, prompts file, settings that
conflict with a run already in the folder). Then, per prompt: the greedy continuation (cached on disk),
one target pass for the union of all drafters' taps, and every drafter replayed on that one trajectory.
Rows are appended per prompt, so an interrupted run resumes where it stopped and ends with the same
run.json as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import metrics as M
from . import results as R
from .checkpoints import checked_spec, checkpoint_fingerprint, read_spec, resolve_local_or_cached, weight_files
from .continuations import (ContinuationCache, Prompt, chat_template_hash, default_cache_dir, generate_greedy,
                            prompt_ids, read_responses, tokenizer_hash)
from .errors import InputError, read_json_object
from .spec import DrafterSpec


@dataclass
class RunOptions:
    drafters: list[str]  # "PATH" or "PATH:NAME"
    out: Path
    target: str | None = None
    reference: str | None = None  # "z-lab" or a checkpoint path
    prompts: str = "demo"
    limit: int | None = None
    prompt_seed: int | None = None  # with limit: a seeded random subset instead of the first N
    max_new_tokens: int = 256
    thinking: bool | None = None  # None: the family default (on for Qwen3.5/3.6 and Qwen3-Next)
    mode: str = "trajectory"  # or "live"
    final_block: str = "shorter"  # z-lab; "full" = vLLM
    anchor_batch: int | None = None
    tap_chunk: int = 4096  # target positions per forward of the tap pass (longer sequences: chunked prefill)
    generation_batch: int | None = None
    device: str = "auto"
    dtype: str = "auto"
    cache_dir: Path | None = field(default_factory=default_cache_dir)
    responses: Path | None = None
    kernels: str = "auto"  # "torch": route Gated-DeltaNet ops to the torch fallback even when fla is bound
    # attention/scale rules: [] = each checkpoint's format decides; "RULES" for every drafter, or
    # "NAME=RULES" for one (RULES: zlab, speculators, vllm; see semantics.py)
    semantics: list[str] = field(default_factory=list)
    overwrite: bool = False  # replace a run folder dflash-eval wrote (never a foreign folder)
    seed: int = 0
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


# Seconds to pause after each prompt; only the resume test sets it (DFLASH_EVAL_SLOW_PROMPTS).
_SLOW_PROMPTS = float(os.environ.get("DFLASH_EVAL_SLOW_PROMPTS", "0") or 0)


class Reporter:
    """Progress callbacks (no-ops here; the CLI draws Rich progress bars)."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, name: str, detail: str = "") -> None: ...

    def note(self, message: str) -> None: ...


@dataclass
class DrafterEntry:
    name: str
    path: Path
    spec: DrafterSpec


def split_name(value: str) -> tuple[str, str | None]:
    """"PATH:NAME" -> (PATH, NAME); a bare path keeps its folder name."""
    head, sep, tail = value.rpartition(":")
    if sep and head and "/" not in tail and not Path(value).exists():
        return head, tail
    return value, None


def _thinking_default(model_type: str) -> bool:
    # z-lab's Qwen3 b16 drafters were trained without thinking; Qwen3.5/3.6 (and Next) with it (primer 7)
    return model_type in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_next")


def apply_semantics_overrides(entries: list[DrafterEntry], overrides: list[str]) -> None:
    """`--semantics RULES` (every drafter) or `--semantics NAME=RULES` (one); refused by name when unknown."""
    from .semantics import SEMANTICS

    by_name: dict[str, str] = {}
    for value in overrides:
        name, sep, rules = value.rpartition("=")
        if rules not in SEMANTICS:
            raise InputError(None, f"--semantics {value!r}: unknown rules {rules!r} (choose from {', '.join(SEMANTICS)})")
        names = [e.name for e in entries]
        if sep and name not in names:
            raise InputError(None, f"--semantics {value!r}: no drafter named {name!r} (drafters: {', '.join(names)})")
        for entry in entries:
            if not sep or entry.name == name:
                by_name[entry.name] = rules
    for entry in entries:
        if entry.name in by_name:
            entry.spec = entry.spec.with_semantics(by_name[entry.name], f"override: --semantics {by_name[entry.name]}")


def _unique_names(entries: list[DrafterEntry], explicit: set[int]) -> None:
    """Every drafter gets its own name in the results, or the run is refused before anything is written:
    a :NAME given twice is refused; folder names that collide are lengthened with parent folders
    (`ckpt@a/run1`) until they differ, and one checkpoint given twice needs a :NAME for each (the same
    weights under two `--semantics` is a fair thing to run)."""
    names = [e.name for i, e in enumerate(entries) if i in explicit]
    for name in names:
        if names.count(name) > 1:
            raise InputError(None, f"two drafters are named {name!r}: give each a distinct :NAME")
    taken = set(names)
    auto = [i for i in range(len(entries)) if i not in explicit]
    depth = {i: 0 for i in auto}
    while True:
        labels = {}
        for i in auto:
            parents = entries[i].path.resolve().parent.parts[::-1][:depth[i]]
            labels[i] = entries[i].path.name + (f"@{'/'.join(reversed(parents))}" if parents else "")
        clashes = [i for i in auto if list(labels.values()).count(labels[i]) > 1 or labels[i] in taken]
        if not clashes:
            break
        for i in clashes:
            if depth[i] >= len(entries[i].path.resolve().parent.parts):
                raise InputError(entries[i].path, f"cannot get a unique name for this drafter ({labels[i]!r} "
                                                  "is taken): give it a :NAME")
            depth[i] += 1
    for i in auto:
        entries[i].name = labels[i]


def thinking_source(given: bool | None, model_type: str) -> str:
    return "given (--thinking/--no-thinking)" if given is not None else f"family default for {model_type or 'this target'}"


def thinking_warnings(entries: list[DrafterEntry], thinking: bool, defaulted: bool, model_type: str) -> list[str]:
    """A drafter known to be trained with the other thinking setting gets a warning (terminal and HTML):
    a drafter trained without thinking, evaluated on thinking traces, scores far lower for no fault of its own."""
    from .references import zlab_trained_thinking

    out = []
    for entry in entries:
        trained = zlab_trained_thinking(_repo_id_of(entry.path)) if entry.name == "z-lab" else None
        if trained is not None and trained != thinking:
            flag = "--thinking" if trained else "--no-thinking"
            out.append(f"drafter {entry.name} was trained with thinking {'on' if trained else 'off'}, this run has "
                       f"thinking {'on' if thinking else 'off'} ({thinking_source(None if defaulted else thinking, model_type)}); "
                       f"pass {flag} to evaluate it as trained")
    return out


def _repo_id_of(path: Path) -> str:
    """'owner/name' of an HF cache snapshot folder (models--owner--name/snapshots/<sha>), else the folder name."""
    for part in Path(path).parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/", 1)
    return Path(path).name


def _git_sha() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=5)
        return done.stdout.strip() or None if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def resolve_drafters(options: RunOptions) -> tuple[list[DrafterEntry], Path, list[str]]:
    """Drafter folders, names and the target folder (given, or recorded by the drafters)."""
    from .references import resolve_recorded_verifier, resolve_zlab_reference

    warnings: list[str] = []
    entries: list[DrafterEntry] = []
    explicit: set[int] = set()  # indices of entries named with :NAME
    for value in options.drafters:
        raw, name = split_name(value)
        path = resolve_local_or_cached(raw)
        spec, _, _ = read_spec(path)
        if name is not None:
            explicit.add(len(entries))
        entries.append(DrafterEntry(name or path.name, path, spec))
    _unique_names(entries, explicit)  # before anything else can fail: a name clash is the user's first fix
    recorded = {}
    for entry in entries:
        if entry.spec.verifier:
            recorded[entry.name] = resolve_recorded_verifier(entry.path, entry.spec.verifier).resolve()
    if options.target is not None:
        target_path = resolve_local_or_cached(options.target).resolve()
        for name, verifier in recorded.items():
            if verifier != target_path:
                warnings.append(f"drafter {name} records verifier {verifier}, but --target is {target_path}")
    elif recorded:
        distinct = set(recorded.values())
        if len(distinct) > 1:
            raise InputError(None, "drafters record different verifiers (" + ", ".join(
                f"{n}: {v}" for n, v in recorded.items()) + "); pass --target")
        target_path = distinct.pop()
    else:
        raise InputError(None, "no --target given and no drafter records its verifier")
    if options.reference:
        ref = (resolve_zlab_reference(options.target or str(target_path)) if options.reference == "z-lab"
               else resolve_local_or_cached(options.reference))
        spec, _, _ = read_spec(ref)
        if options.reference == "z-lab":
            explicit.add(len(entries))
        entries.append(DrafterEntry("z-lab" if options.reference == "z-lab" else ref.name, ref, spec))
    _unique_names(entries, explicit)
    return entries, target_path, warnings


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _describe(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'name: old -> new' for each setting that differs (prompts by count and first differing id)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "prompts" and isinstance(a, list) and isinstance(b, list):
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = (f"first difference at #{first} ({_describe(a[first][0]) if first < len(a) else 'none'} vs "
                     f"{_describe(b[first][0]) if first < len(b) else 'none'})")
            out.append(f"prompts: {len(a)} -> {len(b)} prompts, {where}")
        else:
            out.append(f"{key}: {_describe(a)} -> {_describe(b)}")
    return out


def prepare_out_dir(out: Path, settings: dict[str, Any], overwrite: bool = False) -> list[dict[str, Any]]:
    """Create the folder, or resume the run it holds (same settings); refuse to mix settings, naming
    each one that differs. `overwrite` replaces a folder that dflash-eval wrote (never a foreign one)."""
    import shutil

    from .paths import writable_dir

    writable_dir(out, "--out")
    digest = settings_hash(settings)
    state_path = out / R.STATE
    if state_path.exists() and overwrite:
        shutil.rmtree(out)
    elif state_path.exists():
        state = read_json_object(state_path, missing="run state missing")
        if state.get("settings_hash") != digest:
            differences = settings_differences(state.get("settings") or {}, settings)
            detail = "; ".join(differences) if state.get("settings") else "settings not recorded (older run)"
            raise InputError(out, f"already holds a run with different settings ({detail}); rerun with the "
                                  "same settings to resume, --overwrite to replace it, or choose another --out")
        return R.read_samples(out / R.SAMPLES)
    if out.exists() and any(out.iterdir()):
        raise InputError(out, "exists and is not a dflash-eval run folder (no run_state.json); choose another "
                              "--out (--overwrite only replaces folders dflash-eval wrote)")
    out.mkdir(parents=True, exist_ok=True)
    R.atomic_write(state_path, json.dumps({"settings_hash": digest, "complete": False, "settings": settings}))
    return []


def evaluate(options: RunOptions, reporter: Reporter | None = None) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns the run.json content."""
    from .prompts import load_prompts
    from .target import (check_prompt_lengths, load_target, load_tokenizer, resolve_device, resolve_dtype,
                         target_info, torch_fallback_kernels)

    reporter = reporter or Reporter()
    resolve_dtype(options.dtype, resolve_device(options.device))  # bad values refused before anything runs
    if options.mode not in ("trajectory", "live"):
        raise InputError(None, f"unknown --mode {options.mode!r} (trajectory or live)")
    if options.final_block not in ("shorter", "full"):
        raise InputError(None, f"unknown --final-block {options.final_block!r} (shorter or full)")
    if options.kernels not in ("auto", "torch"):
        raise InputError(None, f"unknown --kernels {options.kernels!r} (auto or torch)")
    entries, target_path, warnings = resolve_drafters(options)
    info = target_info(target_path)
    for entry in entries:  # validate every drafter against the target before anything is written
        entry.spec, _ = checked_spec(entry.path, info)
    apply_semantics_overrides(entries, options.semantics)
    prompts = load_prompts(options.prompts, options.limit, options.prompt_seed)
    model_type = json.loads((target_path / "config.json").read_text()).get("model_type", "")
    thinking = _thinking_default(model_type) if options.thinking is None else options.thinking
    warnings.extend(thinking_warnings(entries, thinking, options.thinking is None, model_type))
    tokenizer = load_tokenizer(target_path)  # the target is validated like the drafters, before any write
    check_prompt_lengths(target_path, {p.id: len(prompt_ids(tokenizer, p, thinking)) for p in prompts},
                         options.max_new_tokens)
    if options.responses:  # checked here too, so a bad file is refused before the output folder is touched
        responses = read_responses(options.responses, tokenizer, info.vocab_size)
        missing = [p.id for p in prompts if p.id not in responses]
        if missing:
            raise InputError(options.responses, f"no response for prompt {missing[0]!r} ({len(missing)} of "
                                                f"{len(prompts)} prompts have none)")
    fingerprints = {e.name: checkpoint_fingerprint(e.path) for e in entries}
    settings = {
        "target": str(target_path), "drafters": fingerprints, "max_new_tokens": options.max_new_tokens,
        "thinking": thinking, "mode": options.mode, "final_block": options.final_block,
        "prompts": [[p.id, p.text, p.set] for p in prompts], "device": options.device, "dtype": options.dtype,
        "responses": str(options.responses) if options.responses else None, "kernels": options.kernels,
        "tap_chunk": options.tap_chunk,
        "semantics": {e.name: e.spec.semantics for e in entries},
    }
    done_rows = prepare_out_dir(options.out, settings, options.overwrite)

    target = load_target(str(target_path), device=options.device, dtype=options.dtype,
                         allow_accelerated_on_cpu=options.kernels == "torch")
    with (torch_fallback_kernels(target.model) if options.kernels == "torch" else contextlib.nullcontext()):
        return _evaluate_loaded(options, reporter, target, entries, prompts, thinking, settings, done_rows,
                                warnings, fingerprints)


def _evaluate_loaded(options, reporter, target, entries, prompts, thinking, settings, done_rows, warnings,
                     fingerprints) -> dict[str, Any]:
    import torch

    from .drafter import load_drafter
    from .target import kernel_report, kernel_summary

    drafters = {e.name: load_drafter(e.spec, weight_files(e.path), device=target.device, dtype=target.dtype)
                .attach_target(target.embed_tokens, target.lm_head) for e in entries}
    block_sizes = {name: d.spec.block_size for name, d in drafters.items()}
    responses = (read_responses(options.responses, target.tokenizer, target.info.vocab_size)
                 if options.responses else None)

    # rows of prompts finished by an earlier, interrupted invocation (all drafters present)
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for row in done_rows:
        by_prompt.setdefault(row["prompt_id"], []).append(row)
    complete = {pid for pid, rows in by_prompt.items() if {r["drafter"] for r in rows} == set(drafters)}
    kept = [r for r in done_rows if r["prompt_id"] in complete]
    R.atomic_write(options.out / R.SAMPLES, "".join(json.dumps(r) + "\n" for r in kept))
    pending = [p for p in prompts if p.id not in complete]
    if complete:
        reporter.note(f"resuming: {len(complete)} of {len(prompts)} prompts already done")

    ids = {p.id: prompt_ids(target.tokenizer, p, thinking) for p in pending}
    continuations, generated_count = _continuations(target, pending, ids, options, thinking, responses, reporter)

    from .engine import replay, self_consistency
    from .live import live_generate

    union_taps = sorted({t for d in drafters.values() for t in d.spec.taps})
    columns = {name: _tap_columns(union_taps, list(d.spec.taps), target.info.hidden_size) for name, d in drafters.items()}
    reporter.phase("prompts", len(pending))
    with (options.out / R.SAMPLES).open("a") as sink:
        for prompt in pending:
            p_ids, cont = ids[prompt.id], continuations[prompt.id]
            tokens = torch.tensor(p_ids + cont)
            rows = []
            capture = target_capture = None
            if options.mode == "trajectory":
                from .target import capture_taps

                target_capture = capture_taps(target, tokens, union_taps, sequence_chunk=options.tap_chunk)
                agree = self_consistency(target_capture.greedy, tokens, len(p_ids))
            for name, drafter in drafters.items():
                if options.mode == "trajectory":
                    capture = replay(drafter, target_capture.taps[:, columns[name]], tokens, len(p_ids),
                                     options.max_new_tokens, shorter_final_block=options.final_block == "shorter",
                                     anchor_batch=options.anchor_batch)
                    rows.append(_row(prompt, name, drafter.spec.block_size, capture, len(p_ids), cont, agree))
                else:
                    live = live_generate(target, drafter, p_ids, options.max_new_tokens,
                                         shorter_final_block=options.final_block == "shorter")
                    agree = (sum(int(a == b) for a, b in zip(live.continuation, cont)), len(cont))
                    rows.append(_live_row(prompt, name, drafter.spec.block_size, live, len(p_ids), cont, agree))
            decode = _piece_decoder(target.tokenizer)
            for row in rows:
                _add_repetition(row)
            for row in rows:  # decoded text, so `show` and reports need no tokenizer
                row["continuation_pieces"] = decode(row["continuation_ids"])
                row["walk_draft_pieces"] = [decode(d) for d in row["walk_drafts"]]
            sink.write("".join(json.dumps(r) + "\n" for r in rows))
            sink.flush()
            if prompt is not pending[-1]:  # what report/show/diff render, with a banner, if the run stops here
                partial = _assemble(options, target, entries, drafters, R.read_samples(options.out / R.SAMPLES),
                                    prompts, thinking, warnings, fingerprints, kernel_summary(kernel_report(target.model)),
                                    block_sizes, generated_count=generated_count, evaluated_count=len(pending))
                done = len({r["prompt_id"] for r in R.read_samples(options.out / R.SAMPLES)})
                partial["incomplete"] = {"done": done, "total": len(prompts)}
                R.atomic_write(options.out / R.PARTIAL_JSON, json.dumps(partial, indent=1) + "\n")
            if _SLOW_PROMPTS:  # test hook: leaves time to kill the process between prompts
                time.sleep(_SLOW_PROMPTS)
            reporter.advance("prompts", prompt.id)

    all_rows = R.read_samples(options.out / R.SAMPLES)
    run = _assemble(options, target, entries, drafters, all_rows, prompts, thinking, warnings, fingerprints,
                    kernel_summary(kernel_report(target.model)), block_sizes,
                    generated_count=generated_count, evaluated_count=len(pending))
    R.atomic_write(options.out / R.RUN_JSON, json.dumps(run, indent=1) + "\n")
    (options.out / R.PARTIAL_JSON).unlink(missing_ok=True)
    R.atomic_write(options.out / R.PER_POSITION, R.per_position_csv(run["drafters"]))
    R.atomic_write(options.out / R.STATE, json.dumps({"settings_hash": settings_hash(settings), "complete": True,
                                                      "settings": settings}))
    return run


def _add_repetition(row: dict[str, Any]) -> None:
    """Repetition flags per walk step (reasons, empty when clean) and the row's repetition counts."""
    from . import repetition

    p, cont = row["prompt_len"], row["continuation_ids"]
    blocks = row["walk_drafts"]
    references = [cont[a - p + 1: a - p + 1 + len(b)] for a, b in zip(row["walk_anchors"], blocks)]
    accepted = [min(n - 1, len(b)) for n, b in zip(row["walk_accept_lengths"], blocks)]
    flags, prev, prev_ref = [], None, None
    for block, ref in zip(blocks, references):
        flags.append(list(repetition.flag_block(block, ref, prev, prev_ref).reasons))
        prev, prev_ref = block, ref
    row["walk_flags"] = flags
    row["repetition"] = (repetition.count_walk(row["prompt_id"], blocks, references, accepted).to_dict()
                         if blocks and all(blocks) else None)


def _repetition_summary(rows: list[dict[str, Any]], per_prompt: dict[str, M.AcceptanceCounts],
                        block_size: int, seed: int) -> dict[str, Any] | None:
    from . import repetition

    parts = [repetition.RepetitionCounts.from_dict(r["repetition"]) for r in rows if r.get("repetition")]
    if not parts:
        return None
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    inside, outside = repetition.accepted_inside_outside(total)
    flagged = sorted(repetition.flagged_prompts(total))
    kept = M.AcceptanceCounts(block_size=block_size)
    for pid, counts in per_prompt.items():
        if pid not in flagged:
            kept = kept + counts
    return {
        "blocks": total.blocks, "flagged_blocks": total.flagged_blocks,
        "flagged_share": total.flagged_blocks / total.blocks if total.blocks else None,
        "flagged_by_detector": total.flagged_by_detector,
        "flagged_share_by_slot": [c / total.blocks for c in total.flagged_by_slot] if total.blocks else [],
        "accepted_inside_flagged": inside, "accepted_outside_flagged": outside,
        "flagged_prompts": flagged,
        "tau_macro_without_flagged_prompts": M.tau_macro(kept) if kept.steps else None,
        "counts": total.to_dict(),
    }


def _piece_decoder(tokenizer):
    """ids -> one decoded string per token, memoised per id (walk drafts repeat ids a lot)."""
    from .samples import token_pieces

    memo: dict[int, str] = {}

    def decode(ids: list[int]) -> list[str]:
        missing = [i for i in set(ids) if i not in memo]
        memo.update(zip(missing, token_pieces(tokenizer, missing)))
        return [memo[i] for i in ids]

    return decode


def _tap_columns(union: list[int], taps: list[int], hidden: int) -> list[int]:
    cols = []
    for t in taps:
        start = union.index(t) * hidden
        cols.extend(range(start, start + hidden))
    return cols


def _continuations(target, prompts: list[Prompt], ids, options: RunOptions, thinking, responses,
                   reporter) -> tuple[dict[str, list[int]], int]:
    if responses is not None:
        missing = [p.id for p in prompts if p.id not in responses]
        if missing:
            raise InputError(options.responses, f"no response for prompt {missing[0]!r}")
        return {p.id: responses[p.id][: options.max_new_tokens] for p in prompts}, 0
    cache = ContinuationCache(options.cache_dir)
    keys = {p.id: cache.key(target, p.text, thinking, options.max_new_tokens) for p in prompts}
    found = {p.id: cache.get(keys[p.id]) for p in prompts}
    todo = [p for p in prompts if found[p.id] is None]
    batch = options.generation_batch or (8 if target.device.type == "cuda" else 1)
    reporter.phase("generate", len(todo))
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        for prompt, cont in zip(chunk, generate_greedy(target, [ids[p.id] for p in chunk], options.max_new_tokens, batch)):
            cache.put(keys[prompt.id], cont)
            found[prompt.id] = cont
            reporter.advance("generate", prompt.id)
    return found, len(todo)  # type: ignore[return-value]


def _counts(prompt_id: str, block_size: int, walk_n: list[int], drafted: list[int], slot_rows) -> M.AcceptanceCounts:
    counts = M.AcceptanceCounts(block_size=block_size)
    if walk_n:
        counts = counts + M.AcceptanceCounts.from_walk(prompt_id, walk_n, block_size, drafted)
    if slot_rows:
        import numpy as np

        table = np.array(slot_rows)
        counts = counts + M.AcceptanceCounts.from_marginal(np.where(table < 0, 0, table), block_size, valid=table >= 0)
    return counts


def check_committed(prompt_id: str, name: str, accept_lengths: list[int], continuation_len: int) -> None:
    """The invariant of z-lab's accounting, checked on every row: the steps commit every continuation token
    but the first (which the prefill produced)."""
    expected = max(continuation_len - 1, 0)
    if sum(accept_lengths) != expected:
        raise RuntimeError(f"internal error: prompt {prompt_id}, drafter {name}: the walk commits "
                           f"{sum(accept_lengths)} tokens, the continuation has {expected} after the first")


def _row(prompt: Prompt, name: str, B: int, result, p_len: int, cont: list[int], agree) -> dict[str, Any]:
    check_committed(prompt.id, name, result.walk_accept_lengths, len(cont))
    walk_n = [n - 1 for n in result.walk_accept_lengths]
    index = {a: i for i, a in enumerate(result.anchors)}
    return {
        "prompt_id": prompt.id, "prompt_set": prompt.set, "drafter": name, "prompt_len": p_len,
        "continuation_len": len(cont), "continuation_ids": cont, "walk_anchors": result.walk_anchors,
        "walk_accept_lengths": result.walk_accept_lengths, "walk_drafted": result.walk_drafted,
        "walk_drafts": [result.drafts[index[a]] for a in result.walk_anchors],
        "anchor_accepted": result.accepted, "self_consistency": list(agree),
        "counts": _counts(prompt.id, B, walk_n, result.walk_drafted, result.slot_correct).to_dict(),
    }


def _live_row(prompt: Prompt, name: str, B: int, live, p_len: int, cont: list[int], agree) -> dict[str, Any]:
    check_committed(prompt.id, name, live.walk_accept_lengths, len(live.continuation))
    walk_n = [n - 1 for n in live.walk_accept_lengths]
    return {
        "prompt_id": prompt.id, "prompt_set": prompt.set, "drafter": name, "prompt_len": p_len,
        "continuation_len": len(live.continuation), "continuation_ids": live.continuation,
        "walk_anchors": live.walk_anchors,
        "walk_accept_lengths": live.walk_accept_lengths, "walk_drafted": live.walk_drafted,
        "walk_drafts": live.walk_drafts, "step_seconds": live.step_seconds, "prefill_seconds": live.prefill_seconds,
        "live_agrees_with_greedy": list(agree),
        "counts": _counts(prompt.id, B, walk_n, live.walk_drafted, None).to_dict(),
    }


def _assemble(options, target, entries, drafters, rows, prompts, thinking, warnings, fingerprints, kernels,
              block_sizes, generated_count: int, evaluated_count: int) -> dict[str, Any]:
    import torch
    import transformers

    from . import __version__

    order = {p.id: i for i, p in enumerate(prompts)}
    rows = sorted(rows, key=lambda r: (order.get(r["prompt_id"], 1 << 30), r["drafter"]))
    sets: dict[str, int] = {}
    for p in prompts:
        sets[p.set] = sets.get(p.set, 0) + 1
    consistency = [r["self_consistency"] for r in rows if "self_consistency" in r]
    seen: set[str] = set()
    agree = total = 0
    for row, pair in zip([r for r in rows if "self_consistency" in r], consistency):
        if row["prompt_id"] not in seen:
            seen.add(row["prompt_id"])
            agree, total = agree + pair[0], total + pair[1]
    drafter_objects = []
    for entry in entries:
        mine = [r for r in rows if r["drafter"] == entry.name]
        per_prompt = {r["prompt_id"]: M.AcceptanceCounts.from_dict(r["counts"]) for r in mine}
        merged = M.AcceptanceCounts(block_size=block_sizes[entry.name])
        for counts in per_prompt.values():
            merged = merged + counts
        by_set = M.by_prompt_set(per_prompt, {r["prompt_id"]: r["prompt_set"] for r in mine}) if per_prompt else {}
        obj = {
            "name": entry.name, "path": str(entry.path), "format": entry.spec.format,
            "fingerprint": fingerprints[entry.name], "spec": entry.spec.to_dict(),
            "metrics": {**R.metrics_summary(merged, seed=options.seed),
                        "prompts_without_steps": sum(1 for c in per_prompt.values() if c.steps == 0)},
            "by_prompt_set": {s: R.metrics_summary(c, seed=options.seed) for s, c in sorted(by_set.items())},
            "repetition": _repetition_summary(mine, per_prompt, block_sizes[entry.name], options.seed),
            "counts": merged.to_dict(),
        }
        if options.mode == "live":
            obj["live"] = {"steps": merged.steps, "seconds": sum(sum(r.get("step_seconds", [])) for r in mine),
                           "prefill_seconds": sum(r.get("prefill_seconds", 0.0) for r in mine)}
        drafter_objects.append(obj)
    text = target.model.config.get_text_config()
    return {
        "schema_version": R.SCHEMA_VERSION,
        "provenance": {
            "dflash_eval": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "git_sha": _git_sha(), "argv": options.argv,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "target": {"name": target.name, "path": str(target.path), "fingerprint": target.fingerprint(),
                       "model_type": getattr(text, "model_type", None), "num_layers": target.info.num_layers,
                       "hidden_size": target.info.hidden_size, "vocab_size": target.info.vocab_size},
            "tokenizer_hash": tokenizer_hash(target.tokenizer),
            "chat_template_hash": chat_template_hash(target.tokenizer),
            "enable_thinking": thinking,
            "thinking_source": thinking_source(options.thinking, getattr(text, "model_type", "") or ""),
            "max_new_tokens": options.max_new_tokens, "temperature": 0,
            "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device),
            "kernels": kernels, "mode": options.mode, "final_block": options.final_block,
            "continuations": f"responses:{options.responses}" if options.responses else "generated",
            "self_consistency": {"agree": agree, "total": total},
            # with --responses the same count measures how far the external continuations are greedy
            "responses_agreement": {"agree": agree, "total": total} if options.responses else None,
            "prompts": {"source": options.prompts, "count": len(prompts), "sets": sets},
            "warnings": warnings,
            # work done by this invocation (a resumed run counts only what it did itself)
            "work": {"tap_passes": target.tap_passes, "continuations_generated": generated_count,
                     "prompts_evaluated": evaluated_count},
        },
        "drafters": drafter_objects,
    }
