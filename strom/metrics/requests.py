"""Requests by API: how many, how many failed, how long they took, how large they were."""

from __future__ import annotations

from typing import Any

from strom.metrics.registry import Metrics
from strom.rpc.api import ApiKey


class RequestMetrics:
    """The RPC server's `RequestObserver`."""

    def __init__(self, metrics: Metrics, names: dict[int, str] | None = None) -> None:
        # keys outside Fluss's API (the Kafka listener's) and their label
        self._names = names or {}
        self._requests = metrics.counter("request", "requests", "Requests answered, by API.", ["api"])
        self._errors = metrics.counter(
            "request", "errors", "Requests answered with an error, by API.", ["api"]
        )
        self._time = metrics.histogram(
            "request", "totalTimeMs", "Time from a request's arrival to its answer, by API.", ["api"]
        )
        self._bytes = metrics.counter("request", "requestBytes", "Bytes of request bodies, by API.", ["api"])
        self._children: dict[int, tuple[Any, Any, Any, Any]] = {}

    def observe(self, api_key: int, seconds: float, failed: bool, request_bytes: int) -> None:
        children = self._children.get(api_key)
        if children is None:
            try:
                api = self._names.get(api_key) or ApiKey(api_key).name
            except ValueError:
                api = "UNKNOWN"  # unknown keys share one label: clients choose them
            children = (
                self._requests.labels(api),
                self._errors.labels(api),
                self._time.labels(api),
                self._bytes.labels(api),
            )
            self._children[api_key] = children
        requests, errors, latency, size = children
        requests.inc()
        if failed:
            errors.inc()
        latency.observe(seconds * 1000)
        size.inc(request_bytes)
