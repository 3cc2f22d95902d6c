"""examples/jupyterhub/jupyterhub_config.py as shipped, run by a real JupyterHub: the tests
only move its ports and state folder, give its Unix accounts a prefix of their own and add the
tester service they drive the hub with.

Run as root (as CI runs), the example makes a Unix account per hub user at their first spawn
and runs their server as it; `ExampleHub.stop` removes every account of its prefix (and ends
what still runs as one) and the state folder, so a failed test leaves none behind."""

from __future__ import annotations

import http.cookiejar
import os
import pwd
import re
import secrets
import shutil
import stat
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


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to `path` that other accounts may not pass, or `path` if
    they may not read it; None when they reach it (the example's own check)."""
    path = path.absolute()
    for up in reversed(path.parents):
        if not up.stat().st_mode & stat.S_IXOTH:
            return up
    return None if path.stat().st_mode & stat.S_IROTH else path


def why_no_accounts() -> str | None:
    """Why the example cannot run each user as their own account here, or None when it
    can: it needs root, and every account must reach the Python and costguard."""
    if os.geteuid() != 0:
        return "the example makes one Unix account per user only when the Hub runs as root"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "useradd and userdel are not installed"
    for needed in (BIN / "jupyterhub-singleuser", Path(sys.executable).resolve(),
                   Path(jupyter_costguard.__file__).parent, ROOT):
        closed = closed_to_others(needed)
        if closed is not None:
            return f"other accounts cannot reach {needed} ({closed} is closed to them)"
    return None


class ExampleHub(Hub):
    """The example's own config, loaded as is; in its own Unix accounts (`accounts`, named
    `prefix` + the hub user) where `why_no_accounts()` is None."""

    def __init__(self, workdir: Path, users: list[HubUser]) -> None:
        super().__init__(workdir, users)
        self.no_accounts = why_no_accounts()
        self.prefix = f"cg{secrets.token_hex(3)}-"
        #: the state folder: under the test's own folder, or where the accounts can reach it
        #: (pytest's folders are root's alone)
        self._state: Path | None = None
        if self.no_accounts is None:
            self._state = Path(tempfile.mkdtemp(prefix="costguard-example-"))

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
        (what still runs as one ended first: a process of the account blocks userdel) and
        the state folder outside the test's own removed."""
        try:
            super().stop()
        finally:
            self.remove_accounts()
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
