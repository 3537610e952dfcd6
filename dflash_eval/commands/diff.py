"""`diff A B`: a fair, paired comparison of two drafters (two of one run, or from two runs).

Fairness first: a 0.2 tau difference on 20 prompts may be noise, and a different chat template or
thinking flag may explain all of it. So before any statistic, the two sides must agree on everything
that shapes the trajectory (target weights, tokenizer, chat template, thinking flag, prompt set,
max_new_tokens, temperature, block size) and, greedy decoding being deterministic, on the target's
continuations token for token. A mismatch is refused by name unless forced; the statistics (compare.py)
are paired over prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import compare as C
from ..core import metrics as M
from ..core.documents.results import drafter_named, read_run_document
from ..core.documents.run_document import DrafterDocument, RunDocument
from ..core.documents.run_rows import run_rows
from ..core.errors import InputError
from ..core.implausible import drafter_flags, flag_lines
from ..core.samples import BlockView, walk_blocks


@dataclass
class Side:
    label: str  # as given on the command line
    name: str  # drafter name inside its run
    run_dir: Path
    run: RunDocument
    drafter: DrafterDocument
    rows: dict[str, dict[str, Any]]  # prompt id -> samples row of this drafter (sample 0 at temperature > 0)
    pooled: dict[str, M.AcceptanceCounts] = field(default_factory=dict)  # prompt id -> its samples pooled

    def counts(self) -> M.AcceptanceCounts:
        return M.AcceptanceCounts.from_dict(self.drafter["counts"])

    def counts_for(self, prompt_ids) -> M.AcceptanceCounts:
        """The prompts' counts, each prompt's K samples pooled (metrics.pool_samples) at temperature > 0."""
        total = M.AcceptanceCounts(block_size=self.drafter["spec"]["block_size"])
        for pid in prompt_ids:
            total = total + self.pooled[pid]
        return total


def split_side(value: str) -> tuple[Path, str | None]:
    """RUN_DIR or RUN_DIR:DRAFTER_NAME -> (run folder, drafter name or None)."""
    head, sep, tail = value.rpartition(":")
    return (Path(head), tail) if sep and head and Path(head).is_dir() and not Path(value).is_dir() else (Path(value), None)


def side_folder(value: str) -> Path:
    return split_side(value)[0]


def load_side(value: str, partial: bool = False) -> Side:
    """RUN_DIR or RUN_DIR:DRAFTER_NAME."""
    run_dir, name = split_side(value)
    run = read_run_document(run_dir, partial=partial)
    name = drafter_named(run, run_dir, name, f"say which, as {run_dir}:NAME")["name"]
    rows: dict[str, dict[str, Any]] = {}
    pooled: dict[str, M.AcceptanceCounts] = {}
    for r in run_rows(run_dir, run):  # refused by name when duplicated, missing or torn
        if r["drafter"] != name:
            continue
        pid = r["prompt_id"]
        if r.get("counts") is not None:
            counts = M.AcceptanceCounts.from_dict(r["counts"])
            pooled[pid] = M.pool_samples(pooled[pid], counts) if pid in pooled else counts
        if r.get("sample", 0) == 0:
            rows[pid] = r  # the examples shown are of sample 0; the numbers pool every sample
    return Side(value, name, run_dir, run, next(d for d in run["drafters"] if d["name"] == name), rows, pooled)


def fairness_problems(a: Side, b: Side, max_mismatch: float) -> tuple[list[str], dict[str, Any]]:
    """Every setting in which the two sides differ, by name; plus the continuation agreement."""
    pa, pb = a.run["provenance"], b.run["provenance"]
    checks = [
        ("target fingerprint", pa["target"]["fingerprint"], pb["target"]["fingerprint"]),
        ("tokenizer", pa["tokenizer_hash"], pb["tokenizer_hash"]),
        ("chat template", pa["chat_template_hash"], pb["chat_template_hash"]),
        ("thinking flag", pa["enable_thinking"], pb["enable_thinking"]),
        ("max_new_tokens", pa["max_new_tokens"], pb["max_new_tokens"]),
        ("temperature", pa.get("temperature", 0), pb.get("temperature", 0)),
        # top-p/k, draft policy, samples per prompt and seed: with equal seeds both sides drew sample k of a
        # prompt from the same random stream, so pooled per-prompt counts pair sample for sample
        ("sampling", _sampling_key(pa), _sampling_key(pb)),
        ("block size", a.drafter["spec"]["block_size"], b.drafter["spec"]["block_size"]),
        ("prompt set", sorted(a.rows), sorted(b.rows)),
    ]
    problems = [f"{label} differs ({_short(x)} vs {_short(y)})" for label, x, y in checks if x != y]
    differ = total = 0
    if (pa.get("temperature") or 0) > 0:  # sampled: each drafter's loop commits its own sample of the target
        return problems, {"differing_tokens": 0, "total_tokens": 0, "share": 0.0,
                          "note": "temperature > 0: continuations are samples, not compared"}
    for pid in set(a.rows) & set(b.rows):
        ca, cb = a.rows[pid]["continuation_ids"], b.rows[pid]["continuation_ids"]
        total += max(len(ca), len(cb))
        differ += sum(x != y for x, y in zip(ca, cb)) + abs(len(ca) - len(cb))
    share = differ / total if total else 0.0
    if share > max_mismatch:
        problems.append(f"target continuations differ in {100 * share:.2f}% of tokens (> {100 * max_mismatch:g}% allowed)")
    return problems, {"differing_tokens": differ, "total_tokens": total, "share": share}


def snapshot_warnings(a: Side, b: Side) -> list[str]:
    """Two results of one HF repository name measured at different revisions or architectures (snapshots.py)."""
    from ..core.snapshots import conflicts, drafter_architecture, target_architecture

    ta, tb = a.run["provenance"]["target"], b.run["provenance"]["target"]
    return (conflicts([(f"A ({a.name})", a.drafter.get("snapshot"), drafter_architecture(a.drafter["spec"])),
                       (f"B ({b.name})", b.drafter.get("snapshot"), drafter_architecture(b.drafter["spec"]))])
            + conflicts([("A's target", ta.get("snapshot"), target_architecture(ta)),
                         ("B's target", tb.get("snapshot"), target_architecture(tb))]))


def _sampling_key(provenance: dict) -> dict | None:
    sampling = provenance.get("sampling")
    return {k: v for k, v in sampling.items() if k != "generator"} if isinstance(sampling, dict) else None


def _short(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} prompts"
    text = str(value)
    return text[:12] if len(text) > 16 else text


def first_divergence(a_row: dict, b_row: dict) -> tuple[BlockView, BlockView] | None:
    """The blocks both drafters drafted at the first walk step where their accepted lengths differ."""
    for block_a, block_b in zip(walk_blocks(a_row), walk_blocks(b_row)):
        if block_a.anchor_pos != block_b.anchor_pos:
            return None  # cannot happen before a divergence; defensive
        if block_a.accepted != block_b.accepted or block_a.draft != block_b.draft:
            return block_a, block_b
    return None


def _display_names(a: Side, b: Side) -> tuple[str, str]:
    """Drafter names, qualified by their run folder when the names alone do not tell them apart."""
    if a.name != b.name:
        return a.name, b.name
    return f"{a.run_dir.name}:{a.name}", f"{b.run_dir.name}:{b.name}"


def _estimate_diff(a: Side, b: Side, a_value: str, b_value: str, problems: list[str], seed: int) -> dict[str, Any]:
    """Two offline estimates (temperature > 0) paired by prompt: each prompt's expected committed / expected
    steps, its K samples pooled; the same bootstrap and permutation test as counted runs."""
    if not (a.drafter["metrics"].get("estimate") and b.drafter["metrics"].get("estimate")):
        raise InputError(None, f"{a_value} and {b_value}: one side is an offline estimate (temperature > 0), the "
                               "other counted; compare like with like")
    pa = {k: tuple(v) for k, v in a.drafter["estimate"]["per_prompt"].items()}
    pb = {k: tuple(v) for k, v in b.drafter["estimate"]["per_prompt"].items()}
    macro = C.delta_tau_per_prompt(pa, pb, kind="macro", seed=seed)
    micro = C.delta_tau_per_prompt(pa, pb, kind="micro", seed=seed)
    ma, mb = a.drafter["metrics"], b.drafter["metrics"]
    width = max(len(ma["alpha"]), len(mb["alpha"]))
    alpha = [None if i >= len(ma["alpha"]) or i >= len(mb["alpha"]) or ma["alpha"][i] is None or mb["alpha"][i] is None
             else mb["alpha"][i] - ma["alpha"][i] for i in range(width)]
    return {
        "estimate": True, "warnings": snapshot_warnings(a, b), "forced": bool(problems), "unfair": problems, "prompts": macro.n,
        "a": {"label": a_value, "name": a.name, "run": str(a.run_dir), "tau_macro": ma["tau_macro"],
              "tau_micro": ma["tau_micro"]},
        "b": {"label": b_value, "name": b.name, "run": str(b.run_dir), "tau_macro": mb["tau_macro"],
              "tau_micro": mb["tau_micro"]},
        "delta_tau_macro": macro.to_dict(), "delta_tau_micro": micro.to_dict(), "delta_alpha": alpha,
        "verdict": "ESTIMATE: " + C.verdict(macro, *_display_names(a, b)),
    }


def _counts_at(side: Side, k: int, prompt_ids) -> M.AcceptanceCounts | None:
    """A side's walks at draft length k over the prompts (samples pooled), or None when it has no such k."""
    B = side.drafter["spec"]["block_size"]
    if k == B - 1:
        return side.counts_for(prompt_ids)
    total = M.AcceptanceCounts(block_size=k + 1)
    for pid in prompt_ids:
        entry = (side.rows[pid].get("by_draft_length") or {}).get(str(k))
        if entry is None:
            return None
        total = total + M.AcceptanceCounts.from_dict(entry["counts"])
    return total


def _step_model(table: dict[str, Any]) -> tuple:
    """What makes two speedup tables comparable: the same source and inputs, apart from what describes the
    drafter itself (a roofline models each drafter's own shape on the same accelerator, target and context)."""
    drafter_keys = ("drafter_block_size", "drafter_shape") if table.get("source") == "roofline" else ()
    return table.get("source"), {k: v for k, v in (table.get("inputs") or {}).items() if k not in drafter_keys}


def draft_length_diff(a: Side, b: Side, common: list[str], seed: int) -> dict[str, Any] | None:
    """--draft-lengths on both sides: tau paired over prompts at each k both measured, and the expected
    speedups' best k per batch side by side (same step-time model or flagged)."""
    ks_a = {e["k"] for e in a.drafter.get("by_draft_length") or []}
    ks_b = {e["k"] for e in b.drafter.get("by_draft_length") or []}
    pairs = []
    for k in sorted(ks_a & ks_b):
        ca, cb = _counts_at(a, k, common), _counts_at(b, k, common)
        row = C.paired_row(ca.per_prompt, cb.per_prompt, seed=seed) if ca is not None and cb is not None else None
        if row is not None:  # every figure of the row over the prompts with steps on both sides at k
            pairs.append({"k": k, **{key: row[key] for key in ("tau_macro_a", "tau_macro_b", "delta_tau_macro")}})
    sa, sb = a.drafter.get("speedup"), b.drafter.get("speedup")
    speed = None
    if sa and sb:
        best_b = {x["batch"]: x for x in sb["best"]}
        speed = {"label_a": sa["label"], "label_b": sb["label"], "same_model": _step_model(sa) == _step_model(sb),
                 "best": [{"batch": x["batch"], "k_a": x["k"], "speedup_a": x["speedup"],
                           "k_b": best_b[x["batch"]]["k"], "speedup_b": best_b[x["batch"]]["speedup"]}
                          for x in sa["best"] if x["batch"] in best_b]}
    return {"pairs": pairs, "speedup": speed} if pairs or speed else None


def tree_diff(a: Side, b: Side, common: list[str], seed: int, chain: dict[str, Any]) -> dict[str, Any] | None:
    """--tree-budgets on both sides: tau paired over prompts at each budget both measured (each side's own tree
    walk, core/tree.py), beside the chain's difference (`chain`: delta_tau_macro), or None."""
    def counts(side: Side, budget: int) -> M.AcceptanceCounts | None:
        total = M.AcceptanceCounts(block_size=side.drafter["spec"]["block_size"])
        for pid in common:
            walk = ((side.rows[pid].get("tree") or {}).get("walks") or {}).get(str(budget))
            if walk is None:
                return None
            total = total + M.AcceptanceCounts.from_dict(walk["counts"])
        return total

    budgets = set((a.drafter.get("tree") or {}).get("budgets") or []) & set((b.drafter.get("tree") or {}).get("budgets") or [])
    pairs = []
    for budget in sorted(budgets):
        ca, cb = counts(a, budget), counts(b, budget)
        row = C.paired_row(ca.per_prompt, cb.per_prompt, seed=seed) if ca is not None and cb is not None else None
        if row is not None:
            pairs.append({"budget": budget, **{key: row[key] for key in ("tau_macro_a", "tau_macro_b", "delta_tau_macro")}})
    return {"pairs": pairs, "chain": chain} if pairs else None


def diff(a_value: str, b_value: str, *, force: bool = False, max_mismatch: float = 0.001, top: int = 3,
         seed: int = 0, partial: bool = False) -> dict[str, Any]:
    a, b = load_side(a_value, partial), load_side(b_value, partial)
    problems, agreement = fairness_problems(a, b, max_mismatch)
    if problems and not force:
        raise InputError(None, f"unfair comparison of {a_value} and {b_value}: " + "; ".join(problems)
                         + " (use --force to compare anyway)")
    if not set(a.rows) & set(b.rows):  # even --force cannot pair prompts that only one side has
        raise InputError(None, f"{a_value} and {b_value} have no prompt in common ({len(a.rows)} and {len(b.rows)} "
                               "prompts): nothing to pair; compare runs over the same prompts")
    if a.drafter["metrics"].get("estimate") or b.drafter["metrics"].get("estimate"):
        return _estimate_diff(a, b, a_value, b_value, problems, seed)
    common = sorted(set(a.rows) & set(b.rows))
    ca, cb = a.counts_for(common), b.counts_for(common)
    macro = C.delta_tau(ca, cb, kind="macro", seed=seed)
    micro = C.delta_tau(ca, cb, kind="micro", seed=seed)
    regressed, improved = C.top_changes(ca, cb, top)
    sets = sorted({a.rows[p]["prompt_set"] for p in common})
    by_set = {}
    for prompt_set in sets:
        ids = [p for p in common if a.rows[p]["prompt_set"] == prompt_set]
        if len(ids) >= 2:
            by_set[prompt_set] = C.delta_tau(a.counts_for(ids), b.counts_for(ids), seed=seed).to_dict()
    examples = []
    for pid, tau_a, tau_b, delta in regressed + improved:
        pair = first_divergence(a.rows[pid], b.rows[pid])
        examples.append({"prompt_id": pid, "tau_a": tau_a, "tau_b": tau_b, "delta": delta,
                         "blocks": [pair[0].__dict__, pair[1].__dict__] if pair else None})
    rep_a, rep_b = a.drafter.get("repetition") or {}, b.drafter.get("repetition") or {}
    warnings = []
    if a.run_dir.resolve() == b.run_dir.resolve() and a.name == b.name:
        warnings.append(f"A and B are the same drafter of the same run ({a.name}): the difference is 0 by construction")
    elif a.drafter.get("fingerprint") and a.drafter.get("fingerprint") == b.drafter.get("fingerprint"):
        warnings.append("A and B have identical checkpoint weights (same fingerprint)")
    warnings += snapshot_warnings(a, b)
    # what should not be (core/implausible.py): each side's drafter, said with what it usually means
    flags = [{**f, "where": f"{side}: {f['where']}"} for side, s in (("A", a), ("B", b)) for f in drafter_flags(s.drafter)]
    warnings += flag_lines(flags)
    return {
        "warnings": warnings, "flags": flags,
        "a": {"label": a_value, "name": a.name, "run": str(a.run_dir), "tau_macro": M.tau_macro(ca), "tau_micro": M.tau_micro(ca),
              "incomplete": a.run.get("incomplete")},
        "b": {"label": b_value, "name": b.name, "run": str(b.run_dir), "tau_macro": M.tau_macro(cb), "tau_micro": M.tau_micro(cb),
              "incomplete": b.run.get("incomplete")},
        "forced": bool(problems), "unfair": problems, "continuations": agreement, "prompts": len(common),
        "delta_tau_macro": macro.to_dict(), "delta_tau_micro": micro.to_dict(),
        "sign_test_p": C.sign_test([d for _, _, _, d in C.per_prompt_differences(ca, cb)]),
        "slots": C.slot_deltas(ca, cb), "histogram": C.histogram_shift(ca, cb), "by_prompt_set": by_set,
        "repetition": {"flagged_share_a": rep_a.get("flagged_share"), "flagged_share_b": rep_b.get("flagged_share")},
        "regressed": [e for e in examples if e["delta"] < 0], "improved": [e for e in examples if e["delta"] > 0],
        "verdict": C.verdict(macro, *_display_names(a, b)),
        "draft_lengths": draft_length_diff(a, b, common, seed),
        "trees": tree_diff(a, b, common, seed, macro.to_dict()),  # --tree-budgets on both sides: per budget
        "by_depth": depth_diff(a, b, common, seed),  # where acceptance is lost (core/breakdown.py)
    }


def depth_diff(a: Side, b: Side, common: list[str], seed: int) -> list[dict[str, Any]] | None:
    """Pairs by depth bucket (A's edges), from the rows; greedy runs only (sampled rows pool K samples)."""
    from ..core.breakdown import depth_pairs

    if not a.drafter.get("by_depth") or any((s.run["provenance"].get("temperature") or 0) > 0 for s in (a, b)):
        return None
    return depth_pairs([a.rows[p] for p in common], [b.rows[p] for p in common], a.drafter["spec"]["block_size"],
                       b.drafter["spec"]["block_size"], a.drafter.get("depth_edges") or (), seed)
