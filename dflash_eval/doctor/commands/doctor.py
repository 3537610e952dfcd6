"""`doctor`: name the train/eval mismatch behind an acceptance gap.

"My drafter is 4x worse than the reference; which of the usual bugs is it?" Each classic bug is a
mismatch between how a drafter was trained and how it is evaluated. If we evaluate the drafter the way a
bug would have trained it and acceptance jumps, the drafter *behaves as if* trained that way. So doctor
replays the drafter under controlled variants on one cached trajectory per prompt (one target pass,
many cheap drafter passes) and compares each with the configuration, paired over prompts:

| variant                 | the bug it stands for                                               |
|-------------------------|---------------------------------------------------------------------|
| anchor in context       | trained with p <= a: the anchor's own hidden state leaked as context |
| taps shifted -1 / +1    | z-lab ids (output of layer t) vs speculators ids (t+1) mixed up      |
| tap k zeroed            | the projection does not really use tap k (fed 4 of 5 layers)         |
| all causal / all bidir. | in-block causality differs between trainer and evaluator            |
| no sliding window       | trained with full attention where the config says sliding            |
| block positions +1      | block position ids offset from the context's (a uniform offset of    |
|                         | all positions is invisible to RoPE, so only a relative one matters)  |
| taps through final norm | trained on post-norm states (double norm)                           |
| other rules (zlab /     | trained under another reference's attention rules (window from the  |
| speculators / vllm)     | anchor vs the query, per-layer causality, z-lab's scale keys)        |
| RoPE: target's / none   | trained with the target's RoPE, or without the scaling the config    |
|                         | records (an engine applying unseen scaling collapses acceptance)     |
| target's tables         | the checkpoint's embedding / lm_head copies are not the target's     |
| thinking flipped, raw   | (context variants: new continuations, one more pass per prompt each) |
| prompt                  | trained with the other thinking setting, or without the chat template |

Beside the variants: the drafts against the logit lens of the last target layers (labels taken from an
inner layer), the embedding / lm_head copies compared with the target's, and with `--reference` the gap to
a reference decomposed by variant (gap.py), and for speculators checkpoints the teacher's final-norm convention
(commands/doctor_norm.py). The variants and their replay live in the main stack's commands/variants.py.

Static checks come first: captured taps all zero, constant or non-finite (the hybrid-extraction bug)
stop doctor before any drafter runs; the MASK embedding row must exist, be non-zero and not look like an
untrained row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ...commands.variants import (
    LENS_LAYERS,
    Variant,
    VariantResult,
    build_variants,
    check_for,
    check_mask_row,
    check_taps,
    compare_tables,
    evaluate_variants,
    lens_agreement,
    rope_variants,
    table_variant,
)
from ...core import compare as C
from ...core.errors import InputError
from ...core.explanation import MIN_GAIN, as_if_verdict, significant_gain
from ...core.settings.run_settings import RunSettings
from .windows import join_verdict, window_section


def summarize(results: list[VariantResult], *, seed: int = 0, min_gain: float = MIN_GAIN) -> dict[str, Any]:
    """Per variant: tau and delta vs the configuration with a paired interval, the share of its walk's blocks
    flagged as repetitive; then the verdict (the rule `run --reference` names a variant by: core/explanation.py)."""
    base = results[0]
    rows = []
    for result in results:
        entry = {"variant": result.variant.name, "tau_macro": result.tau(), "flagged_share": result.flagged_share()}
        if result is not base:
            delta = C.delta_tau_per_prompt(base.per_prompt(), result.per_prompt(), seed=seed)
            same = sum(a == b for pa, pb in zip(base.drafts, result.drafts) for a, b in zip(pa, pb))
            total = sum(len(p) for p in base.drafts)
            entry.update(delta=delta.to_dict(), identical_drafts=same / total if total else None)
        rows.append(entry)
    gains = [(r, res) for r, res in zip(rows[1:], results[1:])
             if significant_gain(r["delta"], min_gain) and res.variant.zero_tap is None]
    tau0 = rows[0]["tau_macro"]
    if gains:
        best, res = max(gains, key=lambda pair: pair[0]["delta"]["estimate"])
        verdict = as_if_verdict(res.variant.bug, tau0, best["tau_macro"], best["delta"])  # core/explanation.py
        finding = res.variant.name
    else:
        unused = [(r, res) for r, res in zip(rows[1:], results[1:])
                  if res.variant.zero_tap is not None and r["identical_drafts"] == 1.0]
        used = [r for r, res in zip(rows[1:], results[1:]) if res.variant.zero_tap is not None and r["identical_drafts"] != 1.0]
        if unused and used:
            names = ", ".join(res.variant.name.split(" zeroed")[0] + res.variant.name.split("zeroed")[1] for _, res in unused)
            verdict = (f"the projection ignores {names}: zeroing it leaves every draft unchanged while zeroing the "
                       f"other taps changes them; trained with that tap missing (fc fed {len(used)} of {len(used) + len(unused)} layers)?")
            finding = unused[0][1].variant.name
        else:
            verdict = f"no mismatch found: no variant beats the configuration (tau {tau0:.2f})"
            finding = None
    return {"variants": rows, "verdict": verdict, "finding": finding}



def logit_lens_check(drafts: list[list[list[int]]], trajectories: list, lens: dict[int, list], num_layers: int,
                     *, seed: int = 0, min_margin: float = 0.05) -> dict[str, Any]:
    """Agreement of the configured drafter's drafts with the logit lens of each of the last target layers.

    drafts[t][j]: trajectory t's anchor j (= prompt_len + j) drafted ids for slots 1..; lens[k][t]: [T] the
    layer-k lens token after every position. Slot i of anchor a agrees with layer k when its draft equals
    the lens token at a + i - 1. Per prompt (slots, agreeing) pairs are compared between the best layer and
    the final one with compare.delta_tau_per_prompt (the mean over prompts of the per-prompt agreement
    rate, paired bootstrap and permutation test). A drafter trained on the final layer's labels agrees with
    it most; one trained on an inner layer's logits peaks there."""
    final = num_layers - 1
    per_layer = {k: lens_agreement(drafts, trajectories, per_traj) for k, per_traj in lens.items()}
    rates = {k: (sum(a for _, a in t.values()) / max(1, sum(n for n, _ in t.values()))) for k, t in per_layer.items()}
    best = max(rates, key=lambda k: (rates[k], k))
    out: dict[str, Any] = {"agreement": {str(k): rates[k] for k in sorted(rates)}, "best_layer": best,
                           "final_layer": final, "finding": None}
    if best != final and final in per_layer:
        delta = C.delta_tau_per_prompt(per_layer[final], per_layer[best], seed=seed)
        out["best_vs_final"] = delta.to_dict()
        if delta.low > 0 and delta.p_value < 0.05 and delta.estimate >= min_margin:
            out["finding"] = (f"behaves as if trained to predict layer {best}'s logits instead of the final layer's: "
                              f"its drafts agree with layer {best}'s logit lens {100 * rates[best]:.1f}% of the time, "
                              f"with the target's real next tokens (layer {final}) {100 * rates[final]:.1f}% "
                              f"({C.paired_figure(delta, 3)}); "
                              "check which hidden states the training labels come from")
    return out


def _context_variants(target, drafter, prompts, inputs, settings, base, final_norm, hidden, reporter) -> list:
    """The configured drafter on continuations made with thinking flipped, and from the raw prompt text
    without the chat template: new continuations (cached) and one more target pass per prompt each. A win
    says how the drafter's training data was made (primer section 7: the commonest cause of "lower than
    the paper")."""
    from ...pipeline.continuations import continuations_for, template_ids
    from ...pipeline.scoring import off_accelerator
    from ...pipeline.trajectories import capture_trajectory

    thinking = inputs.thinking
    flipped = "on" if not thinking else "off"
    groups = [
        ("thinking " + flipped, f"trained with thinking {flipped}", f"with thinking {flipped}",
         "the chat template's enable_thinking flag when the training data was generated (and the target "
         "family's default: on for Qwen3.5/3.6, off for Qwen3)", not thinking, "chat",
         {p.id: template_ids(inputs.tokenizer, p, not thinking) for p in prompts}),
        ("raw prompt (no chat template)", "trained on raw prompt text without the chat template",
         "from the raw prompt text", "whether the training data went through the target's chat template",
         thinking, "raw", {p.id: template_ids(inputs.tokenizer, p, thinking, "raw") for p in prompts}),
    ]
    out = []
    universe = inputs.planned  # the run's plan: a variant's text is `run` with its thinking flag's
    for name, bug, how, check, group_thinking, template, ids in groups:
        with off_accelerator(target, drafter):  # the generation batch counts the target alone (scoring.py)
            texts, _ = continuations_for(target, prompts, ids, settings, group_thinking, None, reporter,
                                         template=template, universe=universe)
        trajectories = None  # the previous group's taps leave host memory before this group's arrive
        # only the drafter's own taps: the one variant scored here reads nothing else (doctor's host memory)
        trajectories = [capture_trajectory(target, p, ids[p.id], texts[p.id], drafter.spec.taps,
                                           sequence_chunk=settings.batching.tap_chunk, offload=True) for p in prompts]
        (result,) = evaluate_variants(drafter, [Variant("as configured", "")], trajectories, final_norm, hidden,
                                      settings.scoring)
        delta = C.delta_tau_per_prompt(base.per_prompt(), result.per_prompt(), seed=settings.seed, common_only=True)
        out.append({"variant": name, "bug": bug, "how": how, "check": check, "tau_macro": result.tau(),
                    "delta": delta.to_dict(), "target_passes": len(prompts), "per_prompt": result.per_prompt()})
    return out


def _with_every_prompt(per_prompt: dict, prompts) -> dict:
    """per_prompt with (0, 0) for a prompt without steps (its continuation ended at once): a table's prompt
    count is then every prompt asked about ("12 of 13 paired"), not only those with steps."""
    return {p.id: tuple(per_prompt.get(p.id, (0, 0))) for p in prompts}


def settings_of_run(settings: RunSettings) -> RunSettings:
    """doctor --out RUN: the run's own settings fill what was not given (its prompts, tokens, thinking, target
    and count, its --final-block, depth buckets and draft window); a given one that differs is refused by name
    (a doctor section computed on other prompts or tokens, or replayed under another rule, would sit in that
    run's report)."""
    from ...core.documents.results import read_run_document
    from ...formats.files import resolve_local_or_cached
    from .windows import run_window_settings

    out = settings.out
    run = read_run_document(out)
    prov = run["provenance"]
    inputs = settings.inputs
    recorded = {"--prompts": prov["prompts"]["source"], "--max-new-tokens": prov["max_new_tokens"],
                "--thinking": prov["enable_thinking"], "--target": prov["target"]["path"]}
    fields = {"--prompts": "prompts", "--max-new-tokens": "max_new_tokens", "--thinking": "thinking", "--target": "target"}
    given = {flag: getattr(inputs, name) if name in inputs.given else None for flag, name in fields.items()}
    if given["--target"] is not None:
        given["--target"] = str(resolve_local_or_cached(given["--target"]).resolve())
        recorded["--target"] = str(Path(recorded["--target"]).resolve())
    for name, value in given.items():
        if value is not None and value != recorded[name]:
            raise InputError(out, f"this run was made with {name} {recorded[name]!r}, doctor was given {value!r}; "
                       "drop the option to use the run's setting, or write doctor elsewhere with another --out")
    count = prov["prompts"]["count"]
    limit = inputs.limit if "limit" in inputs.given else None
    if limit is not None and limit != count:
        raise InputError(out, f"this run has {count} prompts, doctor was given --limit {limit}; drop --limit to use the run's")
    if any(a == "--seed" or a.startswith("--seed=") for a in prov.get("argv", [])):
        raise InputError(out, "this run drew a seeded prompt subset (--seed); doctor --out on it would not see the same "
                   "prompts: write doctor elsewhere")
    final_block = prov.get("final_block", settings.replay.final_block)
    if settings.replay.final_block not in ("shorter", final_block):  # a rule given that is not the run's default
        raise InputError(out, f"this run was made with --final-block {final_block}, doctor was given "
                              f"{settings.replay.final_block!r}; drop the option to use the run's")
    edges, window = run_window_settings(out, run, settings.breakdown.depth_buckets, settings.breakdown.draft_window)
    return settings.with_sections(
        dataclasses.replace(inputs, prompts=recorded["--prompts"], max_new_tokens=recorded["--max-new-tokens"],
                            thinking=recorded["--thinking"], target=recorded["--target"], limit=limit or count),
        dataclasses.replace(settings.replay, final_block=final_block),
        dataclasses.replace(settings.breakdown, depth_buckets=edges, draft_window=window))


DOCTOR_JSON = "doctor.json"


def write_doctor(out: Path, result: dict[str, Any]) -> list[Path]:
    """doctor's files in OUT: doctor.json (recorded among the folder's written files, so `--overwrite` of a
    run folder removes it with the run); when OUT is a run folder, its run.json gains the 'doctor' section and
    its report.html (when it has one) is written again with it (render/html.py)."""
    import json

    from ...core.documents import results as R
    from ...pipeline.run_folder import REPORT_HTML, write_recorded, write_run_html

    out = Path(out)
    written = [write_recorded(out, DOCTOR_JSON, json.dumps(result, indent=1) + "\n")]
    if (out / R.RUN_JSON).exists():
        run = R.read_run_document(out)
        run["doctor"] = result
        R.atomic_write(out / R.RUN_JSON, json.dumps(run, indent=1) + "\n")
        written.append(out / R.RUN_JSON)
        if (out / REPORT_HTML).exists():
            from ...render.html import render_run_html

            written.append(write_run_html(out, render_run_html(run, R.read_samples(out / R.SAMPLES))))
    return written


def run_doctor(settings: RunSettings, reporter=None, *, write: bool = True) -> dict[str, Any]:
    """The `doctor` command as a composition of the run's stages: inputs (one drafter) -> continuations ->
    one trajectory per prompt (taps of every layer any variant reads) -> static checks -> every variant
    scored on the same trajectories -> summary. With `write` the result is written into `settings.out` as
    `dflash-eval doctor --out` writes it (write_doctor), under the folder's lock; when --out holds a run,
    that run's settings fill what was not given (`settings_of_run`) and its report.html is written again with
    the doctor section (`write_doctor`)."""
    from ...core.documents.results import RUN_JSON
    from ...pipeline.run_folder import claimed

    out = settings.output.out if write else None
    if settings.sampling.draft_policy == "both":
        raise InputError(None, "doctor examines one draft policy at a time (--draft-policy sample or argmax)")
    with claimed(out):  # (already held when the CLI took it first: cli/common.claims_out)
        if out is not None and (Path(out) / RUN_JSON).is_file():
            settings = settings_of_run(settings)
        result = _diagnose(settings, reporter)
        if out is not None:
            write_doctor(Path(out), result)
    return result


def _diagnose(settings, reporter=None) -> dict[str, Any]:  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
    """run_doctor's work: the summary, written nowhere."""
    from ...core.progress import Reporter
    from ...model.kernels import kernel_report, torch_fallback_kernels
    from ...model.target import capture_taps, load_target, target_info
    from ...pipeline.continuations import continuations_for
    from ...pipeline.inputs import prepare_inputs
    from ...pipeline.scoring import kernels_context, load_drafters
    from ...pipeline.trajectories import capture_trajectory

    reporter = reporter or Reporter()
    from ...pipeline.turns import answer_earlier_turns

    inputs = answer_earlier_turns(prepare_inputs(settings, one_drafter=True), settings, reporter)  # multi-turn sets
    entry, prompts, target_path, warnings = inputs.entries[0], inputs.prompts, inputs.target_path, inputs.warnings
    reference = inputs.entries[1] if settings.drafters.reference else None
    n_contexts = 2 if settings.doctor.context_variants and settings.sampling.temperature <= 0 else 0
    reporter.note(f"doctor: {len(prompts)} target passes for every variant of the drafter (one per prompt"
                  + (", per sample" if settings.sampling.temperature > 0 else "") + ")"
                  + (f", plus {len(prompts)} for each of {n_contexts} context variants (thinking flipped, raw prompt: "
                     f"new continuations): {len(prompts) * (1 + n_contexts)} in all" if n_contexts else ""))
    info = target_info(target_path)
    target = load_target(str(target_path), device=settings.placement.device, dtype=settings.placement.dtype,
                         allow_accelerated_on_cpu=settings.replay.kernels == "torch")
    spec = entry.spec
    variants = build_variants(spec, info.num_layers)
    target_rope = getattr(target.model.config.get_text_config(), "rope_parameters", None)
    variants += rope_variants(spec, target_rope) + table_variant(spec)
    from .defects import defect_variants, fc_range, fc_variant

    variants += defect_variants(spec, info.num_layers)
    lens_layers = list(range(max(0, info.num_layers - LENS_LAYERS), info.num_layers))
    layers = sorted({t for v in variants for t in (v.taps or spec.taps)} | set(lens_layers)
                    | set(reference.spec.taps if reference else ()))
    ids = inputs.prompt_ids()
    thinking = inputs.thinking
    sampled = settings.sampling.temperature > 0  # every variant's offline estimate on K sampled texts per prompt
    with kernels_context(target, settings):  # --kernels torch generates too, as in `run`: the same cache entries
        if sampled:
            from ...pipeline.continuations import sampled_continuations_for

            texts, _ = sampled_continuations_for(target, prompts, ids, settings, thinking, reporter,
                                                 universe=inputs.planned)
        else:  # the run's generation plan: the same continuations as `run` on these prompts
            greedy, _ = continuations_for(target, prompts, ids, settings, thinking, None, reporter,
                                          universe=inputs.planned)
            texts = {(pid, 0): cont for pid, cont in greedy.items()}

    _check_host_room(target, inputs, settings, prompts, ids, texts, layers, spec)
    trajectories = []
    reporter.phase("target pass", len(texts))
    with kernels_context(target, settings):
        for prompt in prompts:
            for k in range(settings.sampling.samples if sampled else 1):
                trajectories.append(capture_trajectory(target, prompt, ids[prompt.id], texts[(prompt.id, k)], layers,
                                                       sequence_chunk=settings.batching.tap_chunk, keep_hidden=sampled,
                                                       sample=k if sampled else None, offload=True))
                reporter.advance("target pass", prompt.id)
    for traj in trajectories:  # before any drafter runs
        check_taps(traj.taps(spec.taps), spec, info.hidden_size, str(target_path))

    kernels = (_kernel_comparison(target, trajectories[0], layers, torch_fallback_kernels, capture_taps, kernel_report)
               if settings.replay.kernels != "torch" else
               {"compared": False, "detail": "--kernels torch: every pass ran the torch fallback"})
    drafter = load_drafters([entry], target)[entry.name]
    embed = drafter.embed_tokens.weight if spec.embedding_source == "checkpoint" else target.embed_tokens.weight
    mask_row = check_mask_row(embed.detach(), spec.mask_token_id)
    tables = compare_tables(drafter, target)
    fc_facts = fc_range(drafter, trajectories, str(target.dtype).removeprefix("torch."))  # defects.py
    if not sampled:
        variants += fc_variant(fc_facts)
    final_norm = target.model.model.norm
    reporter.phase("variants", len(variants))
    results = []
    for variant in variants:
        results.extend(evaluate_variants(drafter, [variant], trajectories, final_norm, info.hidden_size,
                                         settings.scoring,
                                         settings.sampling if sampled else None, target.lm_head,
                                         tree_budgets=settings.trees.budgets))
        reporter.advance("variants", variant.name)
    summary = summarize(results, seed=settings.seed)
    lens_check = None
    if not sampled:  # the lens compares drafts with the target's argmax: a greedy diagnosis
        from ...model.target import lens_tokens

        lens = {k: [lens_tokens(target, traj.layers[k]) for traj in trajectories] for k in lens_layers}
        lens_check = logit_lens_check(results[0].drafts, trajectories, lens, info.num_layers, seed=settings.seed)
        if lens_check["finding"]:
            summary["verdict"] = (lens_check["finding"] if summary["finding"] is None
                                  else f"{summary['verdict']}; also {lens_check['finding']}")
            summary["finding"] = summary["finding"] or f"labels from layer {lens_check['best_layer']}"
        from ...commands.doctor_norm import run_norm_check

        norm_check = run_norm_check(entry, target, results[0].drafts, trajectories, lens[info.num_layers - 1],
                                    info.num_layers, settings.seed)
        if norm_check and norm_check["finding"]:
            summary["verdict"] = (norm_check["finding"] if summary["finding"] is None
                                  else f"{summary['verdict']}; also {norm_check['finding']}")
            summary["finding"] = summary["finding"] or "teacher final norm x * w"
        summary["norm_convention"] = norm_check
    summary["logit_lens"] = lens_check
    contexts = []
    if not sampled and settings.doctor.context_variants:  # the same drafter on continuations made another way
        contexts = _context_variants(target, drafter, prompts, inputs, settings, results[0], final_norm,
                                     info.hidden_size, reporter)
        summary["context_variants"] = [{k: v for k, v in c.items() if k != "per_prompt"} for c in contexts]
        wins = [c for c in contexts if c["delta"]["low"] > 0 and c["delta"]["p_value"] < 0.05
                and c["delta"]["estimate"] >= 0.1]
        if wins:
            best = max(wins, key=lambda c: c["delta"]["estimate"])
            d = best["delta"]
            text = (f"{best['bug']}: tau {results[0].tau():.2f} -> {best['tau_macro']:.2f} when evaluated on "
                    f"continuations made {best['how']} ({C.paired_figure(d)})")
            gains = [r["delta"]["estimate"] for r in summary["variants"][1:] if r.get("delta")]
            if summary["finding"] is None or d["estimate"] > max(gains, default=0):
                summary["verdict"], summary["finding"] = text, best["variant"]
            else:
                summary["verdict"] = f"{summary['verdict']}; also {text}"
    ref_result = None
    if reference is not None:  # the gap to the reference, and how much of it each variant closes
        from ...core.gap import explain_gap

        ref_drafter = load_drafters([reference], target)[reference.name]
        (ref_result,) = evaluate_variants(ref_drafter, [Variant("as configured", "")], trajectories, final_norm,
                                          info.hidden_size, settings.scoring,
                                          settings.sampling if sampled else None, target.lm_head,
                                          tree_budgets=settings.trees.budgets)
        candidates = [(r.variant.name, r.per_prompt(), r.variant.bug, check_for(r.variant.name))
                      for r in results[1:] if r.variant.zero_tap is None]
        base, ref = _with_every_prompt(results[0].per_prompt(), prompts), _with_every_prompt(ref_result.per_prompt(), prompts)
        # the main table: every variant on the main trajectories, over every prompt (core/gap.py); its tau: on them
        summary["gap"] = {**explain_gap(base, ref, candidates, base_name=entry.name, reference_name=reference.name,
                                        seed=settings.seed), "reference_path": str(reference.path)}
        if contexts:  # new continuations: their own table over their own paired prompts, named, never the main one's
            summary["gap"]["context"] = explain_gap(
                base, ref, [(c["variant"], _with_every_prompt(c["per_prompt"], prompts), c["bug"], c["check"])
                            for c in contexts], base_name=entry.name, reference_name=reference.name, seed=settings.seed)
    from .trees import tree_section

    trees = tree_section(results, ref_result, trajectories, settings.trees.budgets,
                         reference.name if reference is not None else None)
    if trees:
        summary["trees"] = trees
    windows = window_section(drafter, trajectories, results, ref_result, settings, final_norm, info.hidden_size,
                             reporter, reference.name if reference is not None else None)  # by depth
    if windows:
        summary["windows"] = windows
        join_verdict(summary, windows)
    trained_passes = {}
    if settings.doctor.trained_taps is not None:  # the training run's own taps (trained_taps.py)
        from .trained_taps import trained_taps_section

        before = target.tap_passes
        trained_taps_section(summary, entry, target, settings, reporter)
        trained_passes = {"trained taps": target.tap_passes - before}
    if settings.second_target.serving_target is not None:  # the drop to the copy served, split (commands/serving_target.py)
        from ...commands.serving_target import serving_target_section

        summary["serving_target"] = serving_target_section(settings, inputs, target, {entry.name: drafter}, reporter)
        split = summary["serving_target"]["drafters"][0]
        drop = split.get("drop") or {}
        if drop and (drop["low"] > 0 or drop["high"] < 0):  # a drop beyond noise joins the one verdict
            summary["verdict"] = f"{summary['verdict']}; also {split['verdict']}"
    if sampled:
        from ...core.estimates import DEFINITION

        summary["verdict"] = "ESTIMATE: " + summary["verdict"]
        summary["estimate"] = {"definition": DEFINITION, "sampling": {**settings.sampling.to_dict(),
                                                                       "samples": settings.sampling.samples, "seed": settings.seed}}
    return {"drafter": entry.name, "path": str(entry.path), "target": str(target_path), "prompts": len(prompts),
            "tap_passes": target.tap_passes,
            "passes": {"variants": len(trajectories), **{c["variant"]: c["target_passes"] for c in contexts},
                       **trained_passes},
            "mask_row": mask_row, "tables": tables, "fc_range": fc_facts, "kernels": kernels, "warnings": warnings,
            "thinking": thinking, "max_new_tokens": settings.inputs.max_new_tokens, **summary}


def _check_host_room(target, inputs, settings, prompts, ids, texts, layers, spec) -> None:
    """Refused by name before the target pass: trajectories that would not fit in this machine's available
    memory (`doctor_host_bytes`, the figure `plan --doctor` shows: the base trajectories at their real
    lengths, a context variant's at its prompt + --max-new-tokens), naming the option that fits."""
    from ...pipeline.continuations import template_ids
    from ...pipeline.trajectories import doctor_host_bytes, doctor_host_fix, host_memory

    machine = host_memory()
    if machine is None:
        return
    samples = settings.sampling.samples if settings.sampling.temperature > 0 else 1
    base = [len(ids[p.id]) + len(texts[(p.id, k)]) for p in prompts for k in range(samples)]
    context = [max(len(template_ids(inputs.tokenizer, p, not inputs.thinking)),
                   len(template_ids(inputs.tokenizer, p, inputs.thinking, "raw"))) + settings.inputs.max_new_tokens
               for p in prompts] if settings.doctor.context_variants and samples == 1 and settings.sampling.temperature <= 0 else []
    element, hidden = target.dtype.itemsize, target.info.hidden_size  # the taps' element size and width
    needed = doctor_host_bytes(sum(base), len(layers), sum(context), len(spec.taps), hidden, element)
    available = machine[1]
    if needed > available:
        fix = doctor_host_fix(base, context, len(layers), len(spec.taps), hidden, available, samples=samples,
                              element=element)
        raise InputError(None, f"doctor's trajectories need {needed / 2**30:,.1f} GiB of host memory ({len(layers)} target "
                               f"layers of {len(base)} sequences{', and a context variant' if context else ''}), and "
                               f"this machine has {available / 2**30:,.1f} GiB available; "
                               + (f"give {fix}" if fix else "no single option fits: use a machine with more memory")
                               + " (`dflash-eval plan --doctor` shows the figure before a run)")


def _kernel_comparison(target, trajectory, layers, fallback_ctx, capture_taps, kernel_report) -> dict[str, Any]:
    """On GPU with fla bound: the same taps through the torch fallback, per layer, and greedy agreement."""
    report = kernel_report(target.model)
    if not any(k.accelerated for k in report):
        return {"compared": False, "detail": "no accelerated Gated-DeltaNet kernels bound (dense target or torch fallback)"}
    with fallback_ctx(target.model):
        fallback = capture_taps(target, trajectory.tokens, layers)
    target.tap_passes -= 1  # a diagnostic re-run of one prompt, not a tap pass of the evaluation
    fla = trajectory.taps(layers)
    H = target.info.hidden_size
    per_layer = {}
    for k, t in enumerate(layers):
        a, b = fla[:, k * H:(k + 1) * H].float(), fallback.taps[:, k * H:(k + 1) * H].float()
        per_layer[str(t)] = {"max_abs": float((a - b).abs().max()),
                             "max_rel": float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))}
    agree = float((fallback.greedy == trajectory.greedy).float().mean())
    return {"compared": True, "per_layer": per_layer, "greedy_agreement": agree}
