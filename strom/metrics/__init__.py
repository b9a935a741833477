"""Prometheus metrics of a Strom process (coordinator, tablet server, tiering service).

Each process owns one `Metrics` (its own registry, so tests can run several processes' worth in one
interpreter) that its parts register with at one place each: the RPC server times every request by API,
the log and KV services count bytes and records per table, the replica fetcher counts replication bytes,
and gauges that describe state (leaders, replicas, under-replicated buckets, log sizes, RocksDB memory,
tiering lag) are recomputed on the event loop every two seconds. With `metrics.reporters: prometheus`
the process serves them over HTTP on `metrics.reporter.prometheus.port` (a port, or a range such as
9250-9260 from which the first free one is taken). Names follow Fluss's: `fluss_<scope>_<group>_<metric>`.
"""

from strom.metrics.registry import Metrics, MetricsServer, start_reporter

__all__ = ["Metrics", "MetricsServer", "start_reporter"]
