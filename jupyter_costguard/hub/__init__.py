"""The JupyterHub side: a managed service that adds up every user server's costguard figures
per user and group (store, poller, report, pages, metrics), culls idle GPU servers, and the
spawn hook that checks budgets. It reads user servers only through their REST API, so it
imports nothing of the server extension."""
