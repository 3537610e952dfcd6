"""`python -m dflash_eval.cli ...`: the CLI (what the installed `dflash-eval` script runs)."""

from dflash_eval.cli import main

main()
