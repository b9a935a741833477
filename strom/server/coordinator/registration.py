"""Whether a RegisterTabletServer may take effect.

Registration decides where the coordinator sends leadership, so a bad one hijacks buckets: an empty
request must not register server 0 at port 0, a second process must not take over the session of a
live server from another address, and an address nobody serves must not be handed buckets. A restart
of a live server (the same id at the same address) replaces its session, as before.
"""

from __future__ import annotations

import ssl

from strom.common.errors import CorruptMessageError, FlussError, InvalidConfigError
from strom.rpc.api import ServerType
from strom.rpc.client import RpcConnection
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.coordinator.membership import Membership

PROBE_TIMEOUT = 3.0


async def check_registration(
    request: internal.RegisterTabletServerRequest, membership: Membership, tls: ssl.SSLContext | None = None
) -> None:
    """`tls`: how servers reach each other's internal listener (None: PLAINTEXT or SASL)."""
    missing = [name for name in ("server_id", "host", "port") if not request.HasField(name)]
    if missing:
        raise CorruptMessageError(f"RegisterTabletServer without {', '.join(missing)}")
    if request.server_id < 0 or not request.host or not 0 < request.port < 65536:
        raise CorruptMessageError(
            f"RegisterTabletServer with server id {request.server_id} at {request.host}:{request.port}"
        )
    live = membership.servers.get(request.server_id)
    # a server remembered from before a coordinator restart is not confirmed live: it may have moved
    if live is not None and not live.remembered and (live.host, live.port) != (request.host, request.port):
        raise InvalidConfigError(
            f"tablet server {request.server_id} is live at {live.host}:{live.port}; a second server with "
            f"the same tablet-server.id cannot register from {request.host}:{request.port}"
        )
    try:
        probe = await RpcConnection.connect(
            request.host,
            request.port,
            connect_timeout=PROBE_TIMEOUT,
            expected_server_type=ServerType.TABLET_SERVER,
            tls=tls,
        )
        probe.close()
    except FlussError as e:
        raise InvalidConfigError(
            f"tablet server {request.server_id} cannot register: the coordinator cannot reach it at "
            f"{request.host}:{request.port} ({e})"
        ) from None
