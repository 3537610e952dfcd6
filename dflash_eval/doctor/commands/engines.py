"""`doctor --engines`: one drafter under every engine's reading of its checkpoint, on the same trajectories.

A drafter that accepts 5.5 on vLLM and 3 on llama.cpp (z-lab/dflash #170) is one set of weights read five
ways: z-lab's and speculators' trainers, vLLM, SGLang and llama.cpp each derive the attention, the RoPE
and the logit scales from the config by their own rules (core/semantics.py, core/engine_rules.py). Here
one target pass per prompt feeds every reading: tau per engine, each paired over prompts against the
checkpoint's own rules (its format's default, or `--semantics`), and for every engine that differs, each
of its rules switched alone on top of the checkpoint's own, so the table says which rule moves tau:

| rule | what differs between engines |
|---|---|
| in-block causality | which layers see later slots of their block (is_causal, dflash_config.causal, the kind) |
| window | where a sliding window is measured from (anchor, query, query and left only) |
| logit scales | z-lab's input_embedding_scale / output_multiplier / softcap, read by z-lab alone |
| RoPE | the rotary dims (partial_rotary_factor, rope_dim) |
| final block | vLLM drafts full blocks up to the length cap |

An engine whose rules cannot be reproduced for this checkpoint is listed with the reason it is refused,
never scored. Greedy only (the engines' sampled verification is not modelled for all of them).
"""

from __future__ import annotations

from typing import Any

from ...commands.variants import Variant, check_taps, evaluate_variants
from ...core import compare as C
from ...core.engine_readings import NAMES, RULES, describe_rule, engine_specs, rule_values, switched
from ...core.errors import InputError
from ...core.spec import DrafterSpec


def _paired(base, result, seed: int) -> dict[str, Any]:
    return C.delta_tau_per_prompt(base.per_prompt(), result.per_prompt(), seed=seed).to_dict()


def _significant(delta: dict[str, Any]) -> bool:
    """Beyond noise: an interval that excludes 0 and p < 0.05, over enough pairs to say so (compare.Delta)."""
    if C.Delta(0, 0, 0, 1, delta.get("n") or 0).too_few:
        return False
    return delta["p_value"] < 0.05 and (delta["low"] > 0 or delta["high"] < 0)


def compare_engines(drafter, base: DrafterSpec, trajectories: list, final_norm, hidden: int, scoring,
                    seed: int = 0) -> dict[str, Any]:
    """Every engine's tau on these trajectories, paired against `base`, and each differing rule alone."""
    scored: dict[tuple, Any] = {}

    def score(spec: DrafterSpec, name: str):
        key = (spec.layers, spec.embedding_scale, spec.output_multiplier, spec.logit_softcap,
               rule_values(spec)["RoPE"], rule_values(spec)["final block"])
        if key not in scored:
            (scored[key],) = evaluate_variants(drafter, [Variant(name, "", spec=spec)], trajectories, final_norm,
                                               hidden, scoring)
        return scored[key]

    own = score(base, "checkpoint's rules")
    rows, results = [], {}
    for engine, spec in engine_specs(base).items():
        row: dict[str, Any] = {"engine": engine, "name": NAMES[engine]}
        if isinstance(spec, str):
            rows.append({**row, "refused": spec})
            continue
        result = results[engine] = score(spec, engine)
        row.update(tau_macro=result.tau(), causality=spec.causality_source,
                   differs=[r for r in RULES if rule_values(spec)[r] != rule_values(base)[r]])
        if row["differs"]:
            row["delta"] = _paired(own, result, seed)
            row["rules"] = []
            for rule in row["differs"]:
                alone = score(switched(base, spec, rule), f"{engine}: {rule} alone")
                row["rules"].append({"rule": rule, "engine_reads": describe_rule(spec, rule),
                                     "checkpoint_reads": describe_rule(base, rule), "tau_macro": alone.tau(),
                                     "delta": _paired(own, alone, seed)})
            row["responsible"] = responsible(row)
        rows.append(row)
    pairs = []
    names = list(results)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if results[a] is not results[b]:
                pairs.append({"a": a, "b": b, "delta": _paired(results[a], results[b], seed)})
    return {"base": {"semantics": base.semantics, "source": base.semantics_source, "tau_macro": own.tau(),
                     "causality": base.causality_source},
            "engines": rows, "pairs": pairs, "evaluations": len(scored)}


def responsible(row: dict[str, Any]) -> str:
    """The sentence naming the rule(s) behind an engine's difference from the checkpoint's own rules."""
    figure = C.paired_figure(row["delta"], 3)
    if not _significant(row["delta"]):
        return f"{row['name']} reads {', '.join(row['differs'])} differently; tau {figure}: within noise"
    moving = sorted((r for r in row["rules"] if _significant(r["delta"])), key=lambda r: -abs(r["delta"]["estimate"]))
    if not moving:
        return (f"{row['name']}: tau {figure}, from {', '.join(row['differs'])} together (no rule alone moves it "
                "beyond noise)")
    top = moving[0]
    return (f"{row['name']}: tau {figure}; {top['rule']} alone moves it {top['delta']['estimate']:+.3f} "
            f"({NAMES[row['engine']]}: {top['engine_reads']}; the checkpoint's rules: {top['checkpoint_reads']})")


ENGINES_JSON = "engines.json"


def run_engines(settings, reporter=None, *, write: bool = True) -> dict[str, Any]:
    """`doctor --engines`: `_engines`' result, with `write` also written to --out/engines.json (recorded among
    the folder's written files, under its lock), as `dflash-eval doctor --engines --out` leaves it."""
    import json

    from ...pipeline.run_folder import claimed, write_recorded

    out = settings.output.out if write else None
    if settings.doctor.trained_taps is not None or settings.second_target.serving_target is not None:
        raise InputError(None, "--engines and --trained-taps (or --serving-target) are two doctors: run them one "
                               "at a time")
    with claimed(out):
        result = _engines(settings, reporter)
        if out is not None:
            write_recorded(out, ENGINES_JSON, json.dumps(result, indent=1) + "\n")
    return result


def _engines(settings, reporter=None) -> dict[str, Any]:
    """The composition: inputs (one drafter) -> continuations -> one trajectory per prompt -> every engine's
    reading scored on them."""
    from ...core.progress import Reporter
    from ...model.target import load_target, target_info
    from ...pipeline.continuations import continuations_for
    from ...pipeline.inputs import prepare_inputs
    from ...pipeline.scoring import kernels_context, load_drafters
    from ...pipeline.trajectories import capture_trajectory

    if settings.sampling.temperature > 0:
        raise InputError(None, "doctor --engines compares greedy readings (temperature 0): the engines' sampled "
                               "verification is not modelled for all of them")
    if settings.drafters.reference:
        raise InputError(None, "doctor --engines examines one drafter; drop --reference")
    reporter = reporter or Reporter()
    inputs = prepare_inputs(settings, one_drafter=True)
    entry, prompts = inputs.entries[0], inputs.prompts
    info = target_info(inputs.target_path)
    target = load_target(str(inputs.target_path), device=settings.placement.device, dtype=settings.placement.dtype,
                         allow_accelerated_on_cpu=settings.replay.kernels == "torch")
    reporter.note(f"doctor --engines: {len(prompts)} target passes, then the drafter under each engine's rules")
    ids = inputs.prompt_ids()
    trajectories = []
    with kernels_context(target, settings):  # --kernels torch generates too, as in `run`
        texts, _ = continuations_for(target, prompts, ids, settings, inputs.thinking, None, reporter,
                                     universe=inputs.planned)
        for prompt in prompts:
            trajectories.append(capture_trajectory(target, prompt, ids[prompt.id], texts[prompt.id],
                                                   sorted(set(entry.spec.taps)), sequence_chunk=settings.batching.tap_chunk,
                                                   offload=True))
    for traj in trajectories:
        check_taps(traj.taps(entry.spec.taps), entry.spec, info.hidden_size, str(inputs.target_path))
    drafter = load_drafters([entry], target)[entry.name]
    result = compare_engines(drafter, entry.spec, trajectories, target.model.model.norm, info.hidden_size,
                             settings.scoring, seed=settings.seed)
    return {"kind": "dflash-eval doctor --engines", "drafter": entry.name, "path": str(entry.path),
            "format": entry.spec.format, "dflash2": entry.spec.is_dflash2, "target": str(inputs.target_path),
            "prompts": len(prompts), "tap_passes": target.tap_passes, "thinking": inputs.thinking,
            "max_new_tokens": settings.inputs.max_new_tokens, **result}
