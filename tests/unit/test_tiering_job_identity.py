"""Who holds a table: the identity a tiering heartbeat carries (Strom's extension fields, or only the
connection's address and principal for a Fluss-shaped request), recorded per table and per job."""

from __future__ import annotations

import asyncio
import logging

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from strom.common.table_path import TablePath
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext, Session
from strom.security.acl import Principal
from strom.server.coordinator import tiering_jobs
from strom.server.coordinator.lake_tiering import LakeTieringManager, TieringState
from strom.server.coordinator.tiering_jobs import TieringJob, TieringJobRegistry


def context(peer: str, principal: Principal | None = None) -> RequestContext:
    return RequestContext(api_version=0, peer=peer, session=Session(peer, principal=principal))


def test_a_fluss_shaped_heartbeat_is_known_by_its_connection() -> None:
    request = pb.LakeTieringHeartbeatRequest(request_table=True)
    job = TieringJob.of(request, context("10.0.0.3:52808", Principal.user("tiering")))
    assert job == TieringJob("", "", "10.0.0.3:52808", "User:tiering")
    assert str(job) == "unnamed job (10.0.0.3:52808)"


def test_the_extension_fields_name_the_job_and_fluss_parsers_skip_them() -> None:
    request = pb.LakeTieringHeartbeatRequest(
        request_table=True, tiering_job_name="nightly", tiering_job_application_id="app-1-0002"
    )
    job = TieringJob.of(request, context("10.0.0.3:52808"))
    assert (job.name, job.application_id, job.principal) == ("nightly", "app-1-0002", "")
    assert str(job) == "nightly (10.0.0.3:52808, app-1-0002)"
    # a parser that knows only Fluss's fields (the message without the extensions) skips them
    fluss_only = fluss_shaped(pb.LakeTieringHeartbeatRequest)()
    fluss_only.ParseFromString(request.SerializeToString())
    assert fluss_only.request_table and not hasattr(fluss_only, "tiering_job_name")
    assert [f.name for f, _ in fluss_only.ListFields()] == ["request_table"]


def fluss_shaped(message_class: type[Message]) -> type[Message]:
    """The message class without Strom's extension fields (numbers 1000 and above): Fluss's shape."""
    file = descriptor_pb2.FileDescriptorProto()
    message_class.DESCRIPTOR.file.CopyToProto(file)
    file.name = "fluss_shaped.proto"
    file.package = "fluss_shaped"
    for message in file.message_type:
        kept = [f for f in message.field if f.number < 1000]
        del message.field[:]
        message.field.extend(kept)
        for field in message.field:
            if field.type_name:  # setting "" would mark a scalar field as typed
                field.type_name = field.type_name.replace(".strom.fluss.", ".fluss_shaped.")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    name = f"fluss_shaped.{message_class.DESCRIPTOR.name}"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_the_manager_records_the_holder_and_names_it_when_it_times_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = TieringJob("a", "app-a", "127.0.0.1:1", "User:ANONYMOUS")
    b = TieringJob("b", "", "127.0.0.1:2", "User:ANONYMOUS")

    async def main() -> None:
        manager = LakeTieringManager(job_timeout=0.2)
        manager.add_existing_table(7, TablePath("db", "t"), freshness=0.0, last_tiered=0.0)
        await asyncio.sleep(0.01)  # due at once
        assignment = manager.request_table(a)
        assert assignment is not None and manager.tables[7].job == a
        manager.heartbeat(7, assignment.epoch, a)
        assert manager.tables[7].last_heartbeat_wall > 0
        await asyncio.sleep(0.25)
        with caplog.at_level(logging.WARNING):
            assert manager.expire_silent_jobs() == [7]
        assert "tiering job a (127.0.0.1:1, app-a) of table 7 timed out" in caplog.text
        # the next holder replaces it; the table keeps its last holder after the round
        again = manager.request_table(b)
        assert again is not None and again.epoch == assignment.epoch + 1
        assert manager.tables[7].job == b
        manager.finish(7, again.epoch)
        assert manager.tables[7].state == TieringState.SCHEDULED and manager.tables[7].job == b

    asyncio.run(main())


def test_the_registry_forgets_silent_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(tiering_jobs.time, "monotonic", lambda: now[0])
    registry = TieringJobRegistry(timeout=10.0)
    a, b = TieringJob("a", "", "h:1", ""), TieringJob("b", "", "h:2", "")
    registry.seen(a)
    now[0] += 4
    registry.seen(b)
    now[0] += 5
    assert registry.active() == [(a, 9.0), (b, 5.0)]
    now[0] += 2
    assert registry.active() == [(b, 7.0)]
    assert registry.age(a) is None and registry.age(b) == 7.0
