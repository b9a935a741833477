"""A long fuzz run: mutated requests for every API (tests/fuzzer.py) against a two-tablet-server cluster
with a client and an internal listener, reporting frames/s, answers by error code, server memory over
the run, and whether the reference table survived byte for byte. The test suite runs the same fuzzer
for a few thousand frames; this is for millions.

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--seed N] [--pipeline 200] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fuzzer import (
    REFERENCE,
    Findings,
    FuzzCluster,
    frame_batch,
    fuzz_target,
    read_reference,
    rss,
    run_round,
    seed_tables,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--pipeline", type=int, default=200, help="frames per connection round")
    parser.add_argument(
        "--smoke", action="store_true", help="the smallest run: it shows the benchmark still works"
    )
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.seed = 1_000, 1 if args.seed is None else args.seed
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="strom-fuzz-") as base:
        fc = FuzzCluster(Path(base))
        try:
            seed_tables(fc)
            target = fuzz_target(fc)
            total = Findings()
            peak = dict(fc.memory_before)
            started = time.monotonic()
            last_report = started

            async def run() -> None:
                nonlocal last_report
                next_id = 1
                round_number = 0
                while total.frames < args.frames and fc.all_alive():
                    host, port = (fc.coordinator, *fc.tablets)[round_number % 3]
                    frames = frame_batch(rng, target, args.pipeline, next_id, tablet=round_number % 3 != 0)
                    next_id = (next_id + args.pipeline) % (1 << 30)
                    round_number += 1
                    total.merge(await run_round(host, port, frames))
                    now = time.monotonic()
                    if now - last_report > 10:
                        last_report = now
                        for pid in peak:
                            peak[pid] = max(peak[pid], rss(pid))
                        print(
                            f"{total.frames:>9} frames  {total.frames / (now - started):7.0f}/s  "
                            f"RSS MB {[rss(p) >> 20 for p in peak]}  unknown errors "
                            f"{len(total.unknown_server_errors)}  unanswered {len(total.unanswered)}",
                            flush=True,
                        )

            asyncio.run(run())
            elapsed = time.monotonic() - started
            alive = fc.all_alive()
            intact = alive and read_reference(fc) == REFERENCE
            for pid in peak:
                peak[pid] = max(peak[pid], rss(pid)) if alive else peak[pid]
            print(f"\nseed {seed}: {total.frames} frames in {elapsed:.0f} s ({total.frames / elapsed:.0f}/s)")
            print(f"answered {total.answered}; errors by code {dict(sorted(total.errors_by_code.items()))}")
            print(f"UNKNOWN_SERVER_ERROR answers: {len(total.unknown_server_errors)}")
            for line in total.unknown_server_errors[:10]:
                print("   ", line)
            print(f"unanswered complete frames: {len(total.unanswered)} {total.unanswered[:5]}")
            print(f"all servers alive: {alive}; reference table intact: {intact}")
            print(
                "server RSS MB (start -> peak): "
                + ", ".join(f"{fc.memory_before[p] >> 20}->{peak[p] >> 20}" for p in peak)
            )
            print(f"files named escape-*: {len(list(Path(base).rglob('escape-*')))}")
        finally:
            fc.cluster.stop()


if __name__ == "__main__":
    main()
