"""The tracker, its options, and trained-taps' output folder (the training wing's commands/)."""
