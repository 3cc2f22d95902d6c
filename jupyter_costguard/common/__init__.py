"""The bottom layer: contracts that several stages and both processes share, each written once.

JSON limits on what clients send (`jsonlimits`), the REST API's request schemas read from its
OpenAPI document (`apischema`), whose server this is (`owner`), UTC periods (`periods`),
process-tree facts (`proc`), private atomic writes and the data folder (`files`), the one way
costguard opens its SQLite files and migrates them (`sqlite`), and the server <-> hub service
contracts (`hubprotocol`, the report; `hubbudget`, the budgets a hub hands a server at spawn),
and whether a GPU is busy, idle or unknown (`gpuactivity`, one rule and one threshold default).
All but `apischema` (pyyaml, jsonschema) are standard library only (and `jupyter_core` for the
data folder), so the job runner and code inside kernels may import them.
"""
