"""Exponential backoff between retries of a request that failed with a retriable error."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay ``initial * multiplier**attempt`` seconds, capped at `maximum`, with +-`jitter` spread."""

    initial: float = 0.1
    maximum: float = 1.0
    multiplier: float = 2.0
    jitter: float = 0.0

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.multiplier ** max(attempt, 0))
        if self.jitter:
            # Spread retries of many clients so they do not hit a recovering server together.
            base *= 1 + random.uniform(-self.jitter, self.jitter)
        return base

    async def sleep(self, attempt: int) -> None:
        await asyncio.sleep(self.delay(attempt))


# What Fluss's client waits between bootstrap attempts: 100, 200, 400 ms.
BOOTSTRAP_BACKOFF = Backoff(initial=0.1, maximum=0.4)
# Between retries of admin calls and metadata lookups.
REQUEST_BACKOFF = Backoff(initial=0.1, maximum=1.0, jitter=0.2)
