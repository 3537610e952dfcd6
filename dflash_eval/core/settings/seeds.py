"""`--seed`, one meaning per family: every command's --seed is one of these three flags, each with one help.

- RUN_SEED (`run`, `doctor`, `track`: the InputSettings section): every draw of a run. With --limit N a
  seeded random N prompts instead of the first N (pipeline/prompts.select); at temperature > 0 each sampled
  continuation is seeded from it, the prompt and k; and the bootstrap intervals and permutation tests of the
  run's own document. Not given: the first N prompts, and 0 for the rest (`InputSettings.bootstrap_seed`).
- STATISTICS_SEED (`diff`; `trained-taps`' gap): the resampling of a comparison of numbers already scored:
  the paired bootstrap intervals and permutation tests. It never changes which prompts or tokens are scored.
- CHOICE_SEED (`show --random K`): which K blocks are shown; the numbers are not touched.

The three share a name because each is "the seed of the randomness this command has"; they share one domain
(>= 0: numpy's SeedSequence refuses less; tests/test_option_numbers.py) and tests/test_options.py checks that
each command's --seed is one of them. docs/cli-reference.md shows each command's help.
"""

from __future__ import annotations

from typing import Optional

from .sections import Flag, setting

SEED_MINIMUM = 0  # numpy's SeedSequence (the bootstrap) refuses a negative seed


def run_seed(panel: str) -> Flag:
    """The run's --seed (InputSettings): None means not given (the first N prompts, 0 elsewhere)."""
    return setting("seed", "--seed", Optional[int], None,
                   "Seed of the run's draws: with --limit a random N prompts instead of the first N; the samples at "
                   "temperature > 0 (each from the seed, the prompt and k); the bootstrap intervals and permutation "
                   "tests (default 0).", panel, minimum=SEED_MINIMUM)


def statistics_seed(panel: str) -> Flag:
    """A comparison's --seed: its paired bootstrap intervals and permutation tests."""
    return setting("seed", "--seed", int, 0, "Seed of the bootstrap intervals and permutation tests of the "
                   "comparison (it never changes which prompts or tokens are scored).", panel, minimum=SEED_MINIMUM)


def choice_seed(panel: str) -> Flag:
    """show's --seed: the --random choice of blocks."""
    return setting("seed", "--seed", int, 0, "Seed of the --random choice of blocks shown.", panel,
                   minimum=SEED_MINIMUM)


FAMILIES = {"run": run_seed, "statistics": statistics_seed, "choice": choice_seed}
