"""Offloading notebook cells to batch jobs: the slice, the job store, the backends, the runner."""
