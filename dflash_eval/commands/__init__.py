"""commands: the library's compositions of the stages, one per command (evaluate, doctor, track, merge, diff,
inspect, the DataFrame readers, torchrun). The CLI calls these; so can a notebook."""
