"""The training wing: `dflash-eval track` (a training run's checkpoints as a curve) and `trained-taps` (the
taps a trainer stored beside the ones we compute), in one package.

Inside, bottom up: views/ (track's terminal lines and track.html, the trained-taps page) < commands/ (the
tracker, its breakdown options and section, trained-taps' output folder) < cli/ (the two commands). What the
main stack also uses stays there: the track folder (pipeline/track_folder.py, read by `read_track`), the
track summary (core/track_summary.py, read by render/tree.py), and trained-taps' comparison
(commands/trained_taps.py and its parts, render/terminal_trained_taps.py), which doctor --trained-taps runs
too and a wing never imports another wing."""
