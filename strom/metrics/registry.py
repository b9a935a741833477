"""One process's metrics and the HTTP endpoint that serves them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError

log = logging.getLogger(__name__)

# `_created` timestamps double every counter's series and no Fluss dashboard uses them
disable_created_metrics()

# request latency buckets in milliseconds (Fluss reports request times in ms)
LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

GaugeSource = Callable[[], Iterable[tuple[Sequence[str], float]]]


class _StateGauges(Collector):
    """Gauges that describe the process's state. Their values are computed on the event loop every
    `STATE_REFRESH_SECONDS` (the state is not safe to read from the HTTP server's thread) and served
    as last computed."""

    def __init__(self) -> None:
        self._gauges: list[tuple[str, str, Sequence[str], GaugeSource]] = []
        self._samples: dict[str, list[tuple[Sequence[str], float]]] = {}

    def add(self, name: str, documentation: str, labelnames: Sequence[str], source: GaugeSource) -> None:
        self._gauges.append((name, documentation, labelnames, source))

    def refresh(self) -> None:
        samples = {}
        for name, _, _, source in self._gauges:
            try:
                samples[name] = list(source())
            except Exception:  # one gauge that cannot be computed now must not hide the others
                log.debug("gauge %s could not be computed", name, exc_info=True)
        self._samples = samples  # swapped whole: the HTTP thread sees one refresh or the other

    def collect(self) -> Iterable[Metric]:
        samples = self._samples
        for name, documentation, labelnames, _ in self._gauges:
            family = GaugeMetricFamily(name, documentation, labels=list(labelnames))
            for labels, value in samples.get(name, ()):
                family.add_metric(list(labels), value)
            yield family


STATE_REFRESH_SECONDS = 2.0


class Metrics:
    """The metrics of one process; `scope` is coordinator, tabletserver or tiering."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.registry = CollectorRegistry(auto_describe=True)
        self._state = _StateGauges()
        self.registry.register(self._state)

    def name(self, group: str, metric: str) -> str:
        parts = ["fluss", self.scope, group, metric] if group else ["fluss", self.scope, metric]
        return "_".join(parts)

    def counter(self, group: str, metric: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(self.name(group, metric), documentation, list(labels), registry=self.registry)

    def gauge(self, group: str, metric: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(self.name(group, metric), documentation, list(labels), registry=self.registry)

    def histogram(
        self, group: str, metric: str, documentation: str, labels: Sequence[str] = (), buckets: Any = None
    ) -> Histogram:
        return Histogram(
            self.name(group, metric),
            documentation,
            list(labels),
            registry=self.registry,
            buckets=buckets or LATENCY_BUCKETS_MS,
        )

    def state_gauge(
        self, group: str, metric: str, documentation: str, labels: Sequence[str], source: GaugeSource
    ) -> None:
        """A gauge whose samples `source` yields as (label values, value); see `refresh_state`."""
        self._state.add(self.name(group, metric), documentation, labels, source)

    async def refresh_state(self, interval: float = STATE_REFRESH_SECONDS) -> None:
        """Recompute the state gauges on the event loop, forever (a task of the server)."""
        while True:
            self._state.refresh()
            await asyncio.sleep(interval)


@dataclass
class MetricsServer:
    host: str
    port: int
    _server: Any

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def parse_ports(text: str) -> range:
    """`9249` or `9250-9260` (inclusive)."""
    low, sep, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high) if sep else int(low)
    except ValueError:
        raise InvalidConfigError(
            f"metrics.reporter.prometheus.port '{text}' is not a port or a range"
        ) from None
    if not 0 <= first <= last <= 65535:
        raise InvalidConfigError(f"metrics.reporter.prometheus.port '{text}' is not a valid port range")
    return range(first, last + 1)


def start_reporter(metrics: Metrics, config: Configuration, host: str) -> MetricsServer | None:
    """Serve the metrics over HTTP when `metrics.reporters` names prometheus; None otherwise."""
    reporters = [r.strip().lower() for r in config.get(options.METRICS_REPORTERS) or []]
    if "prometheus" not in reporters:
        return None
    ports = parse_ports(config.get(options.METRICS_REPORTER_PROMETHEUS_PORT))
    for port in ports:
        try:
            server, _ = start_http_server(port, addr=host, registry=metrics.registry)
        except OSError:
            continue
        bound = server.server_address[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
        return MetricsServer(host, bound, server)
    raise InvalidConfigError(
        f"no free port for the Prometheus reporter in {config.get(options.METRICS_REPORTER_PROMETHEUS_PORT)} "
        f"on {host}"
    )
