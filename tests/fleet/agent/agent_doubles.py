"""Test doubles shared by the agent's tests."""

from __future__ import annotations


class RecordingSink:
    """Stands in for CmsAdapter.put_custom_metrics: keeps every point it is sent."""

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id  # whose points ``values`` reads by default
        self.sent: list = []

    def put_custom_metrics(self, metrics) -> None:
        self.sent.extend(metrics)

    def values(self, name: str, dims: dict | None = None) -> list[float]:
        dims = dims or {"instanceId": self.instance_id}
        return [m.value for m in self.sent if m.name == name and dict(m.dimensions) == dims]
