"""trained-taps, per sample: a stored sample checked against what its trainer and the target allow, our tap
pass over its token ids (the run's own capture, `capture_trajectory`), and the drafter evaluated on the stored
fc input and on ours (pipeline/training_eval.py); then both sides' acceptance and the paired gap."""

from __future__ import annotations

from typing import Any

from ..core.errors import InputError


def load_checked(data, ref, target, layout, layers: list[int], lock_timeout: float, skipped: list, flags: dict):
    """(sample, trajectory, no_last_layer), or None when the trainer would have skipped the sample too
    (recorded in `skipped` with its reason). A file that cannot be what the layout says is refused by name."""
    import torch

    from ..model.target import max_positions
    from ..model.training_taps import SampleSkipped, load_sample
    from ..pipeline.prompts import Prompt
    from ..pipeline.trajectories import capture_trajectory

    try:
        sample = load_sample(data, ref, target.info.hidden_size, lock_timeout=lock_timeout)
    except SampleSkipped as exc:
        skipped.append({"sample": ref.index, "reason": str(exc)})
        return None
    flags["dtypes"].add(sample.dtype)
    flags["padding"] += sample.padding
    slots, want = sample.slots.shape[1], len(layout.taps)
    no_last = False
    if data.format == "speculators" and slots == want - 1:  # L == len(aux): no teacher slot (speculators #705)
        sample.slots = torch.cat([sample.slots, sample.teacher[:, None]], dim=1)
        sample.teacher, no_last = None, True
        flags["no_last_layer"] += 1
    elif slots != want:
        extra = " (the taps, then the last layer)" if data.format in ("speculators", "speculators-legacy") else ""
        stored = slots + (1 if sample.teacher is not None and data.format != "deepspec" else 0)
        raise InputError(ref.file, f"holds {stored} layers{extra}; {layout.source} names {want} taps "
                                   f"{list(layout.recorded or layout.taps)}" + (f", so {want + 1} layers" if extra else ""))
    ids = sample.input_ids
    if ids.numel() == 0 or int(ids.max()) >= target.info.vocab_size or int(ids.min()) < 0:
        raise InputError(ref.file, f"holds token ids outside the target's vocabulary of {target.info.vocab_size}: "
                                   "data of another target?")
    limit = max_positions(target.path)
    if limit is not None and ids.numel() > limit:
        raise InputError(ref.file, f"holds {ids.numel()} tokens, past the target's max_position_embeddings {limit}")
    traj = capture_trajectory(target, Prompt(str(ref.index), "", data.format), ids.tolist(), [], layers,
                              keep_hidden=True)
    return sample, traj, no_last


def evaluate_sample(drafter, entry, sample, traj, data, target, no_last: bool, anchor_batch, flags) -> list[dict]:
    """The drafter on the stored fc input with the stored labels (NAME@trained-taps) and on our taps, in its
    config's order, with the target's own greedy labels (NAME@our-taps): rows of `run`'s schema."""
    from ..model.tap_compare import teacher_tokens
    from ..pipeline.rows import finish_rows, piece_decoder
    from ..pipeline.training_eval import shifted_labels, training_rows

    spec = entry.spec
    if no_last:
        flags["not_evaluated"].append("not evaluated: without a teacher slot the stored fc input is not what "
                                      "speculators' loader feeds the drafter")
        return []
    if sample.fc_input.shape[1] != spec.fc_in_features:
        flags["not_evaluated"].append(f"not evaluated: the stored fc input is {sample.fc_input.shape[1]} wide, the "
                                      f"drafter's fc reads {spec.fc_in_features}")
        return []
    teacher = sample.teacher if data.teacher else None
    stored_pred = teacher_tokens(target, teacher, data.teacher) if teacher is not None else None
    ours_pred = traj.greedy if teacher is not None else None
    ids, mask = sample.input_ids, sample.loss_mask
    sid, where = str(sample.ref.index), data.format
    rows = training_rows(drafter, f"{entry.name}@trained-taps", sample.fc_input, ids, mask,
                         shifted_labels(ids, stored_pred), sid, where, anchor_batch)
    rows += training_rows(drafter, f"{entry.name}@our-taps", traj.taps(spec.taps), ids, mask,
                          shifted_labels(ids, ours_pred), sid, where, anchor_batch)
    return finish_rows(rows, piece_decoder(target.tokenizer))


def _per_sample(rows: list[dict], name: str) -> dict[str, tuple[int, int]]:
    """sample -> (steps, committed), its supervised stretches pooled: the unit the gap is paired over."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row["drafter"] == name and row["walk_accept_lengths"]:
            steps, committed = out.get(row["training_sample"], (0, 0))
            out[row["training_sample"]] = (steps + len(row["walk_accept_lengths"]),
                                           committed + sum(row["walk_accept_lengths"]))
    return out


def evaluation_summary(rows: list[dict], entry, data, seed: int) -> dict[str, Any] | None:
    """Both sides' metrics (from their rows' counts) and the gap trained - ours, paired over samples."""
    from ..core import compare as C
    from ..core import metrics as M
    from ..core.documents.results import metrics_summary

    if not rows:
        return None
    names = {"trained": f"{entry.name}@trained-taps", "ours": f"{entry.name}@our-taps"}
    sides = {}
    for side, name in names.items():
        counts = M.AcceptanceCounts(block_size=entry.spec.block_size)
        for row in rows:
            if row["drafter"] == name:
                counts = counts + M.AcceptanceCounts.from_dict(row["counts"])
        sides[side] = metrics_summary(counts, seed=seed) if counts.steps else None
    trained, ours = _per_sample(rows, names["trained"]), _per_sample(rows, names["ours"])
    gap, line = None, "no sample has a walk step on both sides: nothing to pair"
    if set(trained) & set(ours):
        gap = C.delta_tau_per_prompt(ours, trained, seed=seed, common_only=True).to_dict()
        tau_t, tau_o = sides["trained"]["tau_macro"], sides["ours"]["tau_macro"]
        line = (f"on its own training taps the drafter reaches tau {tau_t:.2f}, on the taps dflash-eval computes "
                f"{tau_o:.2f}: trained - ours {C.paired_figure(gap)} (paired over samples)")
    return {"names": names, "labels": "stored teacher" if data.teacher else "data tokens", **sides,
            "gap": gap, "line": line, "units": len(set(trained) | set(ours))}
