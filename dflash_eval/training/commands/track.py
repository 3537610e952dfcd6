"""`dflash-eval track`: the checkpoints of one training run as a curve against the reference drafter.

Composition (ARCHITECTURE.md): inputs once (target, prompts, reference; refused before any write) -> the
track folder (created, resumed with equal settings, or refused naming what differs) -> per poll: scan the
save folders (`checkpoint_scan`) -> the checkpoints that are complete, unchanged since the previous poll,
valid and not evaluated before -> in batches: continuations (the shared cache `run` uses) -> per prompt
ONE trajectory carrying the taps of every checkpoint in the batch -> each checkpoint scored on it -> rows
into the checkpoint's own run folder -> its run.json (`document.assemble`, the numbers `run` gives for that
checkpoint alone) -> one track.jsonl row -> track.csv, track.html, TensorBoard. With --draft-lengths each
checkpoint is also replayed at every k on the same pass, and --depth-buckets sets its depth split
(breakdown.py checks both).

Safe while a trainer writes: a checkpoint is evaluated only when config.json parses, every weight file
is there with all the bytes its safetensors header promises, no file changed between two polls, and
validation passes. Anything else is reported (once per state) and looked at again at the next poll; it
never stops the tracker. A checkpoint is identified by its content (sha256 of config and weights), not
its path: speculators rewrites `<epoch>/` in place mid-epoch, and a rotating save limit deletes folders
whose rows must stay.

Taps are recomputed per batch, not cached (measured and chosen): on the scaled-down real-proportion pair
of benchmarks/scaling.py at 2048 tokens the tap pass takes 1.50 s against 3.45 s per drafter, so a batch
of 4 checkpoints spends ~10% of its time in the target, the most a tap cache could save; the cache would
hold 118 MB per prompt on a 27B target (hidden 5120, 5 taps, ~2300 tokens, bf16), 19 GB for HumanEval's
164 prompts, per prompt set and settings. Checkpoints that appear together share one pass per prompt
(`--batch`), which is where the saving is.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import InputError
from ...core.progress import Reporter, pause_after_prompt
from ...core.settings.run_settings import RunSettings
from ...formats import checkpoint_scan
from ...pipeline.continuations import continuations_for, sampled_continuations_for
from ...pipeline.document import assemble
from ...pipeline.inputs import Inputs, prepare_inputs, with_one_drafter
from ...pipeline.rows import estimate_rows, finish_rows, piece_decoder, trajectory_rows
from ...pipeline.run_folder import RunFolder, claimed
from ...pipeline.scoring import kernels_context, load_drafters, to_target_device
from ...pipeline.track_folder import CSV, TRACK_LOCK, TrackFolder, run_label, track_csv, track_row
from ...pipeline.trajectories import capture_trajectory
from ...pipeline.turns import answer_earlier_turns
from . import breakdown as track_breakdown
from .track_settings import Tracking


@dataclass
class TrackOptions:
    sources: list[Path]  # save folders (or checkpoint folders given one by one)
    run: RunSettings  # target, prompts, tokens, thinking, device, cache, reference, semantics; out = the track folder
    tracking: Tracking = Tracking()


@dataclass
class _Item:
    """One checkpoint (or the reference) inside a batch."""

    role: str
    view: Inputs
    found: checkpoint_scan.Found | None
    label: str
    settings: RunSettings
    folder: RunFolder
    drafters: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    complete: set = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.view.entries[0].name

    @property
    def fingerprint(self) -> str:
        return self.view.fingerprints[self.name]


def check_track_options(options: TrackOptions) -> None:
    run = options.run
    if run.inputs.target is None:
        raise InputError(None, "track needs --target (the verifier every checkpoint is evaluated against)")
    if run.sampling.draft_policy == "both":
        raise InputError(None, "track follows one draft policy (--draft-policy sample or argmax); run both "
                               "side by side with `dflash-eval run --draft-policy both` on a checkpoint")
    if run.replay.mode != "trajectory":
        raise InputError(None, "track replays every checkpoint on one trajectory per prompt; --mode live is not offered")
    if run.inputs.responses is not None:
        raise InputError(None, "track generates (or reads cached) continuations itself; --responses is not offered")
    track_breakdown.check_options(run, None)  # --draft-lengths' syntax, and at temperature > 0
    for value in run.inputs.semantics:
        if "=" in value:
            raise InputError(None, f"--semantics {value!r}: track applies one rule set to every checkpoint "
                                   "(give RULES, not NAME=RULES)")
    options.tracking.check()
    watch = options.tracking.watch
    for source in options.sources:
        if not Path(source).exists() and not watch:
            raise InputError(source, "no such folder (with --watch the tracker waits for it)")
        if Path(source).exists() and not Path(source).is_dir():
            raise InputError(source, "is not a folder (give a save folder or checkpoint folders)")


def _refuse_nonfinite_target(target: Path) -> None:
    """The target's NaN / inf weights, found on the raw bits of its files: `run` loads the target before it
    opens --out, track loads it only when a checkpoint needs it, so it scans first (read-only memory map)."""
    from ...core.errors import nonfinite_error
    from ...formats.files import nonfinite_tensors, weight_files

    for file in weight_files(target):
        bad = nonfinite_tensors(file)
        if bad:
            raise nonfinite_error(file, bad)


class Tracker:
    """Polls, evaluates and records; `run()` is the whole command. After every batch it writes track.jsonl's
    rows, track.csv, track.html (--html) and the TensorBoard scalars (--tensorboard), then calls
    `after_batch(tracker)` (the CLI redraws the table with --watch)."""

    def __init__(self, options: TrackOptions, reporter: Reporter | None = None,
                 after_batch: Callable[[Tracker], None] | None = None):
        from ...model.target import target_info

        check_track_options(options)
        options = dataclasses.replace(options, sources=[Path(s).absolute() for s in options.sources])
        self.options = options
        self.reporter = reporter or Reporter()
        self.after_batch = after_batch or (lambda tracker: None)
        self.scalars = None  # the TensorBoard log (--tensorboard), opened at the first row
        self.base = answer_earlier_turns(prepare_inputs(options.run.with_sections(
            dataclasses.replace(options.run.drafters, drafters=()))), options.run,
                                         self.reporter)  # multi-turn sets: their later turns (pipeline/turns.py)
        self.info = target_info(self.base.target_path)
        track_breakdown.check_options(options.run, self.base.entries[0].spec.block_size if self.base.entries else None)
        _refuse_nonfinite_target(self.base.target_path)  # before --out is created or an earlier track removed
        settings = {**self.base.settings(options.run), "semantics_overrides": list(options.run.inputs.semantics),
                    **track_breakdown.track_settings(options.run)}  # --draft-lengths, --depth-buckets
        self.folder = TrackFolder(options.run.out, settings)
        self.rows: list[dict[str, Any]] = self.folder.open(options.run.output.overwrite)
        self.identities = {(r["path"], tuple(tuple(f) for f in r.get("identity") or [])): r["fingerprint"]
                           for r in self.rows if r.get("role") == "checkpoint"}
        self.done = {r["fingerprint"] for r in self.rows if r.get("role") == "checkpoint"}
        self.previous: dict[str, checkpoint_scan.Found] = {}
        self.status: dict[str, tuple[str, str]] = {}  # path -> (status, detail) of checkpoints not evaluated
        self.invalid: dict[str, tuple] = {}  # path -> the files it was refused with
        self.last_scan: checkpoint_scan.Scan | None = None
        self.target = None
        self.continuations: dict[str, list[int]] = {}
        self.busy = False  # inside a batch (an interrupt then leaves work to resume)
        self.batches = 0

    # -------------------------------------------------------------------------------------- polling

    def _say(self, found: checkpoint_scan.Found, status: str, detail: str) -> None:
        """Report a checkpoint's state when it changes (a poll every few seconds must not flood the log)."""
        key = str(found.path)
        if self.status.get(key) == (status, detail):
            return
        self.status[key] = (status, detail)
        self.folder.log(status, path=key, name=found.name, step=found.step, detail=detail)
        if status != "waiting":
            self.reporter.note(f"{found.name}: {status}: {detail}; looked at again at the next poll")

    def poll(self) -> list[tuple[checkpoint_scan.Found, Inputs]]:
        """The checkpoints ready to evaluate now (complete, stable across two polls, valid, new)."""
        scan = checkpoint_scan.scan(self.options.sources)
        self.last_scan = scan
        ready = []
        for found in scan.checkpoints:
            key = str(found.path)
            before = self.previous.get(key)
            self.previous[key] = found
            if (key, found.identity) in self.identities:
                continue
            if found.problem:
                self._say(found, "incomplete", found.problem)
                continue
            if before is None or before.files != found.files:
                self._say(found, "waiting", "written since the previous poll" if before else "new")
                continue
            if self.invalid.get(key) == found.files:
                continue  # refused as it is now; looked at again once its files change
            try:
                view = with_one_drafter(self.base, self.options.run, found.path, found.name, self.info)
                track_breakdown.check_checkpoint(self.options.run, found.name, view.entries[0].spec.block_size)
            except InputError as exc:
                self._say(found, "invalid", exc.one_line())
                self.invalid[key] = found.files
                continue
            fingerprint = view.fingerprints[found.name]
            if fingerprint in self.done:  # the same weights seen before (touched, copied or renamed)
                self.identities[(key, found.identity)] = fingerprint
                self.status.pop(key, None)  # evaluated already: no longer "waiting"
                continue
            self.status.pop(key, None)
            ready.append((found, view))
        return ready

    def waiting(self) -> list[str]:
        return [k for k, s in self.status.items() if s[0] == "waiting"]

    def pending(self) -> list[tuple[str, str, str]]:
        """(path, status, detail) of every checkpoint seen but not evaluated."""
        return [(k, s[0], s[1]) for k, s in self.status.items()]

    def present(self) -> dict[str, bool]:
        """fingerprint -> whether a scanned folder still holds those weights."""
        scanned = self.last_scan.checkpoints if self.last_scan else []
        here = {self.identities.get((str(f.path), f.identity)) for f in scanned}
        return {r["fingerprint"]: r.get("role") == "reference" or r["fingerprint"] in here for r in self.rows}

    # ------------------------------------------------------------------------------------ evaluation

    def _target(self):
        if self.target is None:
            from ...model.target import load_target

            run = self.options.run
            self.reporter.note(f"loading target {self.base.target_path}")
            target = load_target(str(self.base.target_path), device=run.placement.device, dtype=run.placement.dtype,
                                 allow_accelerated_on_cpu=run.replay.kernels == "torch",
                                 **self.base.placed.load_keywords())
            from ...model.drafter import refuse_nonfinite

            refuse_nonfinite(target.model.state_dict().items(), self.base.target_path)  # NaN/inf weights, by tensor
            self.target = target
        return self.target

    def _item(self, role: str, view: Inputs, found: checkpoint_scan.Found | None) -> _Item:
        entry = view.entries[0]
        label = run_label(role, entry.name, found.step if found else None, view.fingerprints[entry.name])
        out = self.folder.run_dir(label)
        run = self.options.run
        drafters = () if role == "reference" else (str(entry.path),)
        settings = run.with_sections(
            dataclasses.replace(run.drafters, drafters=drafters,
                                reference=run.drafters.reference if role == "reference" else None),
            dataclasses.replace(run.output, out=out))
        folder = RunFolder(out, {**view.settings(settings), **track_breakdown.run_settings(settings)},
                           owner=self.folder.path)  # the track writes its own runs/<label>
        try:
            done = folder.open()
        except InputError:  # our own folder, left by another version with other settings: redone
            done = folder.open(overwrite=True)
        return _Item(role, view, found, label, settings, folder, rows=done)

    def evaluate(self, batch: list[tuple[str, Inputs, checkpoint_scan.Found | None]]) -> None:
        """One target pass per prompt for the whole batch; then one run folder and one row per member."""
        from ...model.kernels import kernel_report, kernel_summary

        target = self._target()
        run = self.options.run
        self.busy = True
        self.batches += 1
        target.tap_passes = 0  # each member's run.json counts this batch's passes as its work
        items = [self._item(role, view, found) for role, view, found in batch]
        with kernels_context(target, run):
            for item in items:
                item.drafters = load_drafters(item.view.entries, target, device="cpu")  # joins after generation
                item.rows = item.folder.keep_complete(item.rows, {(n, k) for n in item.drafters
                                                                  for k in range(run.sampling.samples)})
                item.complete = {r["prompt_id"] for r in item.rows}
            needed = [p for p in self.base.prompts if any(p.id not in it.complete for it in items)]
            ids = self.base.prompt_ids()
            sampled = run.sampled  # the offline estimate: K sampled texts per prompt, one pass each
            missing = [p for p in needed if (p.id, 0) not in self.continuations]
            universe = self.base.planned  # run's generation plan: the same texts (and cache entries) as `run`
            if sampled:
                found, generated = sampled_continuations_for(target, missing, ids, run, self.base.thinking,
                                                             self.reporter, universe=universe)
            else:
                greedy, generated = continuations_for(target, missing, ids, run, self.base.thinking, None,
                                                      self.reporter, universe=universe)
                found = {(pid, 0): cont for pid, cont in greedy.items()}
            self.continuations.update(found)
            for item in items:  # generation is done: the target was all that was resident (scoring.py)
                to_target_device(item.drafters, target)
            decode = piece_decoder(target.tokenizer)
            names = ", ".join(it.label for it in items)
            self.reporter.note(f"batch {self.batches}: {len(items)} drafter(s) ({names}), {len(needed)} prompts, "
                               f"one target pass each{f' per sample ({run.sampling.samples})' if sampled else ''}")
            self.reporter.phase("prompts", len(needed))
            for prompt in needed:
                members = [it for it in items if prompt.id not in it.complete]
                layers = sorted({t for it in members for d in it.drafters.values() for t in d.spec.taps})
                per_member: dict[int, list] = {id(it): [] for it in members}
                for k in range(run.sampling.samples):
                    trajectory = capture_trajectory(target, prompt, ids[prompt.id], self.continuations[(prompt.id, k)],
                                                    layers, sequence_chunk=run.batching.tap_chunk, keep_hidden=sampled,
                                                    sample=k if sampled else None)
                    for item in members:
                        if sampled:
                            per_member[id(item)] += estimate_rows(prompt, item.drafters, trajectory, target,
                                                                  lambda name: run)
                        else:
                            per_member[id(item)] += trajectory_rows(prompt, item.drafters, trajectory, run)
                for item in members:
                    rows = finish_rows(per_member[id(item)], decode)
                    item.folder.append(rows)
                    item.rows.extend(rows)
                    item.complete.add(prompt.id)
                pause_after_prompt()
                self.reporter.advance("prompts", prompt.id)
            kernels = kernel_summary(kernel_report(target.model))
        passes = target.tap_passes
        for item in items:
            document = assemble(item.settings, target, item.view.entries, item.drafters, item.rows, self.base.prompts,
                                self.base.thinking, item.view.warnings, item.view.fingerprints, kernels,
                                {n: d.spec.block_size for n, d in item.drafters.items()},
                                generated_count=generated, evaluated_count=len(needed), dataset=self.base.dataset)
            item.folder.finish(document)
            found = item.found
            row = track_row(item.role, item.view.entries[0], item.fingerprint, item.label, document["drafters"][0],
                            step=found.step if found else None, step_source=found.step_source if found else "",
                            identity=found.identity if found else ())
            if found is not None:  # the trainer's own logged metrics at this step, beside the measured tau
                from ...formats.trainer_logs import trainer_values

                trainer = trainer_values(self.options.sources, found.step, found.path)
                if trainer is not None:
                    row["trainer"] = trainer
            self._scalars(row)
            self.folder.append(row)  # last: a kill before this line redoes the checkpoint from its run folder
            self.rows.append(row)
            if found is not None:
                self.done.add(item.fingerprint)
                self.identities[(str(found.path), found.identity)] = item.fingerprint
        self.folder.log("batch", number=self.batches, drafters=[it.label for it in items], prompts=len(needed),
                        target_passes=passes, continuations_generated=generated)
        self.busy = False
        from ...core.documents import results as R

        R.atomic_write(self.folder.path / CSV, track_csv(self.rows))
        if self.options.run.output.html:
            from ...pipeline.run_folder import write_run_html
            from ..views.track import render_track_html

            write_run_html(self.folder.path, render_track_html(self.rows, self.present(), self.folder.settings,
                                                               seed=self.options.run.seed), "track.html")
        self.after_batch(self)

    def _scalars(self, row: dict) -> None:
        """The row's numbers at its step, in the TensorBoard log (--tensorboard)."""
        folder = self.options.tracking.tensorboard
        if folder is None:
            return
        if self.scalars is None:
            from ...render.tensorboard import ScalarLog

            self.scalars = ScalarLog(folder)
        self.scalars.write(row, self.reference_tau())

    def close(self) -> None:
        """The track folder's lock released and the TensorBoard log closed."""
        self.folder.close()
        if self.scalars is not None:
            self.scalars.close()

    def reference_tau(self) -> float | None:
        refs = [r for r in self.rows if r.get("role") == "reference"]
        return refs[-1]["metrics"].get("tau_macro") if refs else None

    # ----------------------------------------------------------------------------------------- loop

    def run(self) -> None:
        """Evaluate what is there (with --watch: until interrupted). The reference goes first, alone if need be."""
        reference = self.base.entries[0] if self.base.entries else None
        evaluated = {r["fingerprint"] for r in self.rows if r.get("role") == "reference"}
        if reference is not None and self.base.fingerprints[reference.name] not in evaluated:
            self.evaluate([("reference", self.base, None)])
        polls = 0
        while True:
            ready = self.poll()
            polls += 1
            tracking = self.options.tracking
            for start in range(0, len(ready), tracking.batch):
                self.evaluate([("checkpoint", view, found) for found, view in ready[start:start + tracking.batch]])
            if not tracking.watch:
                if polls == 1 and self.waiting():
                    time.sleep(tracking.settle)  # the second look that proves a new checkpoint is finished
                    continue
                if polls == 1 and not self.last_scan.checkpoints and not self.rows:
                    raise InputError(", ".join(map(str, self.options.sources)), "no checkpoints found (folders with "
                                     "config.json, checkpoint-N, epoch_E_step_S or <epoch>/)")
                return
            time.sleep(tracking.settle if self.waiting() else tracking.interval)


def track(options: TrackOptions, reporter: Reporter | None = None, **callbacks) -> Tracker:
    """Run the tracker (library entry point of `dflash-eval track`); returns it, rows and all."""
    with claimed(options.run.out, TRACK_LOCK):  # a track another process still writes: refused before any slow work
        tracker = Tracker(options, reporter, **callbacks)
        try:
            tracker.run()
        finally:
            tracker.close()  # the track folder's lock (held while it runs), the TensorBoard log
    return tracker
