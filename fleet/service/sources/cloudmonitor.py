"""CloudMonitor as a metric source (the default): ``acs_ecs_dashboard`` GPU metrics and the node agent's
custom metrics, read in batched DescribeMetricLast / DescribeMetricList calls through the CMS adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fleet.cloud.cms import CmsApi
from fleet.cloud.types import MetricPoint
from policies import metrics as pm


class CloudMonitorSource:
    """Canonical names -> (namespace, CloudMonitor metric, statistic) per ``policies.metrics``."""

    kind = "cloudmonitor"

    def __init__(self, cms: CmsApi) -> None:
        self.cms = cms

    def cloud_metric(self, canonical: str) -> tuple[str, str, str]:
        """(namespace, metric name, statistic) of a canonical per-instance metric."""
        if canonical in pm.CMS_METRIC_NAMES:
            name, statistic = pm.CMS_METRIC_NAMES[canonical]
            return pm.CMS_NAMESPACE, name, statistic
        return self.cms.custom_namespace, pm.CUSTOM_METRIC_NAMES[canonical], "Average"

    def describe(self, canonical: str) -> str:
        return self.cloud_metric(canonical)[1]

    def take_warnings(self, canonical: str) -> list[str]:
        return []  # CloudMonitor answers or fails: it has nothing else to say

    def read_last(self, canonical: str, instance_ids: Sequence[str]) -> list[MetricPoint]:
        namespace, name, statistic = self.cloud_metric(canonical)
        return self.cms.metric_last(namespace, name, list(instance_ids), statistic=statistic)

    def read_range(
        self, canonical: str, instance_ids: Sequence[str], start: datetime, end: datetime, step_s: int = 15
    ) -> list[MetricPoint]:
        namespace, name, statistic = self.cloud_metric(canonical)
        return self.cms.metric_list(
            namespace, name, list(instance_ids), start, end, period_s=step_s, statistic=statistic
        )
