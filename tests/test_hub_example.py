"""examples/jupyterhub/jupyterhub_config.py runs: a real hub from it (ports and the state
folder moved for the test), a user's GPU server, and the costguard service adding it up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hub import ROOT, Hub, wait_for
from tests.support.server_proc import free_port

pytestmark = pytest.mark.timeout(300)
EXAMPLE = ROOT / "examples" / "jupyterhub" / "jupyterhub_config.py"


class ExampleHub(Hub):
    """The example's own config, loaded as is; the test only moves ports and adds the
    tester service it drives the hub with."""

    def write_config(self, chp: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env.update({"COSTGUARD_DEMO_STATE": str(self.dir / "state"),
                         "COSTGUARD_DEMO_PORT": str(self.port),
                         "COSTGUARD_DEMO_SERVICE_PORT": str(self.service_port)})
        self.service_config = EXAMPLE.with_name("costguard_hub_config.py")
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


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    h = ExampleHub(tmp_path_factory.mktemp("example"), [])
    try:
        yield h.start()
    finally:
        h.stop()


def test_the_example_hub_adds_up_a_users_simulated_gpu_server(hub: Hub) -> None:
    hub.start_server("alice", {"profile": "gpu"})
    hub.wait_ready("alice")
    status = hub.server_status("alice")
    assert status["simulated"] is True and status["user"] == "alice"
    assert status["instance"]["instance_type"] == "p4d.24xlarge"
    admin = hub.token_for("admin")
    rows = wait_for(lambda: (lambda s: s[1]["rows"] if s[0] == 200 and s[1]["rows"]
                             and s[1]["rows"][0]["spend"] > 0 else None)(
        hub.service("api/spend?by=group", admin)), 60, "alice's spend on the page")
    assert [r["key"] for r in rows] == ["ml"]
    assert rows[0]["simulated"] is True
    # bob's budget (20 a month) is not spent: a GPU server starts
    status, me = hub.service("api/me", hub.token_for("bob"))
    assert status == 200 and me["budgets"][0]["budget"] == 20.0


def test_the_zero_to_jupyterhub_values_are_what_costguard_reads(tmp_path: Path) -> None:
    import yaml

    from jupyter_costguard.hub.cull import policies_from
    from jupyter_costguard.hub.spawn import load_settings

    values = yaml.safe_load(EXAMPLE.with_name("values.yaml").read_text())
    files = values["hub"]["extraFiles"]
    config = tmp_path / "costguard_hub_config.py"
    config.write_text(files["costguard-hub-config"]["stringData"])
    settings = load_settings(config)
    assert policies_from(settings["cull_policies"])[0].profiles == {"a100", "h100-spot"}
    # every GPU profile is one costguard treats as GPU, and says what it runs on
    for profile in values["singleuser"]["profileList"]:
        env = profile["kubespawner_override"].get("environment", {})
        if profile["slug"] in settings["gpu_profiles"]:
            assert set(env) == {"COSTGUARD_INSTANCE_TYPE", "COSTGUARD_REGION",
                                "COSTGUARD_MARKET"}
            assert profile["kubespawner_override"]["extra_resource_limits"]
    # the culler's config names the same hub config, and both services have a command
    assert files["costguard-hub-config"]["mountPath"] in \
        files["costguard-culler-config"]["stringData"]
    assert {"costguard", "idle-culler"} <= set(values["hub"]["services"])
    # the service's role is the one the example hub (which the tests run) grants
    example_roles = EXAMPLE.read_text()
    for scope in ("list:users", "read:users:name", "read:users:groups", "read:servers",
                  "delete:servers", "access:services!service=costguard"):
        assert f'"{scope}"' in values["hub"]["extraConfig"]["costguard"]
        assert f'"{scope}"' in example_roles
    # and nothing that reaches into a user's server
    for scope in ("access:servers", "admin:servers"):
        assert f'"{scope}"' not in values["hub"]["extraConfig"]["costguard"]
        assert f'"{scope}"' not in example_roles
    # every server knows where to report
    assert values["singleuser"]["extraEnv"]["COSTGUARD_HUB_URL"].endswith(
        "/services/costguard/")
