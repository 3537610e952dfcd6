"""Stage 0, inputs: everything a run (or doctor) is given, resolved and validated before any output folder
is touched or any model is loaded: drafter checkpoints (names unique, specs checked against the target's
config, `--semantics` applied), the target's tokenizer and chat template, the prompts (each within the
target's positions), the thinking flag and where it came from, `--responses`, and the settings digest
the run folder is keyed by. The result, `Inputs`, is what the later stages read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.options import RunOptions
from ..core.spec import DrafterSpec
from ..formats.checkpoints import checked_spec, read_spec
from ..formats.files import checkpoint_fingerprint, resolve_local_or_cached, target_content
from ..formats.validation import check_target_files
from .long_prompts import run_prompts
from .prompts import Prompt, parse_shard, prompt_ids, shard_prompts
from .responses import responses_for
from .thinking import target_thinking, thinking_default, thinking_source  # noqa: F401  (re-exported)


@dataclass
class DrafterEntry:
    name: str
    path: Path
    spec: DrafterSpec
    draft_policy: str | None = None  # with --draft-policy both: this entry's policy (NAME@sample, NAME@argmax)


def split_draft_policies(entries: list[DrafterEntry]) -> list[DrafterEntry]:
    """`--draft-policy both`: every drafter twice, as NAME@sample and NAME@argmax, side by side in one run
    (the same prompts and random streams), since the policy is a serving decision users must make."""
    return [DrafterEntry(f"{e.name}@{policy}", e.path, e.spec, policy) for e in entries
            for policy in ("sample", "argmax")]


def split_name(value: str) -> tuple[str, str | None]:
    """"PATH:NAME" -> (PATH, NAME); a bare path keeps its folder name."""
    head, sep, tail = value.rpartition(":")
    if sep and head and "/" not in tail and not Path(value).exists():
        return head, tail
    return value, None


def reference_value(value: str) -> tuple[str, str | None]:
    """--reference as --drafter reads its value: "z-lab", "z-lab:NAME", PATH or PATH:NAME (`split_name`)."""
    if value == "z-lab" or value.startswith("z-lab:") and not Path(value).exists():
        return "z-lab", value.partition(":")[2] or None
    return split_name(value)


def reference_name(options: RunOptions, entries: list[DrafterEntry]) -> str | None:
    """The reference's name in the results (the last entry, given by --reference), None without one."""
    return entries[-1].name if options.reference and entries and options.draft_policy != "both" else None


def apply_semantics_overrides(entries: list[DrafterEntry], overrides: list[str]) -> None:
    """`--semantics RULES` (every drafter) or `--semantics NAME=RULES` (one); refused by name when unknown."""
    from ..core.semantics import SEMANTICS, apply_semantics

    by_name: dict[str, str] = {}
    given: dict[str, str] = {}  # drafter -> the --semantics value that set its rules
    for value in overrides:
        name, sep, rules = value.rpartition("=")
        if rules not in SEMANTICS:
            raise InputError(None, f"--semantics {value!r}: unknown rules {rules!r} (choose from {', '.join(SEMANTICS)})")
        names = [e.name for e in entries]
        if sep and name not in names:
            raise InputError(None, f"--semantics {value!r}: no drafter named {name!r} (drafters: {', '.join(names)})")
        for entry in entries:
            if not sep or entry.name == name:
                if entry.name in by_name and by_name[entry.name] != rules:  # the last would win: refused
                    raise InputError(None, f"--semantics {given[entry.name]!r} and --semantics {value!r} give drafter "
                                           f"{entry.name!r} two rule sets; give one")
                by_name[entry.name], given[entry.name] = rules, value
    for entry in entries:
        if entry.name in by_name:
            entry.spec = apply_semantics(entry.spec, by_name[entry.name], f"override: --semantics {by_name[entry.name]}")


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


def thinking_warnings(entries: list[DrafterEntry], thinking: bool, defaulted: bool, model_type: str) -> list[str]:
    """A drafter known to be trained with the other thinking setting gets a warning (terminal and HTML):
    a drafter trained without thinking, evaluated on thinking traces, scores far lower for no fault of its own."""
    from ..formats.references import zlab_trained_thinking

    out = []
    for entry in entries:
        trained = zlab_trained_thinking(_repo_id_of(entry.path))  # None unless the registry knows the repo
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


def resolve_drafters(options: RunOptions, read=read_spec) -> tuple[list[DrafterEntry], Path, list[str]]:
    """Drafter folders, names and the target folder (given, or recorded by the drafters). `read(path)`: a
    checkpoint's (spec, weights, owners); preflight passes a reader of the recorded verifier alone."""
    from ..formats.references import resolve_recorded_verifier, resolve_zlab_reference, verifier_warning

    warnings: list[str] = []
    entries: list[DrafterEntry] = []
    explicit: set[int] = set()  # indices of entries named with :NAME
    for value in options.drafters:
        raw, name = split_name(value)
        path = resolve_local_or_cached(raw)
        spec, _, _ = read(path)
        if name is not None:
            explicit.add(len(entries))
        entries.append(DrafterEntry(name or path.name, path, spec))
    _unique_names(entries, explicit)  # before anything else can fail: a name clash is the user's first fix
    recorded = {entry.name: resolve_recorded_verifier(entry.path, entry.spec.verifier).resolve()
                for entry in entries if entry.spec.verifier and options.target is None}
    if options.target is not None:  # an explicit --target wins; a recorded verifier only earns a warning
        target_path = resolve_local_or_cached(options.target).resolve()
        warnings.extend(w for w in (verifier_warning(e.path, e.spec.verifier, e.name, target_path, options.cache_dir)
                                    for e in entries if e.spec.verifier) if w)
    elif recorded:
        distinct = set(recorded.values())
        if len(distinct) > 1:
            raise InputError(None, "drafters record different verifiers (" + ", ".join(
                f"{n}: {v}" for n, v in recorded.items()) + "); pass --target")
        target_path = distinct.pop()
    else:
        raise InputError(None, "no --target given and no drafter records its verifier")
    if options.reference:
        raw, name = reference_value(options.reference)
        ref = resolve_zlab_reference(options.target or str(target_path)) if raw == "z-lab" else resolve_local_or_cached(raw)
        spec, _, _ = read(ref)
        if raw == "z-lab" or name is not None:
            explicit.add(len(entries))
        entries.append(DrafterEntry(name or ("z-lab" if raw == "z-lab" else ref.name), ref, spec))
    _unique_names(entries, explicit)
    return entries, target_path, warnings




@dataclass(frozen=True)
class Resolved:
    """The raw options that need parsing, parsed once (`check_options`): later stages read these values and
    never parse or validate the raw strings again."""

    device: str  # "cpu", "cuda", "cuda:1" (from --device auto|...)
    dtype: str  # "float32" or "bfloat16" (from --dtype auto|...)
    shard: tuple[int, int] | None  # (index, count) from --shard I/N
    device_map: str | None
    max_memory: dict | None  # accelerate's max_memory from --max-memory

    def placement(self) -> dict:
        """load_target's device_map / max_memory keywords (empty: one device)."""
        return {"device_map": self.device_map, "max_memory": self.max_memory} if self.device_map else {}


@dataclass
class Inputs:
    """A run's resolved inputs (stage 0's output)."""

    entries: list[DrafterEntry]
    target_path: Path
    model_type: str
    prompts: list[Prompt]
    thinking: bool
    tokenizer: Any
    responses: dict[str, list[int]] | None
    warnings: list[str] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)
    _ids: dict[str, list[int]] | None = field(default=None, repr=False)
    all_prompts: list[Prompt] | None = None  # with --shard: every prompt of the run, of which `prompts` is a shard
    resolved: Resolved | None = None  # the parsed options (device, dtype, shard, placement)
    # content fingerprints of every file a result depends on besides the drafters (`content_fingerprints`)
    content: dict[str, str | None] = field(default_factory=dict)

    def prompt_ids(self) -> dict[str, list[int]]:
        """Every prompt through the target's chat template: tokenized once, the ids the length check saw."""
        if self._ids is None:
            self._ids = {p.id: prompt_ids(self.tokenizer, p, self.thinking) for p in self.prompts}
        return self._ids

    def settings(self, options: RunOptions) -> dict[str, Any]:
        """What a run folder's results depend on: resuming is allowed only with equal settings."""
        from ..model.sampling import sampling_of

        return {
            "target": str(self.target_path), "drafters": self.fingerprints, "max_new_tokens": options.max_new_tokens,
            "thinking": self.thinking, "mode": options.mode, "final_block": options.final_block,
            "prompts": [[p.id, p.text, p.set] for p in self.prompts], "device": options.device, "dtype": options.dtype,
            "responses": str(options.responses) if options.responses else None, "kernels": options.kernels,
            "tap_chunk": options.batching.tap_chunk, **({"draft_window": options.breakdown.draft_window} if options.breakdown.draft_window else {}),
            "semantics": {e.name: e.spec.semantics for e in self.entries},
            **({"explain": True} if options.explains_gap() else {}),  # rows carry the variants (commands/explain.py)
            **self.content,  # target weights/config, tokenizer, chat template, responses: by content
            **({"sampling": {**sampling_of(options).to_dict(), "samples": options.samples, "seed": options.seed}}
               if options.temperature > 0 else {}),
            # a shard's folder knows the whole run it belongs to: `merge` checks the shards against it
            **({"shard": {**dict(zip(("index", "count"), self.resolved.shard)), "seed": options.seed,
                          "all_prompts": [[p.id, p.text, p.set] for p in self.all_prompts]}}
               if options.shard else {}),
        }


MAX_SAMPLES = 1024  # sampled continuations per prompt: far past where a prompt-level interval stops narrowing
MIN_TEMPERATURE = 1e-30  # float32 logits / temperature stay finite for |logit| < 3e8 (1e-45: inf, then NaN)


def check_sampling_numbers(options: RunOptions) -> None:
    """--temperature / --top-p finite and in range: NaN compares false everywhere (it ran greedy and wrote NaN
    into run.json), inf flattens every distribution, a denormal temperature overflows the logits."""
    import math

    t = options.temperature
    if not math.isfinite(t):
        raise InputError(None, f"--temperature must be a finite number (got {t})")
    if 0 < t < MIN_TEMPERATURE:
        raise InputError(None, f"--temperature {t:g} is below {MIN_TEMPERATURE:g}, where logits / temperature "
                               "overflow; use --temperature 0 for greedy decoding")
    if not math.isfinite(options.top_p):
        raise InputError(None, f"--top-p must be a finite number in (0, 1] (got {options.top_p})")


def check_options(options: RunOptions) -> Resolved:
    """Option values refused by name before anything else runs; returns the parsed values."""
    from ..model.target import resolve_device, resolve_dtype

    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    options.replay.check()  # --mode, --final-block, --kernels (core/options_run.py)
    from ..model.sampling import sampling_of

    check_sampling_numbers(options)
    sampling_of(options).check()
    options.output.check()  # --cache-dir (core/options_output.py)
    options.trees.check_with(options.temperature, options.mode)  # --tree-budgets (core/options_work.py Trees)
    shard = parse_shard(options.shard) if options.shard is not None else None
    options.placement.check()  # --device-map, --max-memory (core/options_run.py)
    max_memory = options.placement.memory
    if not 1 <= options.samples <= MAX_SAMPLES:
        raise InputError(None, f"--samples must be 1 to {MAX_SAMPLES} (got {options.samples})")
    if options.temperature <= 0 and options.samples > 1:
        raise InputError(None, "--samples > 1 needs --temperature > 0 (greedy decoding is deterministic)")
    if options.draft_policy == "both" and options.temperature <= 0:
        raise InputError(None, "--draft-policy both compares the policies at temperature > 0; give --temperature")
    if options.temperature > 0 and options.responses is not None:
        raise InputError(None, "--responses are fixed continuations; they cannot be combined with --temperature > 0")
    options.breakdown.check()  # --depth-buckets, --draft-window (core/options_work.py)
    options.second_target.check()  # --serving-target (core/options_inputs.py)
    refused = options.second_target.refusal(temperature=options.temperature, mode=options.mode, shard=options.shard,
                                            responses=options.responses)
    if refused:
        raise InputError(None, refused)
    engines = [v for v in options.semantics if v.rpartition("=")[2] in ("sglang", "llamacpp")]
    if engines and options.temperature > 0:  # core/engine_rules.py: greedy serving only
        raise InputError(None, f"--semantics {engines[0]}: that engine's verification at temperature > 0 is not "
                               "modelled (greedy only)")
    return Resolved(str(device), str(dtype).removeprefix("torch."), shard, options.device_map, max_memory)


def with_one_drafter(base: Inputs, options: RunOptions, path: Path, name: str, info) -> Inputs:
    """`base` (target, prompts, tokenizer, thinking) with one more checkpoint as its only drafter: what
    `run --drafter PATH` resolves for it, validated the same way (the tracker's view of each checkpoint)."""
    spec, _, _ = read_spec(path)
    entry = DrafterEntry(name, path, spec)
    entry.spec, _ = checked_spec(path, info)
    apply_semantics_overrides([entry], options.semantics)
    from ..formats.references import verifier_warning

    warnings: list[str] = assumed_defaults([entry])  # base's warnings are about its own drafters, not this one
    if spec.verifier:
        warning = verifier_warning(path, spec.verifier, name, base.target_path, options.cache_dir)
        if warning:
            warnings.append(warning)
    warnings.extend(thinking_warnings([entry], base.thinking, options.thinking is None, base.model_type))
    return Inputs([entry], base.target_path, base.model_type, base.prompts, base.thinking, base.tokenizer,
                  base.responses, warnings, {name: checkpoint_fingerprint(path)}, base._ids, resolved=base.resolved,
                  content=base.content)


def assumed_defaults(entries: list[DrafterEntry]) -> list[str]:
    """Every drafter key its format's own code defaults when absent (z-lab's tap rule, MuseGlimmerAssistantConfig's
    and DFlash2SpeculatorConfig's class defaults), the value assumed: a warning in the terminal and the report
    (provenance.warnings), never silent. A key whose reference has no default (z-lab's block_size) is refused
    by its reader instead (formats/checkpoints.py)."""
    return [f"drafter {e.name}: {note} assumed" for e in entries for note in e.spec.config_notes if " absent: " in note]


def prepare_inputs(options: RunOptions, *, one_drafter: bool = False) -> Inputs:
    """Resolve and validate everything; nothing is written and no model is loaded."""
    from ..model.target import check_prompt_lengths, load_tokenizer, target_info

    resolved = check_options(options)
    entries, target_path, warnings = resolve_drafters(options)
    if one_drafter and len(entries) != 1 + bool(options.reference):
        raise InputError(None, "doctor examines one drafter at a time")
    check_target_files(target_path)
    info = target_info(target_path)
    for entry in entries:  # validate every drafter against the target before anything is written
        entry.spec, _ = checked_spec(entry.path, info)
    apply_semantics_overrides(entries, options.semantics)
    warnings.extend(assumed_defaults(entries))
    if options.draft_policy == "both":
        entries = split_draft_policies(entries)
    model_type = json.loads((target_path / "config.json").read_text()).get("model_type", "")
    if options.serving_target is not None:  # a copy of this target, checked before anything is written
        from ..model.serving_target import check_copy

        check_copy(options.serving_target, model_type, info)
    thinking, _ = target_thinking(target_path, options.thinking)
    warnings.extend(thinking_warnings(entries, thinking, options.thinking is None, model_type))
    tokenizer = load_tokenizer(target_path)  # the target is validated like the drafters, before any write
    prompts = run_prompts(options, tokenizer, thinking, target_path, warnings)  # repo:, stdlib: long_prompts.py
    inputs = Inputs(entries, target_path, model_type, prompts, thinking, tokenizer, None, warnings, resolved=resolved)
    check_prompt_lengths(target_path, {k: len(v) for k, v in inputs.prompt_ids().items()}, options.max_new_tokens)
    if resolved.shard:
        index, count = resolved.shard
        cost = {k: len(v) + options.max_new_tokens for k, v in inputs.prompt_ids().items()}
        inputs.all_prompts = prompts
        inputs.prompts = shard_prompts(prompts, cost, index, count)
    if options.responses:
        inputs.responses, said = responses_for(options.responses, tokenizer, info.vocab_size, [p.id for p in prompts])
        warnings.extend(said)
    inputs.fingerprints = {e.name: checkpoint_fingerprint(e.path) for e in entries}
    inputs.content = target_content(target_path, options.responses, tokenizer.chat_template, options.cache_dir)
    return inputs
