"""Errors of lake commits (Fluss has no codes for them; they never travel on the wire)."""

from __future__ import annotations

from strom.common.errors import FlussError

__all__ = ["LakeCommitConflictError", "StaleLakeCommitError"]


class StaleLakeCommitError(FlussError):
    """The commit's offsets are not ahead of the lake's latest tiered snapshot.

    A restarted or duplicated tiering job would commit records the lake already holds; the round
    must be dropped (abort its results) and restarted from the lake's offsets.
    """


class LakeCommitConflictError(FlussError):
    """The lake table changed under the round (e.g. files it deletes from were rewritten).

    Nothing was committed; abort the results and run the round again.
    """

    retriable = True
