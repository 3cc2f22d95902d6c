"""Browser tests: real JupyterLab and Notebook 7 pages in Chromium against real servers."""
