"""The bottom layer: contracts that several stages and both processes share, each written once.

Standard library only (and `jupyter_core` for the data folder), so the job runner and code inside
kernels may import it: JSON limits on what clients send (`jsonlimits`), whose server this is
(`owner`), UTC periods (`periods`), process-tree facts (`proc`), private atomic writes and the
data folder (`files`), and the server <-> hub service contracts (`hubprotocol`, the report;
`hubbudget`, the budgets a hub hands a server at spawn).
"""
