# jupyter-costguard on a Slurm login node: offloaded cells run as Slurm batch jobs.
#
# Put this in ~/.jupyter/jupyter_server_config.py (or pass --config=...), then choose the
# "slurm" backend when you submit (`"backend": "slurm"` in POST costguard/api/jobs).
#
# REQUIREMENT: the notebooks' directories and `c.Offload.jobs_dir` must be on a filesystem that the
# compute nodes share with this server (home or project space on NFS, Lustre, GPFS...). The
# job's batch script runs `python -m jupyter_costguard.offload.runner JOB_DIR` on the node, and
# the server follows the job only through the files it writes there. Node-local /tmp will not do.
import os

c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

# Offer the Slurm backend. None (the default) offers it when `sbatch` is on PATH.
c.SlurmBackend.enabled = True

# Where jobs go and who pays: None leaves it to the cluster's defaults (and SBATCH_PARTITION /
# SBATCH_ACCOUNT in the server's environment, which sbatch reads too).
c.SlurmBackend.partition = "gpu"
c.SlurmBackend.account = "my-project"

# Anything else sbatch should get, one argument per item (they go on sbatch's command line,
# after the script's own #SBATCH lines, so they win).
c.SlurmBackend.extra_args = ["--qos=normal", "--constraint=a100"]

# SIGUSR1 this many seconds before Slurm's time limit. The runner passes it on to the kernel
# when the job's code handles it (the checkpoint helper does: its first `checkpoint.save`
# installs a handler that makes a final save), so a job that hits the limit resumes from there.
c.SlurmBackend.signal_seconds = 120

# The interpreter on the compute nodes, with jupyter_costguard and ipykernel installed. The
# default is the server's own, which a shared filesystem usually makes the same path there.
# c.SlurmBackend.python = "/shared/envs/ml/bin/python"

# Job directories (status, log, outputs, results, checkpoints, job.sbatch, slurm-<id>.out):
# on the shared filesystem, e.g. in the project space rather than the default data dir.
c.Offload.jobs_dir = os.path.expanduser("~/.costguard/jobs")
