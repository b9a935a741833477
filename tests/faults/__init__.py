"""The multi-host fault campaign: a cluster on network namespaces (`bed`, `netbed`), a seeded nemesis,
a recorded workload and a history checker. `python -m tests.faults --minutes M --seed N` runs it."""
