"""examples/jupyterhub/jupyterhub_config.py as shipped, run by a real JupyterHub: the tests
only move its ports and state folder, give its Unix accounts a prefix of their own and add the
tester service they drive the hub with.

Run as root (as CI runs), the example makes a Unix account per hub user at their first spawn
and runs their server as it; `ExampleHub.stop` removes every account of its prefix (and ends
what still runs as one) and the state folder, so a failed test leaves none behind."""

from __future__ import annotations

import grp
import http.cookiejar
import os
import pwd
import re
import secrets
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import jupyter_costguard
from tests.support.hub import BIN, ROOT, Hub, HubUser
from tests.support.server_proc import free_port

EXAMPLE = ROOT / "examples" / "jupyterhub" / "jupyterhub_config.py"
#: the logins docs/getting-started/hub.md and the config's comment give (a change there must
#: change these)
USER_PASSWORD = "costguard-demo"
ADMIN_PASSWORD = "costguard-demo-admin-password-loopback"
NOTEBOOKS = ("explore.ipynb", "train.ipynb", "offload.ipynb")


#: the POSIX access ACL's extended attribute, and its entries' tags (acl/include/acl_ea.h)
ACL_XATTR = "system.posix_acl_access"
USER_OBJ, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x04, 0x08, 0x10, 0x20


def closed_to_others() -> list[Path]:
    """The folders on the way to what every account runs (the Python and its standard
    library, jupyterhub-singleuser, costguard, this checkout) that other users may not pass:
    a venv made from a Python in root's home meets /root (0700)."""
    import jupyterhub

    closed: set[Path] = set()
    for needed in (BIN / "jupyterhub-singleuser", Path(sys.executable).resolve(),
                   Path(os.__file__).resolve(), Path(jupyterhub.__file__).resolve(),
                   Path(jupyter_costguard.__file__).resolve(), ROOT):
        closed |= {up for up in needed.parents if not up.stat().st_mode & stat.S_IXOTH}
    return sorted(closed)


def group_may_pass(gid: int, mode: int) -> bytes:
    """A folder's access ACL that keeps its owner's, group's and others' permissions of
    `mode` and lets group `gid` pass (search, not list): the test's accounts reach what they
    run, nobody else gains anything."""
    entries = [(USER_OBJ, (mode >> 6) & 7, 0xFFFFFFFF), (GROUP_OBJ, (mode >> 3) & 7, 0xFFFFFFFF),
               (GROUP, 1, gid), (MASK, ((mode >> 3) & 7) | 1, 0xFFFFFFFF),
               (OTHER, mode & 7, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def why_no_accounts() -> str | None:
    """Why the example cannot run each user as their own account here, or None when it
    can: it needs root, useradd, and folders on the way to the Python it may open to them."""
    if os.geteuid() != 0:
        return "the example makes one Unix account per user only when the Hub runs as root"
    if any(shutil.which(cmd) is None for cmd in ("useradd", "userdel", "groupadd", "groupdel")):
        return "useradd, userdel, groupadd and groupdel are needed"
    for closed in closed_to_others():
        try:
            if ACL_XATTR in os.listxattr(closed):
                return f"{closed} is closed to the accounts and has an ACL of its own"
        except OSError as e:
            return f"{closed} is closed to the accounts and takes no ACL ({e})"
    return None


class ExampleHub(Hub):
    """The example's own config, loaded as is. With `accounts` (and where `why_no_accounts()`
    is None) run as root: each user in their own Unix account, named `prefix` + the hub
    user, all in the group `prefix` + "users"; folders closed to other users on the way to
    the Python the accounts run get an ACL that lets that group pass, removed at `stop`."""

    def __init__(self, workdir: Path, users: list[HubUser], accounts: bool = False) -> None:
        super().__init__(workdir, users)
        self.no_accounts = why_no_accounts() if accounts else "this test runs them as root"
        self.prefix = f"cg{secrets.token_hex(3)}-"
        self.group = self.prefix + "users"
        #: the folders given an ACL, with their modes before
        self.opened: dict[Path, int] = {}
        #: the state folder: under the test's own folder, or where the accounts can reach it
        #: (pytest's folders are root's alone)
        self._state: Path | None = None
        if self.no_accounts is None:
            self._state = Path(tempfile.mkdtemp(prefix="costguard-example-"))

    def start(self, timeout: float = 90.0) -> Hub:
        if self.no_accounts is None:
            subprocess.run(["groupadd", self.group], check=True, capture_output=True)
            gid = grp.getgrnam(self.group).gr_gid
            for closed in closed_to_others():
                mode = stat.S_IMODE(closed.stat().st_mode)
                self.opened[closed] = mode
                os.setxattr(closed, ACL_XATTR, group_may_pass(gid, mode))
            self.env["COSTGUARD_DEMO_ACCOUNT_GROUP"] = self.group
        return super().start(timeout)

    def account(self, user: str) -> pwd.struct_passwd:
        """The Unix account `user`'s server runs as (KeyError before their first spawn)."""
        return pwd.getpwnam(self.prefix + user)

    def write_config(self, chp: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env.update({"COSTGUARD_DEMO_STATE": str(self.state),
                         "COSTGUARD_DEMO_PORT": str(self.port),
                         "COSTGUARD_DEMO_SERVICE_PORT": str(self.service_port),
                         "COSTGUARD_DEMO_ACCOUNT_PREFIX": self.prefix,
                         "COSTGUARD_DEMO_ACCOUNTS": "off" if self.no_accounts else "on"})
        self.service_config = EXAMPLE.with_name("costguard_hub_config.py")
        self.password, self.admin_password = USER_PASSWORD, ADMIN_PASSWORD
        path = self.dir / "jupyterhub_config.py"
        path.write_text(
            "c = get_config()  # noqa\n"
            f"load_subconfig({str(EXAMPLE)!r})\n"
            f"c.JupyterHub.hub_port = {free_port()}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{free_port()}'\n"
            f"c.ConfigurableHTTPProxy.command = [{chp!r}]\n"
            f"c.JupyterHub.services.append({{'name': 'tester', "
            f"'api_token': {self.tester_token!r}}})\n"
            "c.JupyterHub.load_roles.append({'name': 'tester', 'services': ['tester'], "
            "'scopes': ['admin:users', 'admin:servers', 'tokens', 'access:servers']})\n")
        # the tester's token is in it: root's alone, whatever the test folder's mode
        path.chmod(0o600)
        return path

    @property
    def state(self) -> Path:
        return self._state if self._state is not None else self.dir / "state"

    @property
    def service_db(self) -> Path:
        return self.state / "service" / "costguard_hub.sqlite"

    def stop(self) -> None:
        """The hub and its servers stopped, then every account of this hub's prefix removed
        (what still runs as one ended first: a process of the account blocks userdel), the
        ACLs it added and its group removed and the state folder outside the test's own
        removed."""
        try:
            super().stop()
        finally:
            self.remove_accounts()
            for closed, mode in self.opened.items():
                os.removexattr(closed, ACL_XATTR)
                closed.chmod(mode)
            self.opened.clear()
            if self.no_accounts is None:
                subprocess.run(["groupdel", self.group], check=False, capture_output=True)
            if self._state is not None:
                shutil.rmtree(self._state, ignore_errors=True)

    def remove_accounts(self) -> None:
        import psutil

        accounts = [a for a in pwd.getpwall() if a.pw_name.startswith(self.prefix)]
        uids = {a.pw_uid for a in accounts}
        for _ in range(50):
            left = [p for p in psutil.process_iter(["uids"])
                    if p.info["uids"] and p.info["uids"].real in uids]
            if not left:
                break
            for proc in left:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            time.sleep(0.1)
        for a in accounts:
            subprocess.run(["userdel", a.pw_name], check=False, capture_output=True)

    def home(self, user: str) -> Path:
        return self.state / "home" / user

    def form_login(self, user: str, password: str) -> tuple[int, str]:
        """Log in through the Hub's own login form, as a browser posts it: (status, where
        the Hub sends the browser next)."""
        jar = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a: object, **k: object) -> None:
                return None

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar),
                                             NoRedirect)
        with opener.open(self.url + "/hub/login", timeout=30) as resp:
            form = resp.read().decode()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', form)
        body = urllib.parse.urlencode({"username": user, "password": password,
                                       "_xsrf": xsrf.group(1) if xsrf else ""}).encode()
        try:
            with opener.open(urllib.request.Request(self.url + "/hub/login", data=body),
                             timeout=30) as resp:
                return resp.status, resp.headers.get("Location", "")
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Location", "")
