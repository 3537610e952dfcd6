"""`track --draft-lengths` and `track --depth-buckets`: the options a curve's extra views need, checked once.

Why apart from training/commands/track.py: the tracker itself stays about polling and batching. Here:
- `--draft-lengths 3,7|all`: each checkpoint is also replayed with a block of k + 1 per k on the batch's
  one tap pass (rows.trajectory_rows does it, as for `run`); a draft length the checkpoint's block cannot
  hold (k > B - 1) makes that checkpoint invalid (reported, looked at again when its files change), as
  `run` refuses it for a drafter; offline estimates (temperature > 0) are not replayed per k, as in `run`;
- `--depth-buckets`: the edges every checkpoint's by-depth split uses (the default edges otherwise);
- both enter the track's settings (a resume with others is refused by name) and each checkpoint's run
  folder settings, as `run` records them.
"""

from __future__ import annotations

from typing import Any

from ...core.breakdown import DEFAULT_DEPTH_EDGES
from ...core.errors import InputError
from ...core.settings.run_settings import RunSettings


def check_options(run: RunSettings, reference_block: int | None) -> None:
    """Refused by name before the track folder is touched: the syntax of --draft-lengths, its range for the
    reference, and --draft-lengths at temperature > 0 (offline estimate)."""
    run.trees.check_with(run.sampling.temperature, "trajectory")  # --tree-budgets: syntax, temperature 0 (Trees)
    text = run.serving.draft_lengths
    if text is None:
        return
    if run.sampled:
        raise InputError(None, "--draft-lengths at temperature > 0: the offline estimate is not replayed per draft "
                               "length (use `dflash-eval run --mode live --draft-lengths` on a checkpoint)")
    _ = run.serving.requested  # the syntax, parsed once; each checkpoint's range when it is found
    if reference_block is not None:
        run.serving.for_block(reference_block, "reference")


def check_checkpoint(run: RunSettings, name: str, block_size: int) -> None:
    """A found checkpoint's block must hold every draft length asked for (InputError: reported as invalid)."""
    run.serving.for_block(block_size, name)


def depth_edges(run: RunSettings) -> tuple[int, ...]:
    return run.breakdown.edges


def track_settings(run: RunSettings) -> dict[str, Any]:
    """What the curve's extra views depend on, only when set (a track made without them keeps its digest)."""
    edges = depth_edges(run)
    return {**({"draft_lengths": run.serving.draft_lengths} if run.serving.draft_lengths is not None else {}),
            **({"depth_edges": list(edges)} if edges != DEFAULT_DEPTH_EDGES else {}), **run.trees.provenance()}


def run_settings(run: RunSettings) -> dict[str, Any]:
    """What `run` adds to a run folder's settings for --draft-lengths (evaluate.serving_inputs) and
    --tree-budgets."""
    return {**run.serving.provenance(), **run.trees.provenance()}
