"""The doctor wing: `dflash-eval doctor`, which names the mismatch between a drafter and its training, in one
package.

Inside, bottom up: views/ (terminal tables) < commands/ (the composition: the target pass once, the variants,
windows, defects, engines, trees, trained taps, the verdict) < figures.py (docs/doctor.md's figures from the
demo) < cli.py. The variants themselves (commands/variants.py) stay in the main stack: `run --reference`
(commands/explain.py) and `plan` replay and size them too, and the main stack never imports a wing."""
