# Demo configuration for jupyter-costguard (used by README's launch command).
#
# On a machine with an NVIDIA driver costguard reads the real GPUs; without one it plays
# gpu_trace.json (a p4d.24xlarge day) and labels every figure "simulated".
from pathlib import Path

here = Path(__file__).resolve().parent
c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

c.ServerApp.root_dir = str(here)
c.CostGuard.replay_trace = str(here / "gpu_trace.json")
c.CostGuard.replay_mode = "fallback"
c.CostGuard.db_path = str(here / ".costguard" / "ledger.sqlite")
c.CostGuard.sample_interval = 2.0

# The guard judges "a training-sized instance used interactively" over a sliding window
# (30 min by default) and speaks once half of it is sampled. The demo shortens the window
# to 90 s, so the warning (with the cheaper instance that fits) appears about 45 s after
# launch when explore.ipynb is opened within the first 20 s, else about 45 s after it is
# opened (the rule also waits until kernels have held GPUs for half the window). Not
# shorter: the trace's explore kernel bursts to 65% for 20 s every 5 minutes,
# which would lift a 1-minute average above the 20% line and make the warning come and go;
# over 90 s the average stays below 17%.
c.Guard.interactive_window_seconds = 90.0

# The demo prices the recorded trace's instance, not this machine: no cloud metadata lookups
# (they would go to the link-local metadata address) and no container share.
c.CostGuard.cloud_metadata = False
c.CostGuard.container_share = "off"
# ...and the shipped catalog's prices, with no background download of new ones (it would
# run where gpuhunt is installed, as in the environment scripts/test.sh makes)
c.CostGuard.catalog_refresh_hours = 0

# Idle GPU kernels are hibernated after 30 minutes idle by default (warned from 15 minutes):
# their variables are saved, the GPUs freed, and the notebook's next kernel starts with them.
# In the demo the replayed explore.ipynb kernel is idle, so that is what happens to it after
# half an hour; to keep kernels running instead:
# c.Guard.hibernate_idle_after_seconds = None
