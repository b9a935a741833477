"""Who may lead a bucket: the ISR, then the eligible leader replicas (Kafka's KIP-966), else nobody.

A replica is *eligible* when it holds every acknowledged record: it is in the ISR, or in the ELR.
The ELR takes the replicas that leave the ISR while the ISR is below
`log.replica.min-in-sync-replicas-number`: from then on no acks=all write commits (the leader refuses
them), so what they hold is still everything acknowledged. A replica whose server restarts after an
unclean shutdown (kill -9, power loss) may have lost its unflushed tail: it leaves the ISR and the ELR
and becomes eligible again only by catching up from a leader and rejoining the ISR.

A bucket without a live eligible replica waits (leader none) rather than electing one that may have
lost acknowledged records, with two exceptions:
- `table.unclean.leader.election.enabled` elects any live replica at once (availability over
  durability, as Kafka's `unclean.leader.election.enable`);
- when every replica is live and none is eligible (all of them restarted uncleanly, e.g. the single
  replica of an RF-1 bucket after kill -9), waiting cannot bring anything back: the replica with the
  latest leader epoch and then the longest log leads (`prefer_longest_log`; the coordinator asks each
  replica, as Kafka's unclean recovery does). Once all replicas of a bucket were killed, only some of
  them lost power: the others still hold every acknowledged record, and the first in assignment order
  may be one that lost them (a 10-minute campaign lost 3,132 acknowledged appends that way).

These are pure functions over `BucketAssignment`, so the rules are unit-tested without servers.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Set

from strom.server.store.base import BucketAssignment


class Election(enum.Enum):
    NONE = "none"  # no leader change
    ISR = "isr"  # a live ISR member leads
    ELR = "elr"  # a live eligible leader replica leads
    UNCLEAN = "unclean"  # a live replica that may have lost data leads, by the table's choice
    LAST_RESORT = "last-resort"  # every replica is live and none is eligible
    WAITING = "waiting"  # no eligible replica is live: leader none until one comes back


def _ordered(a: BucketAssignment, members: Set[int]) -> list[int]:
    return [r for r in a.replicas if r in members]


def shrink_isr(
    a: BucketAssignment, removed: Set[int], min_isr: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ISR, ELR) once `removed` leave the ISR: below the minimum ISR they still hold everything
    acknowledged, so they join the ELR."""
    gone = set(a.isr) & set(removed)
    isr = tuple(r for r in a.isr if r not in gone)
    elr = set(a.elr) - set(isr)
    if len(isr) < min_isr:
        elr |= gone
    else:
        elr = set()  # acks=all writes commit again without them: they fall behind the HW
    return isr, tuple(_ordered(a, elr))


def change_isr(a: BucketAssignment, isr: tuple[int, ...], min_isr: int) -> BucketAssignment:
    """The leader changed the ISR (AdjustIsr). A member it drops lagged, but still holds everything
    up to the high watermark, so everything acknowledged: below the minimum ISR it joins the ELR. Members
    leave the ELR as they rejoin the ISR, and an ISR back at the minimum voids the ELR."""
    removed = set(a.isr) - set(isr)
    elr: set[int] = set() if len(isr) >= min_isr else (set(a.elr) | removed) - set(isr)
    return dataclasses.replace(a, isr=isr, elr=tuple(_ordered(a, elr)), bucket_epoch=a.bucket_epoch + 1)


def elect(
    a: BucketAssignment,
    dead: Set[int],
    live: Set[int],
    min_isr: int,
    unclean_allowed: Callable[[], bool] = lambda: False,
) -> tuple[BucketAssignment, Election]:
    """The bucket after servers `dead` went away (possibly none): a dead leader is replaced, dead
    followers leave the ISR. `live` are the servers that may lead now; `unclean_allowed` is asked only
    when no eligible replica is live (it reads the table's options)."""
    isr, elr = shrink_isr(a, dead, min_isr)
    if a.leader is not None and a.leader not in dead:
        if (isr, elr) == (a.isr, a.elr):
            return a, Election.NONE
        # a dead follower leaves the ISR at once, so acks=all writes do not wait for it
        return dataclasses.replace(a, isr=isr, elr=elr, bucket_epoch=a.bucket_epoch + 1), Election.NONE
    candidates = [r for r in isr if r in live]
    kind = Election.ISR
    if not candidates:
        candidates = [r for r in _ordered(a, set(elr)) if r in live]
        kind = Election.ELR
    if not candidates and unclean_allowed():
        candidates = [r for r in a.replicas if r in live]
        kind = Election.UNCLEAN
    if not candidates and not isr and not elr and all(r in live for r in a.replicas):
        candidates = list(a.replicas)
        kind = Election.LAST_RESORT
    if not candidates:
        if a.leader is None and (isr, elr) == (a.isr, a.elr):
            return a, Election.WAITING
        return (
            dataclasses.replace(a, leader=None, leader_epoch=a.leader_epoch + 1, isr=isr, elr=elr),
            Election.WAITING,
        )
    leader = candidates[0]
    if kind is Election.ISR:
        new_isr, new_elr = isr, elr
    elif kind is Election.ELR:
        # the others stay eligible: the ISR is below the minimum until they rejoin it
        new_isr, new_elr = (leader,), tuple(r for r in elr if r != leader)
    else:
        new_isr, new_elr = (leader,), ()
    return (
        dataclasses.replace(a, leader=leader, leader_epoch=a.leader_epoch + 1, isr=new_isr, elr=new_elr),
        kind,
    )


def forget_unclean(a: BucketAssignment, server_id: int) -> BucketAssignment:
    """A replica restarted after an unclean shutdown: it may have lost its unflushed tail, so it is
    no longer eligible (the ISR of a live leader does not hold it already: its restart removed it)."""
    if server_id not in a.isr and server_id not in a.elr:
        return a
    if a.leader == server_id:
        return a  # it leads already (the coordinator learned of the restart late): nothing to undo
    return dataclasses.replace(
        a,
        isr=tuple(r for r in a.isr if r != server_id),
        elr=tuple(r for r in a.elr if r != server_id),
        bucket_epoch=a.bucket_epoch + 1,
    )


def prefer_longest_log(a: BucketAssignment, log_ends: Mapping[int, tuple[int, int]]) -> BucketAssignment:
    """A last-resort or unclean leader (`a` was just elected so): of the replicas that reported their log as
    (latest leader epoch, log end offset), the greatest leads; assignment order breaks ties. A later
    epoch wins over a longer log: a longer log of an older epoch holds records the later leaders
    overwrote. Without a report, `a` stays as elected."""
    known = [r for r in a.replicas if r in log_ends]
    if not known:
        return a
    best = max(known, key=lambda r: log_ends[r])  # the first of equals: assignment order
    if best == a.leader:
        return a
    return dataclasses.replace(a, leader=best, isr=(best,), elr=())
