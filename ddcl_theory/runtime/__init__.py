"""What every module may use: the profile switch, paths, progress bars, run directories
(checkpoints, provenance, atomic writes), validation helpers, distributed helpers, kernels."""
