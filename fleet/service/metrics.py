"""The service's own Prometheus metrics: one registry per Service, so tests and replicas never share."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from fleet.cloud.errors import CloudError


class ServiceMetrics:
    """Counters and gauges that the loop updates and ``GET /metrics`` exposes."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ticks = Counter(
            "fleet_ticks", "Ticks run, by outcome (acted, standby, error).", ["outcome"], registry=r
        )
        self.decisions = Counter(
            "fleet_decisions", "Decisions recorded, by group and kind.", ["group", "kind"], registry=r
        )
        self.actions = Counter(
            "fleet_actions",
            "Cloud writes attempted, by group, action and outcome.",
            ["group", "action", "outcome"],
            registry=r,
        )
        self.cloud_errors = Counter(
            "fleet_cloud_api_errors",
            "Cloud API errors seen by the service, by error code.",
            ["code"],
            registry=r,
        )
        self.tick_duration = Histogram(
            "fleet_tick_duration_seconds",
            "Wall time of one tick.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )
        self.metric_staleness = Gauge(
            "fleet_metric_staleness_seconds",
            "Age of the newest sample of each metric per group.",
            ["group", "metric"],
            registry=r,
        )
        self.incidents = Gauge("fleet_incidents", "Incidents by state.", ["state"], registry=r)
        self.sla_breaches = Counter(
            "fleet_sla_breaches", "SLA deadlines missed, by kind (respond, isolate).", ["kind"], registry=r
        )
        self.respond_by = Gauge(
            "fleet_incident_respond_by_seconds",
            "Seconds left to respond (negative: breached).",
            ["incident", "instance"],
            registry=r,
        )
        self.isolate_by = Gauge(
            "fleet_incident_isolate_by_seconds",
            "Seconds left to isolate (negative: breached).",
            ["incident", "instance"],
            registry=r,
        )
        self.leader = Gauge("fleet_leader", "1 while this replica holds the lease.", registry=r)
        self.calls_per_tick = Gauge(
            "fleet_tick_api_calls",
            "Cloud API requests made by the last tick, by Action (pages and retries included).",
            ["action"],
            registry=r,
        )
        self.shard_owned = Gauge(
            "fleet_shard_owned",
            "1 for each shard whose lease this replica held at its last tick.",
            ["shard"],
            registry=r,
        )
        self.shard_epoch = Gauge(
            "fleet_shard_epoch", "The fencing epoch of each shard this replica holds.", ["shard"], registry=r
        )
        self.desired = Gauge("fleet_group_desired_capacity", "ESS desired capacity.", ["group"], registry=r)
        self.in_service = Gauge("fleet_group_in_service", "InService instances.", ["group"], registry=r)
        self.paused = Gauge(
            "fleet_group_paused", "1 while a group is paused by an operator.", ["group"], registry=r
        )
        # predictive scaling (issue 16): the demand, the forecast, its measured error, the capacity model
        self.predictive = Gauge(
            "fleet_predictive",
            "Predictive scaling inputs by group and field: demand_rps, forecast_rps, forecast_upper_rps, "
            "capacity_per_instance_rps, capacity_correction, capacity_speed, predictive_target, burstiness.",
            ["group", "field"],
            registry=r,
        )
        self.forecast_mape = Gauge(
            "fleet_forecast_mape_pct",
            "Mean absolute percentage error of the judged demand forecasts (last ~5 h).",
            ["group"],
            registry=r,
        )
        self.forecast_coverage = Gauge(
            "fleet_forecast_upper_coverage",
            "Fraction of judged forecasts whose demand stayed at or under the upper quantile.",
            ["group"],
            registry=r,
        )


class RetriedErrorCounter(logging.Handler):
    """Counts the cloud errors the adapters retried away, by code.

    The adapters retry inside one call and log each failed attempt (logger ``fleet.cloud``, WARNING) with the
    CloudError among the record's arguments; the service sees only a final failure. Counting from those
    records makes ``fleet_cloud_api_errors`` count every failed attempt, recovered or not.
    """

    def __init__(self, metrics: ServiceMetrics) -> None:
        super().__init__(level=logging.WARNING)
        self.metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, CloudError):
                self.metrics.cloud_errors.labels(code=arg.code or "unknown").inc()
                return
