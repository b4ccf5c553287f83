"""The agent publishes what the policies read: the same custom metric names and the same throttle bits."""

from __future__ import annotations

from fleet.agent.nvml import BENIGN_REASON_BITS, THROTTLE_REASON_BITS
from fleet.agent.sample import INSTANCE_METRICS_READ_BY_SERVICE
from policies import metrics as policy_metrics


def test_published_names_are_the_custom_names_the_policies_map():
    assert set(INSTANCE_METRICS_READ_BY_SERVICE) == set(policy_metrics.CUSTOM_METRIC_NAMES.values())


def test_decoded_bits_are_the_policies_throttle_reason_bits():
    ours = set(THROTTLE_REASON_BITS.values()) | set(BENIGN_REASON_BITS.values())
    assert ours == {int(reason) for reason in policy_metrics.ThrottleReason}
