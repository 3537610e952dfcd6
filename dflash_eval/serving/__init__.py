"""The serving wing: `dflash-eval served`, a server's own numbers beside an offline run, in one package.

Inside, bottom up: counters/ (pure: what a server counted, read into counts, the checks every reader applies,
the gap to an offline run) < exports/ (the files servers and clients write: AIPerf, llama.cpp, responses) <
views/ (terminal and HTML) < commands/ (the compositions) < cli.py. A wing imports the main stack, never
another wing; the main stack imports it only where cli/__init__.py registers the command."""
