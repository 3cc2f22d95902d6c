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
