"""examples/jupyterhub/jupyterhub_config.py as shipped, run by a real JupyterHub: the tests
only move its ports and state folder and add the tester service they drive the hub with."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.hub import ROOT, Hub
from tests.support.server_proc import free_port

EXAMPLE = ROOT / "examples" / "jupyterhub" / "jupyterhub_config.py"
#: the logins docs/getting-started/hub.md and the config's comment give (a change there must
#: change these)
USER_PASSWORD = "costguard-demo"
ADMIN_PASSWORD = "costguard-demo-admin-password-loopback"
NOTEBOOKS = ("explore.ipynb", "train.ipynb", "offload.ipynb")


class ExampleHub(Hub):
    """The example's own config, loaded as is."""

    def write_config(self, chp: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env.update({"COSTGUARD_DEMO_STATE": str(self.state),
                         "COSTGUARD_DEMO_PORT": str(self.port),
                         "COSTGUARD_DEMO_SERVICE_PORT": str(self.service_port)})
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
        return path

    @property
    def state(self) -> Path:
        return self.dir / "state"

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
