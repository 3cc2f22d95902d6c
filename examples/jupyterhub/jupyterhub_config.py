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
#
# Run as root, the Hub gives each user a Unix account of their own (made with useradd at their
# first spawn, named COSTGUARD_DEMO_ACCOUNT_PREFIX + their name, "costguard-demo-alice" by
# default) and runs their server as it, as JupyterHub's LocalProcessSpawner does: homes and
# data folders 0700 and theirs, the Hub's and the service's files root's alone. Run as any
# other user (or with COSTGUARD_DEMO_ACCOUNTS=off), every server runs as that one account
# and can read the others' files (docs/admin/security.md).
import asyncio
import json
import os
import pwd
import subprocess
import sys
import threading
from pathlib import Path

here = Path(__file__).resolve().parent
examples = here.parent
c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

# one account per user needs root (to create the accounts and to start a process as one)
ACCOUNTS = os.geteuid() == 0 and os.environ.get("COSTGUARD_DEMO_ACCOUNTS", "on") != "off"
ACCOUNT_PREFIX = os.environ.get("COSTGUARD_DEMO_ACCOUNT_PREFIX", "costguard-demo-")
# a group every account joins, where the site has one (one that may read the Python, say)
ACCOUNT_GROUP = os.environ.get("COSTGUARD_DEMO_ACCOUNT_GROUP", "")
# root's home is closed to other accounts: a root hub keeps its state where they can pass
default_state = Path("/srv/costguard-hub-demo") if ACCOUNTS \
    else Path.home() / ".costguard-hub-demo"
state = Path(os.environ.get("COSTGUARD_DEMO_STATE", default_state))
state.mkdir(parents=True, exist_ok=True)
os.environ["COSTGUARD_DEMO_STATE"] = str(state)
port = int(os.environ.get("COSTGUARD_DEMO_PORT", "8000"))


def folder(path: Path, mode: int) -> Path:
    """`path` made (its parents too) with exactly `mode`: 0700 for what is the Hub's alone,
    0711 where the users' accounts pass through to their own folders but list nothing."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


# the state folder lets the accounts pass to their homes and data folders (and lists nothing);
# the Hub's database, cookie secret and proxy pid file are in a folder of root's alone, and
# so is the costguard service's database (costguard_hub_config.py)
folder(state, 0o711 if ACCOUNTS else 0o700)
hub_files = folder(state / "hub", 0o700)
folder(state / "service", 0o700)

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.db_url = f"sqlite:///{hub_files / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub_files / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(hub_files / "proxy.pid")
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
homes = folder(state / "home", 0o711 if ACCOUNTS else 0o700)
singleuser = Path(sys.executable).with_name("jupyterhub-singleuser")
c.Spawner.cmd = [str(singleuser)]
c.Spawner.default_url = "/lab"
if ACCOUNTS:
    from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid

    class AccountSpawner(LocalProcessSpawner):
        """JupyterHub's LocalProcessSpawner (setuid to the user's account before the server
        starts), with the demo's account names (the prefix keeps them apart from the
        machine's own) and homes under the state folder."""

        @property
        def account(self) -> str:
            return ACCOUNT_PREFIX + self.user.name

        @property
        def home_dir(self) -> str:
            return str(homes / self.user.name)

        def make_preexec_fn(self, name):
            become = set_user_setuid(self.account, chdir=False)
            home = self.home_dir

            def preexec():
                become()
                os.chdir(home)
            return preexec

        def user_env(self, env):
            env.update(USER=self.account, HOME=self.home_dir,
                       SHELL=pwd.getpwnam(self.account).pw_shell or "/bin/sh")
            return env

    c.JupyterHub.spawner_class = AccountSpawner
else:
    c.JupyterHub.spawner_class = "simple"
    c.SimpleLocalProcessSpawner.home_dir_template = str(homes / "{username}")
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
    path = conf_folder(user) / "trace.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o644)  # the folder keeps other users out, whatever root's umask
    return path


def conf_folder(user: str) -> Path:
    """The user's server configuration and trace: root's, which only the user's account may
    read (the spawn hook gives it the account's group)."""
    folder(state / "conf", 0o711 if ACCOUNTS else 0o700)
    return folder(state / "conf" / user, 0o750)


def data_folder(user: str) -> Path:
    """The user's own costguard data folder (0700, their account's from their first spawn):
    their ledger, batch jobs, hibernated kernels' snapshots and the key that signs them,
    shared with no other user."""
    folder(state / "users", 0o711 if ACCOUNTS else 0o700)
    own = state / "users" / user
    own.mkdir(mode=0o700, exist_ok=True)
    own.chmod(0o700)
    return own


OFFSETS = {"alice": 0.0, "bob": 0.25, "carol": 0.5, "admin": 0.75}
for user, offset in OFFSETS.items():
    common = {
        # beside it: their snapshots, the snapshots' index and the key that signs them
        "db_path": str(data_folder(user) / "ledger.sqlite"),
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
        # readable by the account whatever root's umask: conf_folder keeps the others out
        conf = folder(conf_folder(user) / profile, 0o755)
        (conf / "jupyter_server_config.json").write_text(json.dumps(
            {"CostGuard": {**common, **own},
             # each user's own batch jobs (their Jobs panel lists theirs only)
             "Offload": {"jobs_dir": str(data_folder(user) / "jobs")}}))
        # jupyter_core's one-time move of ~/.ipython's config writes this marker into the
        # configuration folder, which is root's: written here, the server finds it and
        # leaves its configuration alone
        (conf / "migrated").write_text("the demo's configuration: nothing to migrate\n")
        for written in conf.iterdir():
            written.chmod(0o644)


def config_dir(spawner) -> str:
    """The user's configuration for the profile this spawn runs (the spawn hook has named
    it in the user options)."""
    profile = (spawner.user_options or {}).get("profile") or "gpu"
    return str(conf_folder(spawner.user.name) / ("cpu" if profile == "cpu" else "gpu"))


service_port = int(os.environ.get("COSTGUARD_DEMO_SERVICE_PORT", "10101"))
c.Spawner.environment = {
    "JUPYTER_CONFIG_DIR": config_dir,
    # JupyterLab keeps the user's settings and workspaces in their home, not in the
    # configuration folder (root's)
    "JUPYTERLAB_SETTINGS_DIR": lambda spawner: str(
        homes / spawner.user.name / ".jupyter" / "lab" / "user-settings"),
    "JUPYTERLAB_WORKSPACES_DIR": lambda spawner: str(
        homes / spawner.user.name / ".jupyter" / "lab" / "workspaces"),
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


#: one useradd at a time: two users spawning together would race for /etc/passwd's lock
ACCOUNTS_LOCK = threading.Lock()


def make_account(user: str, name: str, home: Path) -> pwd.struct_passwd:
    """The Unix account `name` for hub user `user`, made with useradd where it is missing
    (no password: nobody logs in as it, the Hub starts processes as it), its home 0700 and
    its own, its data folder 0700 and its own, its configuration readable by its group."""
    with ACCOUNTS_LOCK:
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            shell = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
            made = subprocess.run(
                ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", shell,
                 "--user-group", *(["--groups", ACCOUNT_GROUP] if ACCOUNT_GROUP else []),
                 "--comment", f"costguard demo hub user {user}", name],
                capture_output=True, text=True)
            if made.returncode != 0:
                raise RuntimeError(f"useradd {name}: {made.stderr.strip()}") from None
            account = pwd.getpwnam(name)
    if account.pw_uid == 0 or account.pw_gid == 0:
        raise PermissionError(f"{name} is a root account: no server runs as it")
    home.mkdir(exist_ok=True)
    for own in (home, data_folder(user)):
        os.chown(own, account.pw_uid, account.pw_gid, follow_symlinks=False)
        own.chmod(0o700)
    os.chown(conf_folder(user), 0, account.pw_gid)
    # the account runs the Hub's Python, costguard and jupyterhub-singleuser, in its home:
    # say so here when it cannot (a venv in root's home, say) rather than as a server that
    # never answers
    from jupyterhub.spawner import set_user_setuid

    check = subprocess.run(
        [sys.executable, "-c", "import os, sys, jupyter_costguard; os.listdir(sys.argv[1]); "
         "open(sys.argv[2]).close()", str(home), str(singleuser)],
        preexec_fn=set_user_setuid(name, chdir=False), capture_output=True, text=True)
    if check.returncode != 0:
        raise PermissionError(
            f"the account {name} cannot run {sys.executable} with costguard in {home} "
            f"(a folder on the way closed to other users?): {check.stderr.strip()[-500:]}")
    return account


def copy_examples(home: Path, owner: pwd.struct_passwd | None) -> None:
    """The example notebooks into a user's home, each only where it is missing: a user's
    edits are theirs on every later spawn. Created new (never through a link the user left
    there: root writes them) and given to the user's account."""
    home.mkdir(parents=True, exist_ok=True)
    for name in NOTEBOOKS:
        try:
            fd = os.open(home / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            if owner is not None:
                os.fchown(out.fileno(), owner.pw_uid, owner.pw_gid)
            out.write((examples / name).read_bytes())


def prepare_user(spawner) -> None:
    """The user's account (where the Hub runs as root) and home with the notebooks."""
    home = Path(spawner.home_dir)
    owner = make_account(spawner.user.name, spawner.account, home) if ACCOUNTS else None
    copy_examples(home, owner)


async def seed_home(spawner):
    """After the budget check: the user's account, and their home with the example
    notebooks (off the Hub's event loop)."""
    await asyncio.to_thread(prepare_user, spawner)


c.Spawner.pre_spawn_hook = budget_hook(service_config, then=seed_home)
