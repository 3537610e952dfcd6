"""formats: what is on disk, read and validated without loading a tensor: checkpoint files and headers
(files), the two DFlash checkpoint formats into one spec (checkpoints), validation against the target
(validation), the z-lab registry and recorded verifiers (references), training-run discovery (checkpoint_scan)."""
