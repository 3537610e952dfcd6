"""`dflash-eval track` and `dflash-eval trained-taps`: parse, call the training wing's commands, print."""
