"""core: pure functions and schemas over ints, lists and dicts (metrics, estimates, repetition, statistics,
the result schema, the drafter spec and its attention rules, errors, paths, safe text). No torch, no model:
everything here is tested on hand-computed cases and imports nothing of the package outside core."""
