"""Who may do what over the Kafka protocol: Kafka's operations mapped onto Fluss's ACL model and
decided by the tablet server's own security layer, the authorizer the Fluss RPC path uses, so
`strom acl` governs both protocols (the mapping is in docs/kafka.md).

- a topic is the table `<kafka.database>.<topic>`: Produce needs WRITE on it, Fetch READ, Metadata,
  ListOffsets and DescribeConfigs DESCRIBE, DeleteTopics DROP; CreateTopics needs CREATE on the
  database, as Fluss's CreateTable does;
- a consumer group is Strom's GROUP resource named by the group id (Fluss has no groups; a grant on
  the cluster covers every group, as in Kafka), with Kafka's operations: READ to join, sync,
  heartbeat, leave and commit, DESCRIBE to find the coordinator, fetch offsets, describe and list;
- an idempotent producer (InitProducerId) needs WRITE on some resource, as Fluss's InitWriter
  without tables does; broker configs need DESCRIBE on the cluster.

Sessions the security layer trusts (super users, the servers' own login) skip the ACLs, as on the
Fluss path; without `authorizer.enabled` everything is allowed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom.rpc.server import Session
from strom.security.acl import OperationType, Resource
from strom.security.layer import SecurityLayer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaAccess:
    security: SecurityLayer | None
    database: str

    def _checked(self, session: Session) -> bool:
        """True when this session's requests go through the ACLs."""
        return (
            self.security is not None
            and self.security.authorizer is not None
            and not self.security.is_trusted(session.listener, session.principal)
        )

    def _may(
        self, session: Session, operation: OperationType, resource: Resource, quiet: bool = False
    ) -> bool:
        if not self._checked(session):
            return True
        assert self.security is not None
        if self.security.may(session.principal, session.host, operation, resource):
            return True
        if quiet:  # a listing leaves it out; nothing was refused
            return False
        log.warning(
            "refused Kafka request from %s: %s may not %s %s",
            session.peer,
            session.principal,
            operation.name,
            resource,
        )
        return False

    def topic(self, session: Session, operation: OperationType, name: str) -> bool:
        return self._may(session, operation, Resource.table(self.database, name))

    def group(self, session: Session, operation: OperationType, group_id: str, quiet: bool = False) -> bool:
        return self._may(session, operation, Resource.group(group_id), quiet)

    def create_topics(self, session: Session) -> bool:
        return self._may(session, OperationType.CREATE, Resource.database(self.database))

    def cluster(self, session: Session, operation: OperationType) -> bool:
        return self._may(session, operation, Resource.cluster())

    def describable(self, session: Session, names: list[str]) -> list[str]:
        """The topics among `names` the session may describe (listings leave the others out, quietly,
        as Kafka's do)."""
        if not self._checked(session):
            return names
        assert self.security is not None
        return [
            n
            for n in names
            if self.security.may(
                session.principal, session.host, OperationType.DESCRIBE, Resource.table(self.database, n)
            )
        ]

    def idempotent_write(self, session: Session) -> bool:
        if not self._checked(session):
            return True
        assert self.security is not None and self.security.authorizer is not None
        if self.security.authorizer.has_any_grant(session.principal, session.host, OperationType.WRITE):
            return True
        log.warning("refused InitProducerId from %s: %s may WRITE nothing", session.peer, session.principal)
        return False
