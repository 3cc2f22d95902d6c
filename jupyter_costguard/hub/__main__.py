"""`python -m jupyter_costguard.hub`: run the service (JupyterHub starts it as a managed one).

The service needs JupyterHub's client library, which only the `[hub]` extra installs: without
it, say in one line what to install (exit 2) rather than show a traceback."""

import sys

INSTALL_HINT = ("costguard-hub needs JupyterHub's library: install jupyter-costguard with its "
                'hub extra (pip install ".[hub]" in a clone, or the wheel with [hub])')


def run() -> None:
    try:
        from jupyter_costguard.hub.app import main
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "jupyterhub":
            raise
        print(f"{INSTALL_HINT} ({e})", file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    run()
