"""model: everything that runs torch: the target (load, taps, kernels), the native drafter and its masks,
drafting, the replay engine over every anchor, the live loop, sampling and the temperature > 0 estimate."""
