"""The agent's loop: every period read the GPUs and vLLM, stamp, publish, and keep the latest for Prometheus.

Everything with a side effect comes in through the constructor (the clock, the ``Nvml``, the vLLM fetcher, the
CMS publisher), so tests drive the same loop with fakes and a clock that moves only when waited on.

A period's sample covers the period before it: the first scrape of vLLM only records a baseline (percentiles
and rates need two scrapes to difference), which is why ``run`` primes first and samples one period later, and
``fleet agent --once`` takes a full period to answer. No failure inside a period stops the loop: NVML and vLLM
failures are reported in the sample, CMS failures are buffered, and anything unexpected is logged and counted.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fleet.agent.clock import AgentClock, TimestampGuard
from fleet.agent.kmsg import DEFAULT_LOOKBACK_S, open_kernel_log
from fleet.agent.nvml import GpuCollector, Nvml
from fleet.agent.prom import AgentCollector, AgentCounters
from fleet.agent.publish import CmsPublisher
from fleet.agent.sample import PublishStatus, Sample, to_points
from fleet.agent.state import FALLS_FILE_NAME, FallsFile, read_boot_id
from fleet.agent.vllm import VllmCollector, combine, fetch_metrics_text

log = logging.getLogger("fleet.agent")

DEFAULT_PERIOD_S = 15.0  # CloudMonitor's finest GPU metric period (aliyun-api.md section 2.1)
DEFAULT_VLLM_URL = "http://127.0.0.1:8000/metrics"  # vLLM's OpenAI server default port


@dataclass(frozen=True)
class AgentConfig:
    instance_id: str
    vllm_url: str = DEFAULT_VLLM_URL
    # more vLLM servers on this instance (one per GPU or group of GPUs, each on its own port): read beside
    # vllm_url and added up (fleet.agent.vllm.combine)
    more_vllm_urls: tuple[str, ...] = ()
    period_s: float = DEFAULT_PERIOD_S
    # The kernel log to read XIDs from beside NVML's events: /dev/kmsg or a dmesg / kern.log text file.
    # None (the library's default; `fleet agent` defaults to /dev/kmsg): NVML's events only.
    kernel_log: str | None = None
    kernel_log_lookback_s: float = DEFAULT_LOOKBACK_S
    # A directory the agent may write (systemd's StateDirectory=): it keeps there, for a restarted agent in
    # the same boot, the GPUs whose fall off the bus it counted (fleet.agent.state). None: nothing kept.
    state_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.instance_id:
            raise ValueError("instance_id must not be empty")
        if not self.period_s > 0:
            raise ValueError(f"period_s must be > 0, got {self.period_s}")
        if self.kernel_log == "":
            raise ValueError("kernel_log must be a path or None, not empty")
        if self.state_dir == "":
            raise ValueError("state_dir must be a directory or None, not empty")
        if not self.kernel_log_lookback_s >= 0:
            raise ValueError(f"kernel_log_lookback_s must be >= 0, got {self.kernel_log_lookback_s}")


class Agent:
    """One node's agent. ``prime()`` then ``step()`` once a period, or ``run(stop)`` to loop."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        nvml: Nvml | None,
        clock: AgentClock,
        publisher: CmsPublisher | None = None,
        vllm_fetch: Callable[[str], str] = fetch_metrics_text,
        guard: TimestampGuard | None = None,
        boot_id: Callable[[], str | None] = read_boot_id,
    ) -> None:
        self.config = config
        self._clock = clock
        kernel_log = (
            open_kernel_log(config.kernel_log, clock=clock, lookback_s=config.kernel_log_lookback_s)
            if config.kernel_log is not None
            else None
        )
        falls_file = (
            FallsFile(os.path.join(config.state_dir, FALLS_FILE_NAME), boot_id())
            if config.state_dir is not None
            else None
        )
        self._gpus = GpuCollector(nvml, kernel_log=kernel_log, falls_file=falls_file)
        urls = (config.vllm_url, *config.more_vllm_urls)
        self._vllm = [VllmCollector(url, vllm_fetch) for url in urls]
        self._publisher = publisher
        self._guard = guard or TimestampGuard()
        self._lock = threading.Lock()
        self._latest: Sample | None = None
        self._counters = AgentCounters()

    # -- what the Prometheus endpoint reads (from its own thread) ------------------------------------------
    @property
    def latest(self) -> Sample | None:
        with self._lock:
            return self._latest

    def counters(self) -> AgentCounters:
        with self._lock:
            return AgentCounters(**vars(self._counters))

    def prometheus_collector(self) -> AgentCollector:
        return AgentCollector(lambda: self.latest, self.counters)

    # -- one period -----------------------------------------------------------------------------------------
    def prime(self) -> None:
        """Start NVML (registering for XID events) and take vLLM's baseline scrape."""
        self._gpus.start()
        for collector in self._vllm:
            collector.read(self._clock.monotonic())

    def collect(self) -> Sample:
        """Read everything once and stamp it (no publishing)."""
        gpu = self._gpus.read()
        monotonic_s = self._clock.monotonic()
        vllm = combine([collector.read(monotonic_s) for collector in self._vllm])
        stamp = self._guard.stamp(self._clock.time(), self._clock.monotonic())
        if stamp.source != "wall":
            log.warning(
                "wall clock implausible (skew %.1f s): sample stamped from the %s clock",
                stamp.wall_skew_s,
                stamp.source,
            )
        return Sample(instance_id=self.config.instance_id, clock=stamp, gpu=gpu, vllm=vllm)

    def step(self) -> Sample:
        """Collect, publish, and make the sample the latest."""
        sample = self.collect()
        if self._publisher is not None:
            sample.publish = self._publisher.publish(to_points(sample))
        else:
            sample.publish = PublishStatus(enabled=False)
        with self._lock:
            self._latest = sample
            c = self._counters
            c.samples_total += 1
            c.clock_repairs_total = self._guard.repairs
            if self._publisher is not None:
                c.cms_sent_points_total = self._publisher.sent_points_total
                c.cms_dropped_points_total = self._publisher.dropped_points_total
                c.cms_rejected_points_total = self._publisher.rejected_points_total
                c.cms_buffered_points = self._publisher.buffered_points
        return sample

    def run(
        self,
        stop: threading.Event,
        *,
        max_samples: int | None = None,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> int:
        """Loop until ``stop`` is set (or ``max_samples`` periods done); returns the number of samples taken.

        Periods are kept on a fixed grid of the monotonic clock; a period that overruns skips the missed
        ticks instead of bursting to catch up.
        """
        period_s = self.config.period_s
        try:
            self.prime()
        except Exception:  # a failed baseline only costs the first window its percentiles
            log.exception("priming failed; sampling anyway")
        next_s = self._clock.monotonic() + period_s
        taken = periods = 0
        try:
            while not self._clock.wait(stop, next_s - self._clock.monotonic()):
                periods += 1
                try:
                    sample = self.step()
                except Exception:  # the loop must outlive any one bad period
                    log.exception("sampling failed; continuing next period")
                    with self._lock:
                        self._counters.sample_errors_total += 1
                else:
                    taken += 1
                    if on_sample is not None:
                        on_sample(sample)
                if max_samples is not None and periods >= max_samples:
                    break
                next_s += period_s
                now_s = self._clock.monotonic()
                if next_s <= now_s:
                    missed = int((now_s - next_s) // period_s) + 1
                    next_s += missed * period_s
                    log.warning("period overran: skipped %d tick(s)", missed)
        finally:
            self._gpus.close()
        return taken

    def close(self) -> None:
        self._gpus.close()
