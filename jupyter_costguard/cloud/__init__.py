"""What the machine itself says about where it runs: the cloud's metadata service (instance
type, region, spot or on-demand) and the container's share of the instance.

A leaf stage feeding cost/: stdlib only, nothing else from jupyter_costguard, nothing from
jupyter_server or traitlets. Its lookups block; the server runs them on a worker thread.
"""
