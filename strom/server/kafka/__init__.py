"""The Kafka protocol on tablet servers (`kafka.enabled`); see docs/kafka.md.

`messages` decodes and encodes Kafka messages with kio, `records` converts Kafka record batches to
and from the Arrow batches a topic's log table stores, `broker` answers the requests, `listener`
owns the sockets and the SASL exchange, `access` maps Kafka requests onto Fluss ACLs. The tablet
server calls `kafka_listeners` once and adds what it returns to its listener group.
"""

from __future__ import annotations

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError
from strom.rpc.limits import RpcLimits
from strom.rpc.server import RequestObserver
from strom.security.layer import SecurityLayer
from strom.security.listeners import ListenerSettings
from strom.server.kafka.broker import SERVED_VERSIONS, Broker, BrokerContext
from strom.server.kafka.listener import KAFKA_METRIC_KEY_BASE, KafkaListener
from strom.server.kafka.messages import ApiKey

__all__ = ["KAFKA_METRIC_NAMES", "BrokerContext", "kafka_listener_names", "kafka_listeners"]

# request metrics label Kafka requests KAFKA_<API>
KAFKA_METRIC_NAMES = {KAFKA_METRIC_KEY_BASE + key: f"KAFKA_{ApiKey(key).name}" for key in SERVED_VERSIONS}


def kafka_listener_names(config: Configuration, listeners: ListenerSettings) -> list[str]:
    """The bound listeners that speak Kafka; [] unless `kafka.enabled`. Refuses what cannot work:
    no Kafka listener bound, or a Kafka listener that is also the internal one. TLS, SASL (PLAIN) and
    ACLs apply as on Fluss listeners."""
    if not config.get(options.KAFKA_ENABLED):
        return []
    wanted = config.get(options.KAFKA_LISTENER_NAMES)
    bound = [e.listener for e in listeners.bind if e.listener in wanted]
    if not bound:
        raise InvalidConfigError(
            f"kafka.enabled is true, but bind.listeners has no listener named in kafka.listener.names "
            f"({', '.join(wanted)}); add one, e.g. bind.listeners: FLUSS://host:9124, KAFKA://host:9092"
        )
    for name in bound:
        if name == listeners.internal:
            raise InvalidConfigError(
                f"listener {name} cannot be both the internal listener and a Kafka listener"
            )
    return bound


def kafka_listeners(
    server_name: str,
    listeners: ListenerSettings,
    names: list[str],
    context: BrokerContext,
    limits: RpcLimits,
    observer: RequestObserver | None,
    security: SecurityLayer | None = None,
) -> dict[str, KafkaListener]:
    """One listener per Kafka listener name, sharing one broker; `security` is the server's own layer
    (SASL users per listener, the authorizer, the TLS key store), so Kafka and Fluss clients meet the
    same rules."""
    context.security = security
    broker = Broker(context)
    return {
        e.listener: KafkaListener(
            name=server_name,
            host=e.host,
            port=e.port,
            broker=broker,
            limits=limits,
            observer=observer,
            listener=e.listener,
            security=security,
            tls=security.settings.tls_for(e.listener) if security is not None else None,
        )
        for e in listeners.bind
        if e.listener in names
    }
