"""Hibernate, server side (issue 37): save a kernel's variables, free its GPUs, restore them
into a new kernel of the same notebook.

The kernel does the saving and loading (`kernel/hibernate`); the server decides where, vouches
for what it wrote, and refuses what it did not write. Modules: `errors` (the one refusal),
`settings` (its options), `store` (the snapshots' folder and their index), `mac` (the key and
the MAC that binds a snapshot to its notebook and owner), `kernelcall` (one cell run in a
kernel through the server's kernel manager), `requests` (what a restore may send), `service`
(hibernate, restore, list, delete).
"""
