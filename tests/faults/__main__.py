"""`python -m tests.faults --minutes M --seed N [--json]`: a fault campaign on a multi-host bed (run as root:
it makes network namespaces). Prints a table of rounds and the checker's verdict; with --json the last
line is one JSON object. Exits 0 when the history is valid, 1 when the checker found anomalies."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from .campaign import Settings, run
from .nemesis import KINDS


def interrupted(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds through the campaign's finally blocks, which stop processes and remove the
    # namespaces; atexit does the same if anything is left
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--minutes", type=float, default=None, help="run rounds for this long")
    parser.add_argument("--rounds", type=int, default=None, help="or run exactly this many rounds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"comma-separated nemesis kinds ({','.join(KINDS)})"
    )
    parser.add_argument("--hold", type=float, default=6.0, help="seconds each fault lasts at least")
    parser.add_argument(
        "--recover", type=float, default=4.0, help="seconds of healed writing after each fault"
    )
    parser.add_argument("--no-tiering", action="store_true", help="no Spark tiering service, no lake check")
    parser.add_argument(
        "--dir", type=Path, default=None, help="data directory (default: a new temporary one)"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON line of figures")
    args = parser.parse_args()
    if args.minutes is None and args.rounds is None:
        args.minutes = 5.0
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown nemesis kinds {unknown}; known: {KINDS}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    outcome = run(
        Settings(
            seed=args.seed,
            minutes=args.minutes,
            rounds=args.rounds,
            kinds=kinds,
            hold_s=args.hold,
            recover_s=args.recover,
            tiering=not args.no_tiering,
            base_dir=args.dir,
        )
    )
    print(outcome.table())
    print(f"logs and history: {outcome.base_dir}")
    if args.json:
        print(json.dumps(outcome.summary()))
    return 0 if outcome.check.valid else 1


if __name__ == "__main__":
    sys.exit(main())
