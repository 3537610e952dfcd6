"""pipeline: the stages a run flows through, in order: prompts -> inputs -> run folder (or track folder) ->
continuations -> trajectories -> scoring -> rows -> document. A stage imports only earlier stages."""
