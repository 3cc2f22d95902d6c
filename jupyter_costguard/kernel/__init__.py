"""Code that runs inside a user's (or a job's) kernel: the cost widget and magics, checkpoints,
job metrics. It imports no server code (an import-linter contract holds it to that)."""
