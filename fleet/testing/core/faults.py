"""Fault injection: throttling, server errors and added latency for chosen Actions or a random fraction.

Draws come from the fake's own seeded random generator, so a run with the same seed and the same calls fails
the same calls."""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass, field

from fleet.testing.core.errors import AliyunError

_MESSAGES = {
    "Throttling.User": "Request was denied due to user flow control.",
    "Throttling.Api": "Request was denied due to api flow control.",
    "Throttling": "Request was denied due to flow control.",
    "InternalError": "The request processing has failed due to some unknown error.",
    "ServiceUnavailable": "The request has failed due to a temporary failure of the server.",
}


@dataclass
class FaultRule:
    """One injected fault. ``action`` None matches every Action; ``code`` None adds only latency."""

    action: str | None
    code: str | None = "Throttling.User"
    status: int = 400
    rate: float = 1.0
    count: int | None = None  # how many more times it may fire; None = unlimited
    retry_after_s: float | None = None
    latency_s: float = 0.0
    message: str | None = None
    product: str | None = None  # "ess" | "ecs" | "cms" or None for all
    fault_id: int = field(default=0)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class FaultInjector:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rules: list[FaultRule] = []
        self.fired: list[dict[str, object]] = []
        self._ids = itertools.count(1)

    def add(self, rule: FaultRule) -> FaultRule:
        if not 0.0 <= rule.rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rule.rate}")
        if rule.count is not None and rule.count < 1:
            raise ValueError(f"fault count must be at least 1 (or None for unlimited), got {rule.count}")
        if rule.code is not None and not 400 <= rule.status <= 599:
            raise ValueError(f"fault status must be an HTTP error status (400-599), got {rule.status}")
        rule.fault_id = next(self._ids)
        self.rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        if rule in self.rules:
            self.rules.remove(rule)

    def clear(self) -> None:
        self.rules.clear()

    def check(self, product: str, action: str) -> tuple[float, AliyunError | None]:
        """Return (latency to add in seconds, error to answer or None) for this call."""
        if not self.rules:
            return 0.0, None
        latency_s = 0.0
        for rule in list(self.rules):
            if rule.action is not None and rule.action != action:
                continue
            if rule.product is not None and rule.product != product:
                continue
            if rule.rate < 1.0 and self.rng.random() >= rule.rate:
                continue
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self.rules.remove(rule)
            latency_s += rule.latency_s
            self.fired.append({"fault_id": rule.fault_id, "action": action, "code": rule.code})
            del self.fired[:-1000]
            if rule.code is not None:
                retry_after_ms = (
                    None if rule.retry_after_s is None else max(1, int(rule.retry_after_s * 1000))
                )
                message = rule.message or _MESSAGES.get(rule.code, f"Injected fault {rule.code}.")
                return latency_s, AliyunError(rule.code, message, rule.status, retry_after_ms)
        return latency_s, None
