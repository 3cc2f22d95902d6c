"""`python -m jupyter_costguard.hub`: run the service (JupyterHub starts it as a managed one)."""

from jupyter_costguard.hub.app import main

if __name__ == "__main__":
    main()
