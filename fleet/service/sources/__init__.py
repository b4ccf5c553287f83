"""Metric sources: where a group's per-instance policy metrics are read from.

``CloudMonitorSource`` (the default) reads CloudMonitor; ``PrometheusSource`` reads DCGM exporter and vLLM
series through PromQL. A group picks one in fleet.yaml::

    metrics_source: {type: prometheus, url: http://prometheus:9090, labels: {cluster: prod},
                     instance_label: instance_id}

``source_for(spec, clients)`` builds the source a group's spec asks for; the Observer holds one per group.
"""

from __future__ import annotations

import os
from typing import Any

from fleet.cloud.clients import CloudClients
from fleet.config import PROMETHEUS_MAX_ANSWER_MIB, PROMETHEUS_TIMEOUT_S
from fleet.service.sources.base import MetricSource
from fleet.service.sources.cloudmonitor import CloudMonitorSource
from fleet.service.sources.mappings import PROMQL_MAPPINGS, PromMapping, exporter_series
from fleet.service.sources.prometheus import PrometheusClient, PrometheusSource

__all__ = [
    "PROMQL_MAPPINGS",
    "CloudMonitorSource",
    "MetricSource",
    "PromMapping",
    "PrometheusClient",
    "PrometheusSource",
    "exporter_series",
    "source_for",
]


def source_for(spec: Any, clients: CloudClients) -> MetricSource:
    """The source a group spec's ``metrics_source`` names (a plain GroupSpec without one: CloudMonitor)."""
    config: Any = getattr(spec, "metrics_source", None)
    kind = getattr(config, "type", None) or "cloudmonitor"
    if kind == "cloudmonitor":
        return CloudMonitorSource(clients.cms)
    if kind == "prometheus":
        return PrometheusSource(
            str(config.url),
            labels=dict(getattr(config, "labels", None) or {}),
            instance_label=getattr(config, "instance_label", None) or "instance_id",
            bearer_token=bearer_token(getattr(config, "bearer_token_env", None)),
            timeout_s=float(getattr(config, "timeout_s", None) or PROMETHEUS_TIMEOUT_S),
            max_answer_bytes=int(getattr(config, "max_answer_mib", None) or PROMETHEUS_MAX_ANSWER_MIB)
            * 2**20,
        )
    raise ValueError(f"unknown metrics_source type {kind!r}; valid: cloudmonitor, prometheus")


def bearer_token(env: str | None) -> str | None:
    """The token in environment variable ``env`` (config ``bearer_token_env``): no secret in fleet.yaml."""
    if not env:
        return None
    token = os.environ.get(env, "").strip()
    if not token:
        raise ValueError(f"metrics_source bearer_token_env: environment variable {env} is not set or empty")
    return token
