"""The agent's local Prometheus endpoint: the latest sample under the same names it publishes to CloudMonitor.

Teams on Prometheus and Grafana scrape this instead of (or as well as) reading CloudMonitor. Names are the
published ones; the CMS dimensions become labels (``instance_id``, and ``gpu`` for per-GPU values). Decoded
clock event reasons are added as one 0/1 series per reason, which dashboards read more easily than a bitmask.
The agent's own health (samples taken, CMS buffer, drops, clock repairs) is served as ``fleet_agent_*``.
Served on 127.0.0.1 by default: exposing it further is the operator's choice (``--listen``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fleet.agent.nvml import BENIGN_REASON_BITS, THROTTLE_REASON_BITS
from fleet.agent.sample import Sample, gpu_values, instance_values


@dataclass
class AgentCounters:
    """Running totals the endpoint reports alongside the latest sample."""

    samples_total: int = 0
    sample_errors_total: int = 0
    clock_repairs_total: int = 0
    cms_sent_points_total: int = 0
    cms_dropped_points_total: int = 0
    cms_rejected_points_total: int = 0
    cms_buffered_points: int = 0


class AgentCollector(Collector):
    """Yields the latest sample's values each time Prometheus scrapes."""

    def __init__(self, latest: Callable[[], Sample | None], counters: Callable[[], AgentCounters]) -> None:
        self._latest = latest
        self._counters = counters

    def describe(self) -> list[Any]:
        return []  # values vary with the sample: let the registry call collect() instead

    def collect(self) -> Iterator[Any]:
        counters = self._counters()
        yield _counter("fleet_agent_samples", "Samples taken.", counters.samples_total)
        yield _counter(
            "fleet_agent_sample_errors", "Periods whose sampling failed.", counters.sample_errors_total
        )
        yield _counter(
            "fleet_agent_clock_repairs",
            "Samples stamped from the monotonic clock because the wall clock was implausible.",
            counters.clock_repairs_total,
        )
        yield _counter(
            "fleet_agent_cms_sent_points", "Points accepted by CloudMonitor.", counters.cms_sent_points_total
        )
        yield _counter(
            "fleet_agent_cms_dropped_points",
            "Oldest points dropped because the buffer was full.",
            counters.cms_dropped_points_total,
        )
        yield _counter(
            "fleet_agent_cms_rejected_points",
            "Points CloudMonitor refused as invalid.",
            counters.cms_rejected_points_total,
        )
        yield _gauge(
            "fleet_agent_cms_buffered_points",
            "Points waiting to be sent to CloudMonitor.",
            counters.cms_buffered_points,
        )

        sample = self._latest()
        if sample is None:
            return
        instance = sample.instance_id
        for name, value in sorted(instance_values(sample).items()):
            family = GaugeMetricFamily(name, f"{name} (fleet agent, per instance)", labels=["instance_id"])
            family.add_metric([instance], value)
            yield family

        if not sample.gpu.nvml_ok:
            return
        per_gpu: dict[str, GaugeMetricFamily] = {}
        reasons = GaugeMetricFamily(
            "gpu_device_clock_event_reason",
            "1 when NVML reports this clock event (throttle) reason on the GPU.",
            labels=["instance_id", "gpu", "reason"],
        )
        for reading in sample.gpu.gpus:
            gpu = str(reading.index)
            for name, value in gpu_values(reading).items():
                if name not in per_gpu:
                    per_gpu[name] = GaugeMetricFamily(
                        name, f"{name} (fleet agent, per GPU)", labels=["instance_id", "gpu"]
                    )
                per_gpu[name].add_metric([instance, gpu], value)
            if reading.clock_event_reasons_raw is not None:
                for reason, bit in {**THROTTLE_REASON_BITS, **BENIGN_REASON_BITS}.items():
                    reasons.add_metric(
                        [instance, gpu, reason], 1.0 if reading.clock_event_reasons_raw & bit else 0.0
                    )
        yield from per_gpu.values()
        yield reasons


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def make_registry(collector: AgentCollector) -> CollectorRegistry:
    """A private registry holding only the agent's collector (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, Any]:
    """Start the endpoint in a daemon thread; returns (server, thread). ``server.server_port`` is the port."""
    return start_http_server(port, addr=host, registry=registry)
