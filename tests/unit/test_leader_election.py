"""The eligible-leader-replica rules (KIP-966) of the coordinator, on bucket states alone."""

from __future__ import annotations

from strom.server.coordinator.leader_election import (
    Election,
    change_isr,
    elect,
    forget_unclean,
    prefer_longest_log,
)
from strom.server.store.base import BucketAssignment

A, B, C = 0, 1, 2


def bucket(leader: int | None, isr: tuple[int, ...], elr: tuple[int, ...] = ()) -> BucketAssignment:
    return BucketAssignment(1, None, 0, (A, B, C), leader, 5, isr, 3, elr)


def test_followers_leaving_below_the_minimum_isr_join_the_elr() -> None:
    a, kind = elect(bucket(A, (A, B, C)), {C}, {A, B}, min_isr=2)
    assert (a.leader, a.isr, a.elr, kind) == (A, (A, B), (), Election.NONE)
    a, kind = elect(a, {B}, {A}, min_isr=2)
    assert (a.leader, a.isr, a.elr) == (A, (A,), (B,))
    assert a.bucket_epoch == 5  # two ISR changes


def test_a_bucket_whose_isr_died_elects_from_the_elr_and_never_an_unclean_replica() -> None:
    # C was paused and left the ISR below the minimum; then A and B lost power
    a, _ = elect(bucket(A, (A, B, C)), {A, B, C}, set(), min_isr=2)
    assert (a.leader, a.isr, set(a.elr)) == (None, (), {A, B, C})
    a = forget_unclean(a, A)
    a = forget_unclean(a, B)
    assert a.elr == (C,)
    a, kind = elect(a, set(), {A, B}, min_isr=2)
    assert (a.leader, kind) == (None, Election.WAITING)
    a, kind = elect(a, set(), {A, B, C}, min_isr=2)
    assert (a.leader, a.isr, a.elr, kind) == (C, (C,), (), Election.ELR)


def test_unclean_election_is_the_tables_choice() -> None:
    a = forget_unclean(bucket(None, (A,)), A)
    a, kind = elect(a, set(), {A, B}, min_isr=1, unclean_allowed=lambda: True)
    assert (a.leader, a.isr, kind) == (A, (A,), Election.UNCLEAN)


def test_every_replica_back_and_none_eligible_elects_the_first() -> None:
    a = bucket(None, (A,))
    for r in (A,):
        a = forget_unclean(a, r)
    a, kind = elect(a, set(), {A, B}, min_isr=1)
    assert kind is Election.WAITING
    a, kind = elect(a, set(), {A, B, C}, min_isr=1)
    assert (a.leader, kind) == (A, Election.LAST_RESORT)
    assert prefer_longest_log(a, {}) == a  # nobody answered: the first in order stays


def test_the_last_resort_prefers_the_latest_epoch_then_the_longest_log() -> None:
    # the campaign's chain: A lost power (its log ends at its last fsync, epoch 18), B and C were killed
    a, _ = elect(bucket(None, ()), set(), {A, B, C}, min_isr=2)
    assert a.leader == A
    b = prefer_longest_log(a, {A: (18, 3202), B: (40, 6334), C: (40, 6334)})
    assert (b.leader, b.isr, b.elr, b.leader_epoch) == (B, (B,), (), a.leader_epoch)  # ties: in order
    assert prefer_longest_log(a, {A: (18, 3202), C: (40, 6334)}).leader == C  # B did not answer
    # a longer log of an older epoch holds records later leaders overwrote: the later epoch wins
    assert prefer_longest_log(a, {A: (41, 100), B: (40, 6334)}).leader == A
    assert prefer_longest_log(a, {A: (40, 6334), B: (40, 6334)}) == a


def test_the_last_isr_member_stays_eligible_with_the_default_minimum() -> None:
    a, _ = elect(bucket(B, (B,)), {B}, {A, C}, min_isr=1)
    assert (a.leader, a.isr, a.elr) == (None, (), (B,))
    a, kind = elect(a, set(), {A, B, C}, min_isr=1)
    assert (a.leader, a.isr, kind) == (B, (B,), Election.ELR)


def test_a_growing_isr_voids_the_elr() -> None:
    a = change_isr(bucket(A, (A, B)), (A,), min_isr=2)
    assert a.elr == (B,)
    a = change_isr(a, (A, C), min_isr=2)
    assert (a.isr, a.elr) == ((A, C), ())


def test_a_leader_that_registers_unclean_keeps_leading() -> None:
    a = bucket(A, (A, B))
    assert forget_unclean(a, A) == a
    assert forget_unclean(a, B).isr == (A,)
