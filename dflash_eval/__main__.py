"""`python -m dflash_eval ...` (and `torchrun -m dflash_eval run ...`): the CLI."""

from dflash_eval.cli import main

main()
