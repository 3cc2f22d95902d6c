"""Stage 1, sampling: what the hardware and the kernels do (NVML or a replayed trace, psutil,
the kernels' process trees), as records. Knows nothing of money."""
