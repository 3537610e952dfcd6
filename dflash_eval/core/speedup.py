"""From acceptance to a serving decision: draft lengths and the expected speedup of speculative decoding.

Why this exists: teams deploy a `num_speculative_tokens` (k) and expect a speedup, not a tau. A server
runs a DFlash drafter on a block of k + 1 slots (anchor + k masks; vLLM `v1/spec_decode/dflash.py`), and
since attention inside a block is bidirectional the acceptance at k is measured by its own replay with a
block of k + 1 (`--draft-lengths`), never by cutting the checkpoint's full block. This module turns those
per-k acceptances and step times into the expected speedup, a MODEL with named inputs:

    speedup(k, batch) = E[tokens committed per step at k] x t_target(1, batch)
                        / (t_target(k + 1, batch) + t_drafter(k + 1, batch))

- E[tokens committed per step] = tau_micro of the walks replayed at k (all committed tokens / all steps,
  vLLM's mean acceptance length), from counts;
- t_target(n, batch): seconds of one target forward over `batch` sequences of n new tokens each (n = 1 is
  a plain decoding step), t_drafter(n, batch) the same for one drafter pass over a block of n slots.
Step times come from a roofline model of the configs on a named accelerator, from `--mode live` (measured,
batch 1) or from a JSON file (e.g. numbers taken from `vllm bench forward`), always recorded with the table.
The model leaves out what is not in it: scheduling, sampling, the KV/rollback bookkeeping of a real server.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

BATCHES = (1, 4, 16, 64)

StepTime = Callable[[int, int], "float | None"]  # (new tokens per sequence, batch) -> seconds, None: unknown


def parse_draft_lengths(text: str | None, block_size: int, *, name: str = "") -> tuple[int, ...]:
    """"3,7,15" or "all" -> sorted draft lengths k (1 <= k <= B - 1 of that drafter); empty for None.

    The one parser is the serving section's (core/settings/work.py); this is its shorthand for one value."""
    from .settings.work import Serving

    return Serving(draft_lengths=text).for_block(block_size, name)


def mean_context(prompt_lengths, max_new_tokens: int) -> int:
    """The context a roofline step is modelled at: the prompts' mean length plus half the generation cap
    (the middle of a generation); run and merge both use it, so a merged table equals one process's."""
    lengths = list(prompt_lengths)
    return round(sum(lengths) / max(len(lengths), 1) + max_new_tokens / 2)


def speedup(tokens_per_step: float, t_target_one: float, t_target_block: float, t_drafter_block: float) -> float:
    """E[tokens per step] x t_target(1) / (t_target(k + 1) + t_drafter(k + 1)): the one formula."""
    if not tokens_per_step >= 1.0:
        raise ValueError(f"tokens per step {tokens_per_step!r} < 1 (a step commits at least one token)")
    for value in (t_target_one, t_target_block, t_drafter_block):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"step time {value!r} is not a finite non-negative number of seconds")
    spent = t_target_block + t_drafter_block
    if spent <= 0:
        raise ValueError("a speculative step takes no time")
    return tokens_per_step * t_target_one / spent


@dataclass(frozen=True)
class StepTimes:
    """Where step times come from, with what went in (shown as the table's label)."""

    source: str  # "roofline", "measured", "file"
    label: str  # one line naming the model and its inputs
    target: StepTime
    drafter: StepTime
    batches: tuple[int, ...] = BATCHES
    inputs: dict[str, Any] = field(default_factory=dict)


def speedup_table(tokens_per_step: Mapping[int, float], times: StepTimes) -> dict[str, Any]:
    """k x batch table of expected speedups and the best k per batch; cells whose step times are unknown
    are None (never guessed). tokens_per_step: {k: tau_micro at draft length k}."""
    ks = sorted(tokens_per_step)
    one = {b: times.target(1, b) for b in times.batches}
    rows: list[dict[str, Any]] = []
    for k in ks:
        cells: list[float | None] = []
        t_targets: list[float | None] = []
        t_drafters: list[float | None] = []
        for b in times.batches:
            tt, td = times.target(k + 1, b), times.drafter(k + 1, b)
            t_targets.append(tt)
            t_drafters.append(td)
            t_one = one[b]  # a cell only where all three step times are known
            cells.append(speedup(tokens_per_step[k], t_one, tt, td)
                         if t_one is not None and tt is not None and td is not None else None)
        rows.append({"k": k, "block": k + 1, "tokens_per_step": tokens_per_step[k], "speedup": cells,
                     "target_seconds": t_targets, "drafter_seconds": t_drafters})
    best = []
    for i, b in enumerate(times.batches):
        known = [(row["speedup"][i], row["k"]) for row in rows if row["speedup"][i] is not None]
        best_value, best_k = max(known, key=lambda pair: (pair[0], -pair[1])) if known else (None, None)
        best.append({"batch": b, "k": best_k, "speedup": best_value})
    return {
        "model": "speedup(k, batch) = tau_micro(k) x t_target(1, batch) / (t_target(k + 1, batch) "
                 "+ t_drafter(k + 1, batch))",
        "source": times.source, "label": times.label, "inputs": times.inputs,
        "batches": list(times.batches), "target_seconds_one_token": [one[b] for b in times.batches],
        "rows": rows, "best": best,
    }


def rising_with_batch(table: Mapping[str, Any]) -> str | None:
    """Why a modelled speedup that RISES with the batch (the opposite of what vLLM users see at high
    concurrency) says little, or None when no row rises. It rises when, even at the largest batch, verifying
    k + 1 tokens costs the target about what one token does (the step still bound by reading the weights, as
    on a tiny target) while the drafter's own step, a fixed cost, weighs less as the batch grows; on a real
    target the verify step turns compute-bound as the batch grows and the speedup falls."""
    rows = [r for r in table.get("rows") or [] if None not in r["speedup"] and len(r["speedup"]) > 1]
    rising = [r for r in rows if r["speedup"][-1] > r["speedup"][0] * 1.02]
    if not rising:
        return None
    row, batch = rising[-1], table["batches"][-1]
    one = table["target_seconds_one_token"][-1]
    cost = row["target_seconds"][-1] / one if one else float("nan")
    share = row["drafter_seconds"][0] / (row["target_seconds"][0] + row["drafter_seconds"][0])
    return (f"the modelled speedup rises with the batch here: at batch {batch} verifying k + 1 = {row['block']} tokens "
            f"still costs the target {cost:.2f}x one token (its step is bound by reading its weights: a target this "
            f"small never turns compute-bound), while the drafter's step, {100 * share:.0f}% of a step at batch 1, "
            "weighs less as the batch grows; a real target's speedup falls with the batch as verification turns "
            "compute-bound, so read the batch-1 column")


# ---------------------------------------------------------------------------------------------------
# step times from a user's JSON file (--step-times)

STEP_TIMES_HELP = ('{"label": "...", "target": [{"batch": B, "tokens": N, "seconds": S}, ...], '
                   '"drafter": [{"batch": B, "tokens": N, "seconds": S}, ...]}')
_TOP_KEYS = {"label", "target", "drafter", "note"}


def step_times_from_json(data: Any, path: Path | str) -> StepTimes:
    """A user's step times, validated: each entry's batch and tokens positive integers, seconds a positive
    finite number, no (batch, tokens) twice; the target needs tokens = 1 (the plain decoding step)."""
    if not isinstance(data, dict):
        raise InputError(path, f"step times must be a JSON object {STEP_TIMES_HELP}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InputError(path, f"unknown key {unknown[0]!r} (expected {sorted(_TOP_KEYS)})")
    tables = {}
    for role in ("target", "drafter"):
        entries = data.get(role)
        if not isinstance(entries, list) or not entries:
            raise InputError(path, f"{role!r} must be a non-empty list of {{batch, tokens, seconds}}")
        table: dict[tuple[int, int], float] = {}
        for i, entry in enumerate(entries):
            where = f"{role}[{i}]"
            if not isinstance(entry, dict) or set(entry) != {"batch", "tokens", "seconds"}:
                raise InputError(path, f"{where} must have exactly the keys batch, tokens, seconds")
            batch, tokens, seconds = entry["batch"], entry["tokens"], entry["seconds"]
            for key, value in (("batch", batch), ("tokens", tokens)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise InputError(path, f"{where}.{key} = {value!r} is not a positive integer")
            if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds)
                    or seconds <= 0):
                raise InputError(path, f"{where}.seconds = {seconds!r} is not a positive number of seconds")
            if (batch, tokens) in table:
                raise InputError(path, f"{where}: batch {batch}, tokens {tokens} given twice")
            table[(batch, tokens)] = float(seconds)
        tables[role] = table
    batches = tuple(sorted({b for b, n in tables["target"] if n == 1}))
    if not batches:
        raise InputError(path, "no target entry with tokens = 1 (the plain decoding step every speedup divides by)")
    label = data.get("label")
    if label is not None and not isinstance(label, str):
        raise InputError(path, "'label' must be a string")
    return StepTimes(source="file", label=f"step times from {Path(path).name}" + (f": {label}" if label else ""),
                     target=lambda n, b: tables["target"].get((b, n)),
                     drafter=lambda n, b: tables["drafter"].get((b, n)), batches=batches,
                     inputs={"file": str(path), "label": label,
                             "target": [[b, n, s] for (b, n), s in sorted(tables["target"].items())],
                             "drafter": [[b, n, s] for (b, n), s in sorted(tables["drafter"].items())]})


def read_step_times(path: Path | str) -> StepTimes:
    """--step-times FILE, one line naming the file on any problem."""
    from .errors import loads

    try:
        from .errors import read_text

        text = read_text(path)
    except OSError as exc:
        raise InputError(path, f"cannot read step times ({exc.strerror or exc})") from None
    try:
        data = loads(text)
    except ValueError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    return step_times_from_json(data, path)


def measured_step_times(seconds: Mapping[int, tuple[float, float, int]], one_token: tuple[float, int],
                        label: str) -> StepTimes:
    """Step times measured by the live loop at batch 1: {k: (verify seconds, draft seconds, steps)} summed
    over steps, and (seconds, steps) of plain one-token target steps; means per step."""
    per_k = {k: (v / n, d / n) for k, (v, d, n) in seconds.items() if n}
    base = one_token[0] / one_token[1] if one_token[1] else None
    return StepTimes(source="measured", label=label,
                     target=lambda n, b: base if (b == 1 and n == 1) else (per_k[n - 1][0] if b == 1 and n - 1 in per_k else None),
                     drafter=lambda n, b: per_k[n - 1][1] if b == 1 and n - 1 in per_k else None,
                     batches=(1,),
                     inputs={"target_one_token_seconds": base, "steps_one_token": one_token[1],
                             "per_k": {str(k): {"verify_seconds": v, "draft_seconds": d, "steps": n}
                                       for k, (v, d, n) in sorted(seconds.items())}})


def roofline_step_times(accelerator_name: str, target_config: dict, drafter_spec, context_tokens: int,
                        dtype_bytes: int = 2) -> StepTimes:
    """Step times from the roofline model `plan` uses (roofline.py): a target forward over `batch`
    sequences of n new tokens after `context_tokens` cached ones, and a drafter forward over `batch` blocks
    of n slots seeing `context_tokens` context rows (plus the fc / key-value projections of n new context
    tokens: an upper bound on the tokens one step commits); bf16 unless told."""
    from . import roofline as RF

    return roofline_from_shapes(RF.accelerator(accelerator_name), RF.model_shape(target_config),
                                RF.drafter_shape_from_spec(drafter_spec), context_tokens, dtype_bytes)


def roofline_from_shapes(device, target, drafter, context_tokens: int, dtype_bytes: int = 2) -> StepTimes:
    """`roofline_step_times` from the shapes themselves (roofline.ModelShape / DrafterShape), which it
    records in `inputs` so that `merge` can rebuild the same step times (`recorded_step_times`)."""
    import dataclasses

    from . import roofline as RF

    return StepTimes(
        source="roofline",
        label=(f"roofline model on {device.name} ({device.peak_flops / 1e12:.0f} TFLOP/s, "
               f"{device.bandwidth / 1e12:.2f} TB/s), {context_tokens} context tokens, {8 * dtype_bytes}-bit weights"),
        target=lambda n, b: RF.step_time(target, device, b, n, context_tokens, dtype_bytes=dtype_bytes),
        drafter=lambda n, b: RF.drafter_step_time(drafter, device, b, context_tokens, n, dtype_bytes=dtype_bytes,
                                                  block_size=n),
        inputs={"accelerator": device.name, "peak_flops": device.peak_flops, "bandwidth": device.bandwidth,
                "context_tokens": context_tokens, "dtype_bytes": dtype_bytes,
                "target_model_type": target.model_type, "drafter_block_size": drafter.block_size,
                "target_shape": dataclasses.asdict(target), "drafter_shape": dataclasses.asdict(drafter)})


def recorded_step_times(table: dict[str, Any], context_tokens: int | None = None) -> StepTimes:
    """The step times a run.json `speedup` table was computed with, rebuilt from its recorded inputs (what
    `merge` recomputes the table with from the merged counts): a file's entries as given; a roofline's
    accelerator numbers and shapes, at `context_tokens` (None: the recorded context). ValueError (the
    reason) for measured times (rebuilt from the rows' timings) or a roofline recorded without its shapes."""
    import dataclasses

    from . import roofline as RF

    source, inputs = table.get("source"), table.get("inputs") or {}
    if source == "file":
        data = {"label": inputs.get("label"),
                **{role: [{"batch": b, "tokens": n, "seconds": t} for b, n, t in inputs[role]]
                   for role in ("target", "drafter")}}
        return step_times_from_json({k: v for k, v in data.items() if v is not None}, inputs["file"])
    if source != "roofline":
        raise ValueError(f"step times {source!r} are rebuilt from the rows, not from the table")
    if "target_shape" not in inputs or "drafter_shape" not in inputs:
        raise ValueError("the roofline's model shapes are not recorded (a run.json of an older dflash-eval)")

    def shape(values: dict[str, Any]) -> RF.ModelShape:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}  # JSON
        return RF.ModelShape(**fields)

    drafter = RF.DrafterShape(**{**inputs["drafter_shape"], "body": shape(inputs["drafter_shape"]["body"])})
    device = dataclasses.replace(RF.accelerator(inputs["accelerator"]), peak_flops=inputs["peak_flops"],
                                 bandwidth=inputs["bandwidth"])
    context = inputs["context_tokens"] if context_tokens is None else context_tokens
    return roofline_from_shapes(device, shape(inputs["target_shape"]), drafter, context, inputs["dtype_bytes"])


def live_throughput(drafter: dict) -> dict[str, Any] | None:
    """Live mode: committed tokens per second of the loop's steps (prefill left out), the mean step latency,
    and the speedup measured against plain one-token decoding steps (batch 1, at the checkpoint's block)
    when the run timed them (`--draft-lengths` in live mode); None outside live mode."""
    live = drafter.get("live")
    if not live or not live.get("steps") or not live.get("seconds"):
        return None
    from .metrics import AcceptanceCounts

    committed = sum(c for _, c in AcceptanceCounts.from_dict(drafter["counts"]).per_prompt.values())
    out = {"steps": live["steps"], "seconds": live["seconds"], "prefill_seconds": live.get("prefill_seconds"),
           "tokens_per_second": committed / live["seconds"] if committed else None,
           "step_ms": 1000 * live["seconds"] / live["steps"], "measured_speedup": None}
    table = drafter.get("speedup")
    if table and table.get("source") == "measured":
        block = drafter["spec"]["block_size"]
        row = next((r for r in table["rows"] if r["k"] == block - 1), None)
        if row is not None and table["batches"] and table["batches"][0] == 1:
            out["measured_speedup"] = row["speedup"][0]
    return out


def tree_speedup_table(chain: Mapping[int, float], trees: Mapping[int, float], block_size: int,
                       times: StepTimes) -> dict[str, Any]:
    """Chains and trees in one table, per batch: a chain at draft length k verifies k + 1 tokens after a
    drafter pass over k + 1 slots; a DDTree step at budget b verifies 1 + b tokens (the root and b nodes) after
    one drafter pass over the checkpoint's block (B slots: the tree reads every depth), so

        speedup(tree b, batch) = tau_micro(b) x t_target(1, batch) / (t_target(1 + b, batch) + t_drafter(B, batch))

    chain: {k: tau_micro at draft length k}; trees: {b: tau_micro of the tree walk at budget b}. The tree's
    host work (building the tree, its attention mask) is not in the model. Best per batch over both kinds."""
    one = {b: times.target(1, b) for b in times.batches}
    rows: list[dict[str, Any]] = []
    for kind, size, verify, drafted, tau in (
            [("chain", k, k + 1, k + 1, chain[k]) for k in sorted(chain)]
            + [("tree", b, 1 + b, block_size, trees[b]) for b in sorted(trees)]):
        cells: list[float | None] = []
        t_targets: list[float | None] = []
        t_drafters: list[float | None] = []
        for batch in times.batches:
            tt, td = times.target(verify, batch), times.drafter(drafted, batch)
            t_targets.append(tt)
            t_drafters.append(td)
            t_one = one[batch]  # a cell only where all three step times are known
            cells.append(speedup(tau, t_one, tt, td) if t_one is not None and tt is not None and td is not None
                         else None)
        rows.append({"verification": kind, "size": size, "verify_tokens": verify, "drafter_slots": drafted,
                     "tokens_per_step": tau, "speedup": cells, "target_seconds": t_targets,
                     "drafter_seconds": t_drafters})
    best = []
    for i, batch in enumerate(times.batches):
        known = [(r["speedup"][i], -r["verify_tokens"], r) for r in rows if r["speedup"][i] is not None]
        if known:
            value, _, row = max(known, key=lambda t: (t[0], t[1]))
            best.append({"batch": batch, "verification": row["verification"], "size": row["size"], "speedup": value})
        else:
            best.append({"batch": batch, "verification": None, "size": None, "speedup": None})
    return {
        "model": "chain k: tau_micro(k) x t_target(1) / (t_target(k + 1) + t_drafter(k + 1)); tree b: tau_micro(b) x "
                 "t_target(1) / (t_target(1 + b) + t_drafter(B)); per batch; the tree's host work not modelled",
        "source": times.source, "label": times.label, "batches": list(times.batches),
        "target_seconds_one_token": [one[b] for b in times.batches], "rows": rows, "best": best,
    }
