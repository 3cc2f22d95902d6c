# The costguard hub service's settings (c.CostGuardHub), read by the service and by the spawn
# hook and the idle-culler hook, so budgets and policies are written once.
# Run by examples/jupyterhub/jupyterhub_config.py; copy it for a real site.
import os

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

state = os.environ.get("COSTGUARD_DEMO_STATE", os.path.expanduser("~/.costguard-hub-demo"))
# in a folder of the service's account alone (root's, as the Hub's): no user's server reads it
os.makedirs(os.path.join(state, "service"), mode=0o700, exist_ok=True)
c.CostGuardHub.db_path = os.path.join(state, "service", "costguard_hub.sqlite")
# servers push a report every report_interval; the service asks the Hub what runs every
# poll_interval
c.CostGuardHub.report_interval = 10.0
c.CostGuardHub.poll_interval = 10.0

# Budgets: per calendar month (UTC) by default; also "week" or "day"
c.CostGuardHub.budget_period = "month"
c.CostGuardHub.user_budgets = {"bob": 20.0}
c.CostGuardHub.default_user_budget = 500.0
c.CostGuardHub.group_budgets = {"research": 50.0}

# The site's profiles, and the service's own meter: what each profile costs the site, priced
# from the shipped catalog by the same code the servers price themselves with. A running
# server is counted at its profile's rate from the moment the Hub started it, whatever the
# server itself reports. The table is also the site's list of profiles, for every decision
# (the spawn hook, budgets, culling, the pages): a profile is a GPU one when its entry holds
# GPUs, and a spawn of a profile it does not list is refused.
c.CostGuardHub.profile_prices = {
    # the demo's GPU servers run (simulated) on a whole p4d.24xlarge: 8 x A100, 21.96 USD/h
    "gpu": {"instance_type": "p4d.24xlarge"},
    # CPU-only: a small general-purpose instance, an m5.xlarge (4 vCPU, 16 GiB, no GPU),
    # 0.192 USD/h. (The demo's servers replay the same GPU trace whatever the profile, so a
    # "cpu" server reports a p4d's rate: above its meter, which is not flagged; what is
    # counted, and the admin page's rate, is the meter's.)
    "cpu": {"instance_type": "m5.xlarge"},
}
# a spawn that names no profile (through the REST API) runs the form's default, gpu
c.CostGuardHub.default_profile = "gpu"

# GPU-aware culling: GPU servers with every GPU idle for 30 min are warned 5 min ahead in
# their JupyterLab, then stopped; CPU servers are left to the usual culler. The demo only
# logs what it would stop (the event log on the admin page says "would-stop").
c.CostGuardHub.cull_policies = [
    {"name": "gpu", "profiles": ["gpu"], "idle_minutes": 30, "warn_minutes": 5},
]
c.CostGuardHub.cull_dry_run = True
