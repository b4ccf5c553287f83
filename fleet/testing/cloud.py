"""FakeCloud: one fake Alibaba Cloud account (ECS, ESS, CMS) behind the real wire protocol.

The same object serves ``mock_aliyun`` (in-process, via ``responses``) and ``FakeAliyunServer`` (HTTP on
127.0.0.1). Requests are dispatched on the ``x-acs-version`` header (which product) and the ``x-acs-action``
header or ``Action`` query parameter (which Action); handlers live in each product's ``responses.py``. Time
comes from an injected clock; due timers (boots, reboots, scheduled tasks, rule evaluations) fire lazily
before every request and on ``advance``.

State is one account; every resource records the ``RegionId`` it was created in (a simplification of moto's
account x region keying: the service under test works in one region)."""

from __future__ import annotations

import itertools
import json
import random
import string
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from fleet.testing.cms.models import CmsBackend
from fleet.testing.cms.responses import CmsResponse
from fleet.testing.core.clock import Clock, ManualClock
from fleet.testing.core.errors import AliyunError, not_implemented
from fleet.testing.core.faults import FaultInjector, FaultRule
from fleet.testing.core.params import Params, parse_query
from fleet.testing.core.ram import RamDenied, RamRules
from fleet.testing.core.responses import BaseResponse
from fleet.testing.core.timers import TimerQueue
from fleet.testing.core.timeutil import iso_s, to_dt
from fleet.testing.ecs.models import EcsBackend
from fleet.testing.ecs.responses import EcsResponse
from fleet.testing.ecs.stock import PriceBook, SoldOutWindow, StockBook
from fleet.testing.ess.models import EssBackend
from fleet.testing.ess.responses import EssResponse

DEFAULT_ACCOUNT_ID = "1234567890"

# x-acs-version -> product; the host names the product when the header is missing.
_VERSIONS = {"2022-02-22": "ess", "2019-01-01": "cms", "2014-05-26": "ecs"}
_HANDLERS: dict[str, type[BaseResponse]] = {"ess": EssResponse, "cms": CmsResponse, "ecs": EcsResponse}


def _product_from_host(host: str) -> str | None:
    if not host.endswith(".aliyuncs.com"):
        return None
    first = host.split(".", 1)[0]
    if first == "ess":
        return "ess"
    if first == "metrics":
        return "cms"
    if first == "ecs" or first.startswith("ecs-"):
        return "ecs"
    return None


class FakeCloud:
    """The whole fake world. Thread-safe: one lock around each request, timer run and test helper."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        boot_seconds: float = 30.0,
        seed: int = 0,
        account_id: str = DEFAULT_ACCOUNT_ID,
        stop_seconds: float = 5.0,
        removal_seconds: float = 5.0,
        metric_retention_s: float = 7 * 86400.0,
        sleep_latency: bool = True,
        region_id: str = "cn-hangzhou",
        restart_seconds: float | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else ManualClock()
        self.account_id = account_id
        # Where resources land when a request names no RegionId (and the test helpers' default).
        self.region_id = region_id
        self.seed = seed
        self.boot_seconds = float(boot_seconds)
        self.stop_seconds = float(stop_seconds)
        # Starting a stopped instance (economical mode) keeps its disks and image: its own, shorter figure.
        self.restart_seconds = self.boot_seconds if restart_seconds is None else float(restart_seconds)
        self.removal_seconds = float(removal_seconds)
        # CMS keeps points of <60 s periods for 7 days (aliyun-api.md section 2, "Retention").
        self.metric_retention_s = float(metric_retention_s)
        self.sleep_latency = sleep_latency
        self.raise_on_bug = True  # FakeAliyunServer answers a bug as a 500 instead
        self.lock = threading.RLock()
        self._event_s: float | None = None
        # (product, action) of recent requests and a count per Action, for tests; bounded for long runs.
        self.calls: deque[tuple[str, str]] = deque(maxlen=10_000)
        self.call_counts: Counter[str] = Counter()
        # Writes with who sent them (the request's AccessKeyId) and the scaling group they name: lets a test
        # or benchmark check that no group ever had two writers at once. Bounded like ``calls``.
        self.writes: deque[tuple[float, str, str, str, str | None]] = deque(maxlen=100_000)
        self._init_state()

    def _init_state(self) -> None:
        self.rng = random.Random(self.seed)
        self._id_rng = random.Random(f"ids-{self.seed}")
        self._request_counter = itertools.count(1)
        self.timers = TimerQueue()
        self.stock = StockBook()
        self.prices = PriceBook()
        self.vswitch_zones: dict[str, str] = {}
        self.faults = FaultInjector(random.Random(f"faults-{self.seed}"))
        self.ram = RamRules()
        self.calls.clear()
        self.writes.clear()
        self.call_counts.clear()
        self.ecs = EcsBackend(self)
        self.cms = CmsBackend(self)
        self.ess = EssBackend(self)

    # -- time -----------------------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.clock.now()

    def now_s(self) -> float:
        """Seconds since the epoch; inside a firing timer, the time that timer was due."""
        if self._event_s is not None:
            return self._event_s
        return self.clock.now().timestamp()

    def _set_event_time(self, at_s: float | None) -> None:
        self._event_s = at_s

    def _run_timers(self) -> None:
        self.timers.run_due(self.clock.now().timestamp(), self._set_event_time)

    def tick(self) -> datetime:
        """Fire every timer due by the clock's current time (for callers that move their own clock)."""
        with self.lock:
            self._run_timers()
            return self.now()

    def advance(self, seconds: float) -> datetime:
        """Move the fake clock forward and fire due timers in time order."""
        advance = getattr(self.clock, "advance", None)
        if advance is None:
            raise TypeError(
                f"the clock {type(self.clock).__name__} cannot be advanced by the fake; move it "
                "yourself and call tick()"
            )
        with self.lock:
            advance(seconds)
            self._run_timers()
            return self.now()

    # -- ids ------------------------------------------------------------------------------------------------
    def new_id(self, prefix: str, length: int = 20) -> str:
        alphabet = string.ascii_lowercase + string.digits
        return prefix + "".join(self._id_rng.choice(alphabet) for _ in range(length))

    def new_request_id(self) -> str:
        n = next(self._request_counter)
        return f"{self.seed & 0xFFFFFFFF:08X}-FA6E-4C10-{(n >> 48) & 0xFFFF:04X}-{n & 0xFFFFFFFFFFFF:012X}"

    # -- the wire --------------------------------------------------------------------------------------------
    def handle(
        self, method: str, url: str, headers: dict[str, str], body: bytes | str | None
    ) -> tuple[int, dict[str, str], str]:
        """Answer one HTTP request: (status, headers, JSON body)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        split = urlsplit(url)
        host = (lowered.get("host") or split.hostname or "").split(":")[0]
        params = parse_query(split.query, body)
        action = lowered.get("x-acs-action") or params.get("Action") or ""
        version = lowered.get("x-acs-version") or params.get("Version") or ""
        product = _VERSIONS.get(version) or _product_from_host(host)
        latency_s = 0.0
        with self.lock:
            request_id = self.new_request_id()
            try:
                if product is None:
                    raise not_implemented(f"host {host!r} / API version {version!r} (action {action!r})")
                if not action:
                    raise AliyunError("MissingParameter.Action", "The request names no Action.", 400)
                handler_cls = _HANDLERS[product]
                if action not in handler_cls.ACTIONS:
                    raise not_implemented(f"{product.upper()} action {action!r}")
                self.calls.append((product, action))
                self.call_counts[action] += 1
                denied = self.ram.check(product, action, _caller(params, lowered))
                if denied is not None:
                    raise denied
                if not action.startswith(("Describe", "List", "Get")):
                    self.writes.append(
                        (
                            self.clock.now().timestamp(),
                            product,
                            action,
                            _caller(params, lowered),
                            params.get("ScalingGroupId"),
                        )
                    )
                self._run_timers()
                latency_s, fault = self.faults.check(product, action)
                if fault is not None:
                    raise fault
                result = handler_cls(self, Params(params)).dispatch(action)
                status, out_headers = 200, {"Content-Type": "application/json;charset=utf-8"}
                payload = {"RequestId": request_id, **result}
            except AliyunError as err:
                status = err.status
                out_headers = {"Content-Type": "application/json;charset=utf-8"}
                if err.retry_after_ms is not None:
                    out_headers["x-acs-retry-after"] = str(err.retry_after_ms)
                payload = {
                    "RequestId": request_id,
                    "Code": err.code,
                    "Message": err.message,
                    "HostId": host,
                    "Recommend": "",
                }
                if isinstance(err, RamDenied):
                    payload["AccessDeniedDetail"] = err.detail
            except Exception as exc:
                # A bug in the fake. In-process it propagates (loudly, to the test); over HTTP it becomes a
                # 500 naming the bug, so that clients see more than a dropped connection.
                if self.raise_on_bug:
                    raise
                traceback.print_exc()
                status = 500
                out_headers = {"Content-Type": "application/json;charset=utf-8"}
                payload = {
                    "RequestId": request_id,
                    "Code": "InternalError",
                    "Message": f"fleet.testing fake bug in {action}: {type(exc).__name__}: {exc}",
                }
            out_headers["x-acs-request-id"] = request_id
        if latency_s > 0 and self.sleep_latency:
            time.sleep(latency_s)  # outside the lock: a slow call must not stall the others
        return status, out_headers, json.dumps(payload)

    # -- helpers for tests and the simulator -----------------------------------------------------------------
    @property
    def custom_namespace(self) -> str:
        return f"acs_customMetric_{self.account_id}"

    def publish_metric(
        self,
        namespace: str,
        metric: str,
        dimensions: dict[str, str],
        value: float,
        timestamp_ms: int | None = None,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        """Write a point the real API does not let clients write (e.g. ``acs_ecs_dashboard`` GPU metrics).

        ``value`` is the point's Average; ``minimum``/``maximum`` (default: ``value``) are for points that
        already summarize several samples."""
        with self.lock:
            self.cms.put_point(
                namespace, metric, dimensions, float(value), timestamp_ms, minimum=minimum, maximum=maximum
            )

    def publish_gpu_metrics(
        self,
        instance_id: str,
        suffix: str,
        per_gpu: dict[str, float],
        timestamp_ms: int | None = None,
    ) -> None:
        """Publish ``gpu_<suffix>`` per GPU (``gpuId`` dimension) and ``instance_gpu_<suffix>`` for the
        instance (average, minimum and maximum across its GPUs) in ``acs_ecs_dashboard``, as the CloudMonitor
        agent does (aliyun-api.md section 2.1). ``per_gpu`` maps gpuId (the PCI bus id in the new agent) to
        the value."""
        if not per_gpu:
            raise ValueError("per_gpu needs at least one GPU")
        values = list(per_gpu.values())
        with self.lock:
            for gpu_id, value in per_gpu.items():
                self.cms.put_point(
                    "acs_ecs_dashboard",
                    f"gpu_{suffix}",
                    {"instanceId": instance_id, "gpuId": gpu_id},
                    float(value),
                    timestamp_ms,
                )
            self.cms.put_point(
                "acs_ecs_dashboard",
                f"instance_gpu_{suffix}",
                {"instanceId": instance_id},
                sum(values) / len(values),
                timestamp_ms,
                minimum=min(values),
                maximum=max(values),
            )

    def put_custom_metric(
        self,
        name: str,
        dimensions: dict[str, str],
        value: float,
        timestamp_ms: int | None = None,
        group_id: str = "0",
    ) -> None:
        """As PutCustomMetric: readable under ``acs_customMetric_<account>`` with the ``dimension`` string."""
        with self.lock:
            self.cms.put_custom(name, group_id, dimensions, float(value), timestamp_ms)

    def inject_fault(
        self,
        action: str | None,
        code: str | None = "Throttling.User",
        status: int = 400,
        rate: float = 1.0,
        count: int | None = None,
        retry_after_s: float | None = None,
        latency_s: float = 0.0,
        message: str | None = None,
        product: str | None = None,
    ) -> FaultRule:
        """Fail (or slow down, with ``code=None``) matching calls; ``action=None`` matches every Action."""
        with self.lock:
            return self.faults.add(
                FaultRule(action, code, status, rate, count, retry_after_s, latency_s, message, product)
            )

    def remove_fault(self, rule: FaultRule) -> None:
        """Lift one injected fault (a no-op when it has already run out)."""
        with self.lock:
            self.faults.remove(rule)

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def deny(self, *permissions: str, access_key_id: str | None = None) -> None:
        """Refuse these Actions (``"ess:ScaleWithAdjustment"``) as an explicit RAM Deny would: to the caller
        signing with ``access_key_id``, or to everyone; answered 403 with the product's denial code."""
        with self.lock:
            self.ram.deny(self.checked_permissions(list(permissions)), access_key_id)

    def allow_only(self, permissions: list[str], access_key_id: str | None = None) -> None:
        """Confine a caller (or everyone) to these Actions, as a RAM policy holding only them does."""
        with self.lock:
            self.ram.allow_only(self.checked_permissions(list(permissions)), access_key_id)

    def clear_ram(self) -> None:
        """Every Action allowed to everyone again (the recorded denials are kept)."""
        with self.lock:
            self.ram.clear()

    @staticmethod
    def checked_permissions(permissions: list[str]) -> list[str]:
        for p in permissions:
            product, _, action = str(p).partition(":")
            handler = _HANDLERS.get(product)
            if handler is not None and action not in handler.ACTIONS:
                raise ValueError(f"{p}: the fake's {product.upper()} has no Action {action!r}")
        return permissions

    def add_system_event(
        self,
        instance_id: str,
        code: str,
        cycle_status: str = "Executing",
        not_before: datetime | None = None,
        reason: str = "",
    ) -> str:
        with self.lock:
            event = self.ecs.add_system_event(
                instance_id,
                code,
                cycle_status,
                None if not_before is None else not_before.timestamp(),
                reason,
            )
            return event.event_id

    def set_stock(
        self,
        instance_type: str,
        available: int | None,
        *,
        zone_id: str | None = None,
        spot: bool = False,
    ) -> None:
        """How many more instances of ``instance_type`` ``zone_id`` (None: every zone) can create; None is
        unlimited, 0 sold out (``OperationDenied.NoStock``)."""
        with self.lock:
            self._run_timers()
            self.stock.set_count(zone_id, instance_type, available, spot)

    def schedule_sold_out(
        self,
        instance_type: str,
        start: datetime,
        end: datetime | None,
        *,
        zone_id: str | None = None,
        spot_only: bool = False,
    ) -> None:
        """Sell ``instance_type`` out (in ``zone_id``, or everywhere) from ``start`` until ``end``."""
        if end is not None and end <= start:
            raise ValueError("the sold-out window must end after it starts")
        with self.lock:
            self.stock.windows.append(
                SoldOutWindow(
                    instance_type,
                    zone_id,
                    start.timestamp(),
                    None if end is None else end.timestamp(),
                    spot_only,
                )
            )

    def set_price(
        self, instance_type: str, *, on_demand_cny_per_hour: float | None, spot_cny_per_hour: float | None
    ) -> None:
        with self.lock:
            if on_demand_cny_per_hour is not None:
                self.prices.on_demand[instance_type] = float(on_demand_cny_per_hour)
            if spot_cny_per_hour is not None:
                self.prices.spot[instance_type] = float(spot_cny_per_hour)

    def reclaim_spot(self, instance_id: str, notice_s: float = 300.0) -> str:
        """Interrupt a spot instance with ``notice_s`` of notice (the system event and the metadata
        termination time now, the release then). Returns the event id."""
        with self.lock:
            self._run_timers()
            return self.ecs.reclaim_spot(instance_id, notice_s).event_id

    def spot_termination_time(self, instance_id: str) -> str | None:
        """What ``100.100.100.200/latest/meta-data/instance/spot/termination-time`` answers on the instance
        (None: 404)."""
        with self.lock:
            return self.ecs.termination_time(instance_id)

    def create_group_for_tests(
        self,
        *,
        name: str = "fleet-test",
        min_size: int = 0,
        max_size: int = 10,
        desired_capacity: int | None = None,
        instance_type: str = "ecs.gn7i-c8g1.2xlarge",
        scaling_policy: str = "release",
        region_id: str | None = None,
        enable: bool = True,
        in_service: int = 0,
        default_cooldown_s: int = 300,
        setup: Callable[[str], None] | None = None,
    ) -> str:
        """Create a group with one scaling configuration, optionally enabled and with ``in_service`` instances
        already InService (booted at once, no activity left in progress). Returns the group id. ``setup``
        (given the group id) configures the group before any instance is launched: the ``in_service`` ones
        are bought as it says (a spot mix, say).

        Raises ValueError, creating nothing, when ``in_service`` is negative, above ``max_size`` or given
        for a group left disabled (the scale-out would otherwise stop short of it without a word)."""
        if not 0 <= in_service <= max_size:
            raise ValueError(f"in_service must be from 0 to max_size ({max_size}), got {in_service}")
        if in_service and not enable:
            raise ValueError("in_service needs an enabled group (enable: true)")
        with self.lock:
            self._run_timers()
            return self.ess.create_group_for_tests(
                name=name,
                min_size=min_size,
                max_size=max_size,
                desired_capacity=desired_capacity,
                instance_type=instance_type,
                scaling_policy=scaling_policy,
                region_id=region_id or self.region_id,
                enable=enable,
                in_service=in_service,
                default_cooldown_s=default_cooldown_s,
                setup=setup,
            )

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "now": iso_s(self.now_s()),
                "account_id": self.account_id,
                "ecs": self.ecs.state(),
                "ess": self.ess.state(),
                "cms": self.cms.state(),
                "faults": [r.as_dict() for r in self.faults.rules],
                "ram": self.ram.state(),
                "stock": self.stock.state(),
                "timers": [
                    {"due": to_dt(due).isoformat(), "what": label}
                    for due, label in self.timers.pending()[:200]
                ],
            }

    def reset(self) -> None:
        """Forget every resource, metric, fault and timer (the clock keeps its time)."""
        with self.lock:
            self._init_state()


def _caller(params: dict[str, str], headers: dict[str, str]) -> str:
    """The AccessKeyId a request was signed with: a query parameter (RPC signature v1) or the
    ``Credential=`` of an ACS3 Authorization header."""
    if params.get("AccessKeyId"):
        return params["AccessKeyId"]
    auth = headers.get("authorization") or ""
    for part in auth.replace(",", " ").split():
        if part.startswith("Credential="):
            return part.removeprefix("Credential=")
    return ""
