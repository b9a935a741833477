"""Administrative `strom` commands, one module each (`strom/cli.py` registers them with `main`).

The server commands (`coordinator`, `tablet-server`, `tiering`, `local`) stay in `strom/cli.py`;
commands that talk to a running cluster as a client (ACLs, status, rebalance, table changes) live
here so that each concept has its own module.
"""
