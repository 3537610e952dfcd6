"""Stage `inputs` (prompts -> inputs -> run_folder): everything a run (or doctor) is given, resolved and validated
before any output folder is touched or any model is loaded: drafter checkpoints (names unique, specs checked against
the target's config, `--semantics` applied), the target's tokenizer and chat template, the prompts (each within the
target's positions), the thinking flag and where it came from, `--responses`, and the settings digest the run folder
is keyed by. The result, `Inputs`, is what the later stages read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.settings.execution import Placed
from ..core.settings.run_settings import RunSettings
from ..core.spec import DrafterSpec
from ..formats.checkpoints import checked_spec, read_spec
from ..formats.files import checkpoint_fingerprint, resolve_local_or_cached, target_content
from ..formats.validation import check_target_files
from .long_prompts import run_prompts
from .prompts import Prompt, prompt_ids, shard_prompts
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


def reference_name(settings: RunSettings, entries: list[DrafterEntry]) -> str | None:
    """The reference's name in the results (the last entry, given by --reference), None without one."""
    return (entries[-1].name if settings.drafters.reference and entries and settings.sampling.draft_policy != "both"
            else None)


def apply_semantics_overrides(entries: list[DrafterEntry], overrides: Sequence[str]) -> None:
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


def resolve_drafters(settings: RunSettings, read=read_spec) -> tuple[list[DrafterEntry], Path, list[str]]:
    """Drafter folders, names and the target folder (given, or recorded by the drafters). `read(path)`: a
    checkpoint's (spec, weights, owners); preflight passes a reader of the recorded verifier alone."""
    from ..formats.references import resolve_recorded_verifier, resolve_zlab_reference, verifier_warning

    warnings: list[str] = []
    entries: list[DrafterEntry] = []
    explicit: set[int] = set()  # indices of entries named with :NAME
    target, cache = settings.inputs.target, settings.output.cache
    for value in settings.drafters.drafters:
        raw, name = split_name(value)
        path = resolve_local_or_cached(raw)
        spec, _, _ = read(path)
        if name is not None:
            explicit.add(len(entries))
        entries.append(DrafterEntry(name or path.name, path, spec))
    _unique_names(entries, explicit)  # before anything else can fail: a name clash is the user's first fix
    recorded = {entry.name: resolve_recorded_verifier(entry.path, entry.spec.verifier).resolve()
                for entry in entries if entry.spec.verifier and target is None}
    if target is not None:  # an explicit --target wins; a recorded verifier only earns a warning
        target_path = resolve_local_or_cached(target).resolve()
        warnings.extend(w for w in (verifier_warning(e.path, e.spec.verifier, e.name, target_path, cache)
                                    for e in entries if e.spec.verifier) if w)
    elif recorded:
        distinct = set(recorded.values())
        if len(distinct) > 1:
            raise InputError(None, "drafters record different verifiers (" + ", ".join(
                f"{n}: {v}" for n, v in recorded.items()) + "); pass --target")
        target_path = distinct.pop()
    else:
        raise InputError(None, "no --target given and no drafter records its verifier")
    if settings.drafters.reference:
        raw, name = reference_value(settings.drafters.reference)
        ref = resolve_zlab_reference(target or str(target_path)) if raw == "z-lab" else resolve_local_or_cached(raw)
        spec, _, _ = read(ref)
        if raw == "z-lab" or name is not None:
            explicit.add(len(entries))
        entries.append(DrafterEntry(name or ("z-lab" if raw == "z-lab" else ref.name), ref, spec))
    _unique_names(entries, explicit)
    return entries, target_path, warnings




@dataclass
class Inputs:
    """A run's resolved inputs (this stage's output)."""

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
    placed: Placed | None = None  # the placement parsed (shard, device map): core/settings/execution.Placement.resolve
    # content fingerprints of every file a result depends on besides the drafters (`content_fingerprints`)
    content: dict[str, str | None] = field(default_factory=dict)
    # the prompt set generation plans its batches over (continuations._whole_plan): the run's prompts after
    # --limit / --seed, before --shard, torchrun's split or a resume, so every shard, rank or resume gets the same
    # companions; a multi-turn set's whole set once its earlier turns are answered (turns.py)
    planned: list[Prompt] | None = None
    dataset: dict[str, Any] | None = None  # a Hugging Face cache source's provenance (hf_prompts.py): run.json's

    def prompt_ids(self) -> dict[str, list[int]]:
        """Every prompt through the target's chat template: tokenized once, the ids the length check saw."""
        if self._ids is None:
            self._ids = {p.id: prompt_ids(self.tokenizer, p, self.thinking) for p in self.prompts}
        return self._ids

    def settings(self, settings: RunSettings) -> dict[str, Any]:
        """What a run folder's results depend on: resuming is allowed only with equal settings."""
        inputs, replay, sampling = settings.inputs, settings.replay, settings.sampling
        window = settings.breakdown.draft_window
        # a shard's folder knows the whole run it belongs to: `merge` checks the shards against it
        shard: dict[str, Any] = {}
        if self.placed is not None and self.placed.shard:
            assert self.all_prompts is not None  # prepare_inputs keeps every prompt of the run with --shard
            shard = {"shard": {**dict(zip(("index", "count"), self.placed.shard)), "seed": settings.seed,
                               "all_prompts": [[p.id, p.text, p.set] for p in self.all_prompts]}}
        return {
            "target": str(self.target_path), "drafters": self.fingerprints, "max_new_tokens": inputs.max_new_tokens,
            "thinking": self.thinking, "mode": replay.mode, "final_block": replay.final_block,
            "prompts": [[p.id, p.text, p.set] for p in self.prompts], "device": settings.placement.device,
            "dtype": settings.placement.dtype, "responses": str(inputs.responses) if inputs.responses else None,
            "kernels": replay.kernels, "tap_chunk": settings.batching.tap_chunk,
            **({"draft_window": window} if window else {}),
            "semantics": {e.name: e.spec.semantics for e in self.entries},
            **({"explain": True} if settings.explains_gap() else {}),  # rows carry the variants (commands/explain.py)
            **self.content,  # target weights/config, tokenizer, chat template, responses: by content
            **({"sampling": {**sampling.to_dict(), "samples": sampling.samples, "seed": settings.seed}}
               if sampling.temperature > 0 else {}),
            **shard,
        }


def check_settings(settings: RunSettings) -> Placed:
    """Every rule of the settings (`RunSettings.check`), then what only this machine can say (the device
    exists); returns the placement parsed."""
    from ..model.target import resolve_device, resolve_dtype

    settings.check()
    resolve_dtype(settings.placement.dtype, resolve_device(settings.placement.device))
    return settings.placement.resolve()


def with_one_drafter(base: Inputs, settings: RunSettings, path: Path, name: str, info) -> Inputs:
    """`base` (target, prompts, tokenizer, thinking) with one more checkpoint as its only drafter: what
    `run --drafter PATH` resolves for it, validated the same way (the tracker's view of each checkpoint)."""
    spec, _, _ = read_spec(path)
    entry = DrafterEntry(name, path, spec)
    entry.spec, _ = checked_spec(path, info)
    apply_semantics_overrides([entry], settings.inputs.semantics)
    from ..formats.references import verifier_warning

    warnings: list[str] = assumed_defaults([entry])  # base's warnings are about its own drafters, not this one
    if spec.verifier:
        warning = verifier_warning(path, spec.verifier, name, base.target_path, settings.output.cache)
        if warning:
            warnings.append(warning)
    warnings.extend(thinking_warnings([entry], base.thinking, settings.inputs.thinking is None, base.model_type))
    return dataclasses.replace(base, entries=[entry], warnings=warnings, fingerprints={name: checkpoint_fingerprint(path)})


def assumed_defaults(entries: list[DrafterEntry]) -> list[str]:
    """Every drafter key its format's own code defaults when absent (z-lab's tap rule, MuseGlimmerAssistantConfig's
    and DFlash2SpeculatorConfig's class defaults), the value assumed: a warning in the terminal and the report
    (provenance.warnings), never silent. A key whose reference has no default (z-lab's block_size) is refused
    by its reader instead (formats/checkpoints.py)."""
    return [f"drafter {e.name}: {note} assumed" for e in entries for note in e.spec.config_notes if " absent: " in note]


def prepare_inputs(settings: RunSettings, *, one_drafter: bool = False) -> Inputs:
    """Resolve and validate everything; nothing is written and no model is loaded."""
    from ..model.target import check_prompt_lengths, load_tokenizer, target_info

    placed = check_settings(settings)
    entries, target_path, warnings = resolve_drafters(settings)
    if one_drafter and len(entries) != 1 + bool(settings.drafters.reference):
        raise InputError(None, "doctor examines one drafter at a time")
    check_target_files(target_path)
    info = target_info(target_path)
    for entry in entries:  # validate every drafter against the target before anything is written
        entry.spec, _ = checked_spec(entry.path, info)
    given = settings.inputs
    apply_semantics_overrides(entries, given.semantics)
    warnings.extend(assumed_defaults(entries))
    if settings.sampling.draft_policy == "both":
        entries = split_draft_policies(entries)
    model_type = json.loads((target_path / "config.json").read_text()).get("model_type", "")
    if settings.second_target.serving_target is not None:  # a copy of this target, checked before anything is written
        from ..model.serving_target import check_copy

        check_copy(settings.second_target.serving_target, model_type, info)
    thinking, _ = target_thinking(target_path, given.thinking)
    warnings.extend(thinking_warnings(entries, thinking, given.thinking is None, model_type))
    tokenizer = load_tokenizer(target_path)  # the target is validated like the drafters, before any write
    chosen = run_prompts(settings, tokenizer, thinking, target_path, warnings)  # repo:, stdlib: long_prompts.py
    prompts = chosen.prompts
    inputs = Inputs(entries, target_path, model_type, prompts, thinking, tokenizer, None, warnings, placed=placed,
                    planned=prompts, dataset=chosen.dataset)
    check_prompt_lengths(target_path, {k: len(v) for k, v in inputs.prompt_ids().items()}, given.max_new_tokens)
    if placed.shard:
        index, count = placed.shard
        cost = {k: len(v) + given.max_new_tokens for k, v in inputs.prompt_ids().items()}
        inputs.all_prompts = prompts
        inputs.prompts = shard_prompts(prompts, cost, index, count)
    if given.responses:
        inputs.responses, said = responses_for(given.responses, tokenizer, info.vocab_size, [p.id for p in prompts])
        warnings.extend(said)
    inputs.fingerprints = {e.name: checkpoint_fingerprint(e.path) for e in entries}
    inputs.content = target_content(target_path, given.responses, tokenizer.chat_template, settings.output.cache)
    return inputs
