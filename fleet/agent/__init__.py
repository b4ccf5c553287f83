"""The node agent: GPU health (NVML, and XIDs from the kernel log) and vLLM metrics from each instance into
CloudMonitor.

``Agent`` runs the loop (``fleet agent`` builds one); ``FakeNvml`` stands in for NVML in tests and demos;
``to_points``/``instance_values`` say what a sample publishes. See docs/agent.md.
"""

from fleet.agent.clock import AgentClock, ManualAgentClock, SystemClock, TimestampGuard
from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.kmsg import KernelLogReader, KernelXid, open_kernel_log
from fleet.agent.nvml import GpuCollector, GpuReading, GpuSnapshot, Nvml, XidEvent, XidSource, load_nvml
from fleet.agent.publish import CmsPublisher
from fleet.agent.run import Agent, AgentConfig
from fleet.agent.sample import (
    INSTANCE_METRICS_READ_BY_SERVICE,
    Point,
    PublishStatus,
    Sample,
    gpu_values,
    instance_values,
    sample_to_json,
    to_points,
)
from fleet.agent.vllm import VllmCollector, VllmReading

__all__ = [
    "INSTANCE_METRICS_READ_BY_SERVICE",
    "Agent",
    "AgentConfig",
    "AgentClock",
    "CmsPublisher",
    "ManualAgentClock",
    "FakeGpu",
    "FakeNvml",
    "GpuCollector",
    "GpuReading",
    "GpuSnapshot",
    "KernelLogReader",
    "KernelXid",
    "Nvml",
    "Point",
    "PublishStatus",
    "Sample",
    "SystemClock",
    "TimestampGuard",
    "VllmCollector",
    "VllmReading",
    "XidEvent",
    "XidSource",
    "gpu_values",
    "instance_values",
    "load_nvml",
    "open_kernel_log",
    "sample_to_json",
    "to_points",
]
