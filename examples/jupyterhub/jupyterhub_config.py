# A real JupyterHub with costguard on this machine: local processes, four demo users in two
# groups, each user's server playing its own recorded GPU day (every figure says "simulated"
# where no NVIDIA driver is found), the costguard service, budgets at spawn, GPU culling in
# dry run.
#
#   pip install ".[hub]" jupyterlab && npm install -g configurable-http-proxy   # in a clone
#   jupyterhub -f examples/jupyterhub/jupyterhub_config.py
#
# then open http://127.0.0.1:8000 and log in as alice, bob or carol with the password
# costguard-demo, or as admin with costguard-demo-admin-password-loopback (JupyterHub wants an
# admin password of 32 characters or more, distinct from the users'). Start a server: each
# user's home (under the state folder) gets its own copies of the example notebooks
# (explore, train, offload) on their first spawn. Then open
# http://127.0.0.1:8000/services/costguard/.
# Loopback only: the hub listens on 127.0.0.1 and no server asks a cloud's metadata service.
import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
examples = here.parent
c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

state = Path(os.environ.get("COSTGUARD_DEMO_STATE", Path.home() / ".costguard-hub-demo"))
state.mkdir(parents=True, exist_ok=True)
os.environ["COSTGUARD_DEMO_STATE"] = str(state)
port = int(os.environ.get("COSTGUARD_DEMO_PORT", "8000"))

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.cleanup_servers = True

# demo logins: one shared password for the users and another for the admin, for a hub
# that only listens on loopback
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = "costguard-demo"
c.SharedPasswordAuthenticator.admin_password = "costguard-demo-admin-password-loopback"
c.Authenticator.allowed_users = {"alice", "bob", "carol", "admin"}
c.Authenticator.admin_users = {"admin"}
c.JupyterHub.load_groups = {"ml": {"users": ["alice", "bob"]},
                            "research": {"users": ["carol"]}}

# local processes, one home per user under the demo's state folder
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(state / "home" / "{username}")
c.Spawner.cmd = [str(Path(sys.executable).with_name("jupyterhub-singleuser"))]
c.Spawner.default_url = "/lab"
if os.geteuid() == 0:
    c.Spawner.args = ["--allow-root"]
# `form-select`, not `form-control`: JupyterHub 5's pages use Bootstrap 5, where a select
# styled as a text field loses its drop-down arrow and the choice does not look like one
c.Spawner.options_form = """
<label for="profile">Profile</label>
<select class="form-select" name="profile" id="profile">
  <option value="gpu">GPU: p4d.24xlarge, 8 x A100 (simulated)</option>
  <option value="cpu">CPU only</option>
</select>
"""


def options_from_form(formdata):
    return {"profile": formdata.get("profile", ["gpu"])[0]}


c.Spawner.options_from_form = options_from_form

# each user's costguard: their own data folder (ledger, jobs, snapshots and key) and their own
# part of the recorded trace (replayed from a different point per user, so the pages show
# different figures)
def rotated_trace(user: str, share: float) -> Path:
    doc = json.loads((examples / "gpu_trace.json").read_text())
    frames, duration = doc["frames"], float(doc["duration"])
    k = int(len(frames) * share)
    t0 = frames[k]["t"]
    doc["frames"] = ([{**f, "t": f["t"] - t0} for f in frames[k:]]
                     + [{**f, "t": f["t"] + duration - t0} for f in frames[:k]])
    doc["description"] = f"{doc.get('description', '')} (from {share:.0%} in, for {user})"
    path = state / "traces" / f"{user}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def data_folder(user: str) -> Path:
    """The user's own costguard data folder (0700): their ledger, batch jobs, hibernated
    kernels' snapshots and the key that signs them, shared with no other user."""
    own = state / "users" / user
    for folder in (own.parent, own):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
    return own


OFFSETS = {"alice": 0.0, "bob": 0.25, "carol": 0.5, "admin": 0.75}
for user, offset in OFFSETS.items():
    common = {
        # beside it: their snapshots, the snapshots' index and the key that signs them
        "db_path": str(data_folder(user) / "ledger.sqlite"),
        # each user's own batch jobs (their Jobs panel lists theirs only)
        "jobs_dir": str(data_folder(user) / "jobs"),
        "sample_interval": 2.0,
        "cloud_metadata": False,
        "container_share": "off",
        # the demo's prices are the shipped catalog's: no background download of new ones
        "catalog_refresh_hours": 0,
    }
    # one configuration per profile: a GPU server plays its recorded GPU day on the p4d the
    # site prices it as; a CPU server has no GPU and runs on the m5.xlarge of its profile
    for profile, own in (("gpu", {"replay_trace": str(rotated_trace(user, offset)),
                                  "replay_mode": "fallback"}),
                         ("cpu", {"instance_type": "m5.xlarge"})):
        conf = state / "conf" / user / profile
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "jupyter_server_config.json").write_text(json.dumps(
            {"CostGuard": {**common, **own}}))


def config_dir(spawner) -> str:
    """The user's configuration for the profile this spawn runs (the spawn hook has named
    it in the user options)."""
    profile = (spawner.user_options or {}).get("profile") or "gpu"
    return str(state / "conf" / spawner.user.name / ("cpu" if profile == "cpu" else "gpu"))


service_port = int(os.environ.get("COSTGUARD_DEMO_SERVICE_PORT", "10101"))
c.Spawner.environment = {
    "JUPYTER_CONFIG_DIR": config_dir,
    # where each server pushes its report, with its own token
    "COSTGUARD_HUB_URL": f"http://127.0.0.1:{service_port}/services/costguard/",
    "COSTGUARD_CLOUD_METADATA": "off",
    "AWS_EC2_METADATA_DISABLED": "true",
}

# the costguard service: its own role with the narrowest scopes that work (README explains
# each; none reaches into a user's server), an admin scope for the platform team, every user
# may open their own page, and every server may report with its own token
service_config = str(here / "costguard_hub_config.py")
c.JupyterHub.services = [{
    "name": "costguard",
    "url": f"http://127.0.0.1:{service_port}",
    "command": [sys.executable, "-m", "jupyter_costguard.hub", f"--config={service_config}"],
    "environment": {"COSTGUARD_DEMO_STATE": str(state)},
    "oauth_client_allowed_scopes": ["custom:costguard:admin"],
    "oauth_no_confirm": True,
    "display": True,
}]
c.JupyterHub.custom_scopes = {
    "custom:costguard:admin": {"description": "See every user's and group's costguard figures"},
}
c.JupyterHub.load_roles = [
    {"name": "costguard", "services": ["costguard"],
     "scopes": ["list:users", "read:users:name", "read:users:groups", "read:servers",
                "delete:servers"]},
    {"name": "server", "scopes": ["users:activity!user", "access:servers!server",
                                  "access:services!service=costguard"]},
    {"name": "user", "scopes": ["self", "access:services!service=costguard"]},
    {"name": "costguard-admins", "users": ["admin"],
     "scopes": ["custom:costguard:admin", "access:services!service=costguard"]},
]

# budgets at spawn: a GPU profile is refused once the user's or their group's budget for the
# month is spent; CPU servers always start
from jupyter_costguard.hub.spawn import budget_hook  # noqa: E402

NOTEBOOKS = ("explore.ipynb", "train.ipynb", "offload.ipynb")


def copy_examples(home: Path) -> None:
    """The example notebooks into a user's home, each only where it is missing: a user's
    edits are theirs on every later spawn."""
    home.mkdir(parents=True, exist_ok=True)
    for name in NOTEBOOKS:
        if not (home / name).exists():
            shutil.copyfile(examples / name, home / name)


async def seed_home(spawner):
    """After the budget check: the user's home with the example notebooks (off the Hub's
    event loop)."""
    await asyncio.to_thread(copy_examples, Path(spawner.home_dir))


c.Spawner.pre_spawn_hook = budget_hook(service_config, then=seed_home)
