"""``FakeAliyunServer``: the fake cloud over HTTP on 127.0.0.1, plus the ``/_fake/`` control API.

SDK clients point at it with ``Config(endpoint="127.0.0.1:<port>", protocol="http")``. The clock runs at real
time x ``time_scale`` plus any advance made through ``POST /_fake/clock``. The control API (documented in
docs/fake-cloud.md) lets scripts drive what the real API cannot: time, metrics the cloud writes itself,
faults, system events."""

from __future__ import annotations

import json
import math
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, overload

from fleet.testing.cloud import DEFAULT_ACCOUNT_ID, FakeCloud
from fleet.testing.core.clock import Clock, ScaledClock
from fleet.testing.core.errors import AliyunError
from fleet.testing.core.params import parse_time_s
from fleet.testing.core.ram import RamRules

CONTROL_PREFIX = "/_fake/"
# The most one POST /_fake/clock may move the clock: a year (a leap one) covers every schedule the fake
# models (Monthly tasks, 91-day metric retention); more is a typo, and enough of it overflows datetime.
MAX_ADVANCE_S = 366 * 86400.0


class ControlError(ValueError):
    """Bad input to the control API: answered 400 with ``{"error": message}``."""


@overload
def _number(body: dict[str, Any], key: str, *, required: Literal[True]) -> float: ...
@overload
def _number(
    body: dict[str, Any], key: str, default: float | None = None, *, required: bool = False
) -> float | None: ...
def _number(
    body: dict[str, Any], key: str, default: float | None = None, *, required: bool = False
) -> float | None:
    value = body.get(key, default)
    if value is None:
        if required:
            raise ControlError(f"{key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ControlError(f"{key} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float's range
        number = math.inf
    if not math.isfinite(number):  # JSON has no NaN or Infinity; Python's json module reads them anyway
        raise ControlError(f"{key} must be a finite number, got {value!r}")
    return number


@overload
def _text(body: dict[str, Any], key: str, default: str) -> str: ...
@overload
def _text(body: dict[str, Any], key: str, *, required: Literal[True]) -> str: ...
def _text(
    body: dict[str, Any], key: str, default: str | None = None, *, required: bool = False
) -> str | None:
    """A string field: absent or null gives ``default``; anything but a string is refused (a number stored as
    an event code would break every later read of it)."""
    value = body.get(key)
    if value is None:
        if required:
            raise ControlError(f"{key} is required (a non-empty string)")
        return default
    if not isinstance(value, str) or (required and not value):
        raise ControlError(f"{key} must be a {'non-empty ' if required else ''}string, got {value!r}")
    return value


def _time(body: dict[str, Any], key: str) -> datetime | None:
    """A time field: ISO 8601 or ``YYYY-MM-DD hh:mm:ss`` (UTC) text, or epoch milliseconds; null is None."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ControlError(f"{key} must be an ISO 8601 time or epoch milliseconds, got {value!r}")
    try:
        return datetime.fromtimestamp(parse_time_s(str(value), key), UTC)
    except AliyunError as err:
        raise ControlError(err.message) from None
    except (OverflowError, ValueError, OSError):
        raise ControlError(f"{key} is out of range: {value!r}") from None


def _check_group(body: dict[str, Any]) -> None:
    """The types of a ``/_fake/groups`` body, checked before anything is created (``in_service`` against
    ``max_size`` is FakeCloud.create_group_for_tests's check; MinSize <= MaxSize and such, the API's)."""
    for key in ("name", "instance_type", "scaling_policy"):
        if key in body:
            _text(body, key, required=True)
    if body.get("region_id") is not None:
        _text(body, "region_id", required=True)
    if "enable" in body and not isinstance(body["enable"], bool):
        raise ControlError(f"enable must be true or false, got {body['enable']!r}")
    counts = ("min_size", "max_size", "desired_capacity", "in_service", "default_cooldown_s")
    for key in counts:
        value = body.get(key)
        if key == "desired_capacity" and value is None:
            continue  # null: the group has no desired capacity
        if key in body and (isinstance(value, bool) or not isinstance(value, int)):
            raise ControlError(f"{key} must be a whole number, got {value!r}")


class FakeControl:
    """The ``/_fake/`` endpoints, independent of the HTTP server so they can be tested directly."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    def handle(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = path[len(CONTROL_PREFIX) :].strip("/")
        route = {
            ("POST", "reset"): self.reset,
            ("POST", "clock"): self.clock,
            ("GET", "clock"): self.get_clock,
            ("POST", "metrics"): self.metrics,
            ("POST", "faults"): self.faults,
            ("DELETE", "faults"): self.clear,
            ("GET", "faults"): self.list_faults,
            ("POST", "events"): self.events,
            ("GET", "state"): self.state,
            ("POST", "groups"): self.groups,
            ("POST", "stock"): self.stock,
            ("GET", "stock"): self.get_stock,
            ("POST", "prices"): self.prices,
            ("POST", "spot-reclaim"): self.spot_reclaim,
            ("POST", "limits"): self.limits,
            ("POST", "ram"): self.ram,
            ("GET", "ram"): self.get_ram,
            ("DELETE", "ram"): self.clear_ram,
        }.get((method, name))
        if route is None and method == "GET" and name.startswith("metadata/"):
            return self.metadata(name)
        if route is None:
            return 404, {"error": f"no control endpoint {method} {path}; see docs/fake-cloud.md"}
        try:
            return 200, route(body)
        except ControlError as err:
            return 400, {"error": str(err)}
        except AliyunError as err:  # e.g. /_fake/groups with MinSize above MaxSize: the API's own refusal
            return err.status, {"error": str(err), "code": err.code}
        except (ValueError, TypeError, KeyError, OverflowError) as err:
            return 400, {"error": f"{type(err).__name__}: {err}"}

    def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        self.cloud.reset()
        return {"ok": True}

    def get_clock(self, body: dict[str, Any]) -> dict[str, Any]:
        now = self.cloud.tick()
        return {"now": now.isoformat(), "now_ms": int(now.timestamp() * 1000)}

    def clock(self, body: dict[str, Any]) -> dict[str, Any]:
        seconds = _number(body, "advance_s", required=True)
        if seconds < 0:
            raise ControlError("advance_s must not be negative: the fake clock never goes backwards")
        if seconds > MAX_ADVANCE_S:
            raise ControlError(
                f"advance_s must be at most {MAX_ADVANCE_S:g} (366 days) per call, got {seconds:g}"
            )
        now = self.cloud.advance(seconds)
        return {"now": now.isoformat(), "now_ms": int(now.timestamp() * 1000)}

    def metrics(self, body: dict[str, Any]) -> dict[str, Any]:
        points = body.get("points", [body])
        if not isinstance(points, list) or not points:
            raise ControlError("points must be a non-empty list")
        checked = []
        for point in points:
            if not isinstance(point, dict):
                raise ControlError("each point must be an object")
            for key in ("namespace", "metric"):
                if not isinstance(point.get(key), str) or not point[key]:
                    raise ControlError(f"{key} is required (a non-empty string)")
            dims = point.get("dimensions", {})
            if not isinstance(dims, dict):
                raise ControlError("dimensions must be an object of strings")
            value = _number(point, "value", required=True)
            ts = _number(point, "timestamp_ms")
            low, high = _number(point, "minimum"), _number(point, "maximum")
            checked.append(
                (point["namespace"], point["metric"], dims, value, None if ts is None else int(ts), low, high)
            )
        for namespace, metric, dims, value, ts, low, high in checked:
            self.cloud.publish_metric(namespace, metric, dims, value, ts, minimum=low, maximum=high)
        return {"ok": True, "points": len(checked)}

    def faults(self, body: dict[str, Any]) -> dict[str, Any]:
        allowed = {
            "action",
            "code",
            "status",
            "rate",
            "count",
            "retry_after_s",
            "latency_s",
            "message",
            "product",
        }
        unknown = set(body) - allowed
        if unknown:
            raise ControlError(f"unknown fault field(s) {sorted(unknown)}; expected {sorted(allowed)}")
        status = _number(body, "status", 400.0)
        rate = _number(body, "rate", 1.0)
        count = _number(body, "count")
        if status is None or status != int(status) or not 400 <= status <= 599:
            raise ControlError(f"status must be an HTTP error status 400-599, got {body.get('status')!r}")
        if rate is None or not 0.0 < rate <= 1.0:
            raise ControlError(f"rate must be a share above 0 and at most 1, got {body.get('rate')!r}")
        if count is not None and (count != int(count) or count < 1):
            raise ControlError(f"count must be a whole number of calls from 1, got {body.get('count')!r}")
        rule = self.cloud.inject_fault(
            body.get("action"),
            code=body.get("code", "Throttling.User"),
            status=int(status),
            rate=rate,
            count=None if count is None else int(count),
            retry_after_s=_number(body, "retry_after_s"),
            latency_s=_number(body, "latency_s", 0.0) or 0.0,
            message=body.get("message"),
            product=body.get("product"),
        )
        return {"fault_id": rule.fault_id}

    def ram(self, body: dict[str, Any]) -> dict[str, Any]:
        allowed = {"deny", "allow_only", "access_key_id"}
        unknown = set(body) - allowed
        if unknown:
            raise ControlError(f"unknown ram field(s) {sorted(unknown)}; expected {sorted(allowed)}")
        if "deny" not in body and "allow_only" not in body:
            raise ControlError(
                "give deny or allow_only: a list of permissions such as 'ess:ScaleWithAdjustment'"
            )
        caller = body.get("access_key_id")
        if caller is not None and (not isinstance(caller, str) or not caller):
            raise ControlError("access_key_id must be a non-empty string, or null for every caller")
        for key in ("deny", "allow_only"):
            value = body.get(key)
            if key in body and (not isinstance(value, list) or not all(isinstance(p, str) for p in value)):
                raise ControlError(f"{key} must be a list of strings such as 'ess:ScaleWithAdjustment'")
        # Both checked before either applies: a bad list changes nothing.
        checked = RamRules()
        for key in ("deny", "allow_only"):
            if key in body:
                getattr(checked, key)(self.cloud.checked_permissions(body[key]), caller)
        if "deny" in body:
            self.cloud.deny(*body["deny"], access_key_id=caller)
        if "allow_only" in body:
            self.cloud.allow_only(body["allow_only"], access_key_id=caller)
        return {"ok": True}

    def get_ram(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.cloud.lock:
            return self.cloud.ram.state()

    def clear_ram(self, body: dict[str, Any]) -> dict[str, Any]:
        self.cloud.clear_ram()
        return {"ok": True}

    def clear(self, body: dict[str, Any]) -> dict[str, Any]:
        self.cloud.clear_faults()
        return {"ok": True}

    def list_faults(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "faults": [r.as_dict() for r in self.cloud.faults.rules],
            "fired": self.cloud.faults.fired[-100:],
        }

    def events(self, body: dict[str, Any]) -> dict[str, Any]:
        instance_id = _text(body, "instance_id", required=True)
        code = _text(body, "code", required=True)
        cycle_status = _text(body, "cycle_status", "Executing")
        reason = _text(body, "reason", "")
        when = _time(body, "not_before")
        if instance_id not in self.cloud.ecs.instances:
            raise ControlError(f"no instance {instance_id!r}")
        event_id = self.cloud.add_system_event(instance_id, code, cycle_status, when, reason)
        return {"event_id": event_id}

    def state(self, body: dict[str, Any]) -> dict[str, Any]:
        self.cloud.tick()
        return self.cloud.state()

    def groups(self, body: dict[str, Any]) -> dict[str, Any]:
        allowed = {
            "name",
            "min_size",
            "max_size",
            "desired_capacity",
            "instance_type",
            "scaling_policy",
            "region_id",
            "enable",
            "in_service",
            "default_cooldown_s",
        }
        unknown = set(body) - allowed
        if unknown:
            raise ControlError(f"unknown group field(s) {sorted(unknown)}; expected {sorted(allowed)}")
        _check_group(body)
        return {"group_id": self.cloud.create_group_for_tests(**body)}

    def stock(self, body: dict[str, Any]) -> dict[str, Any]:
        """Set a (zone, type) stock count, or schedule a sold-out window with ``start``/``end``."""
        allowed = {"instance_type", "zone_id", "available", "spot", "start", "end"}
        unknown = set(body) - allowed
        if unknown:
            raise ControlError(f"unknown stock field(s) {sorted(unknown)}; expected {sorted(allowed)}")
        instance_type = body.get("instance_type")
        if not isinstance(instance_type, str) or not instance_type:
            raise ControlError("instance_type is required (a non-empty string)")
        zone_id = body.get("zone_id")
        if zone_id is not None and not isinstance(zone_id, str):
            raise ControlError("zone_id must be a string or null (every zone)")
        spot = bool(body.get("spot", False))
        if "start" in body:
            start = datetime.fromtimestamp(parse_time_s(str(body["start"]), "start"), UTC)
            end_raw = body.get("end")
            end = None if end_raw is None else datetime.fromtimestamp(parse_time_s(str(end_raw), "end"), UTC)
            if end is not None and end <= start:
                raise ControlError("end must be after start")
            self.cloud.schedule_sold_out(instance_type, start, end, zone_id=zone_id, spot_only=spot)
            return {"ok": True}
        available = body.get("available")
        if available is not None and (isinstance(available, bool) or not isinstance(available, int)):
            raise ControlError(f"available must be a whole number or null (unlimited), got {available!r}")
        if available is not None and available < 0:
            raise ControlError("available must not be negative")
        self.cloud.set_stock(instance_type, available, zone_id=zone_id, spot=spot)
        return {"ok": True}

    def get_stock(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.cloud.state()["stock"]

    def prices(self, body: dict[str, Any]) -> dict[str, Any]:
        instance_type = body.get("instance_type")
        if not isinstance(instance_type, str) or not instance_type:
            raise ControlError("instance_type is required (a non-empty string)")
        on_demand = _number(body, "on_demand_cny_per_hour")
        spot = _number(body, "spot_cny_per_hour")
        for key, price in (("on_demand_cny_per_hour", on_demand), ("spot_cny_per_hour", spot)):
            if price is not None and price < 0:
                raise ControlError(f"{key} must not be negative, got {price:g}")
        self.cloud.set_price(instance_type, on_demand_cny_per_hour=on_demand, spot_cny_per_hour=spot)
        return {"ok": True}

    def limits(self, body: dict[str, Any]) -> dict[str, Any]:
        quota = body.get("scheduled_tasks")
        if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
            raise ControlError(f"scheduled_tasks must be a whole number from 0, got {quota!r}")
        with self.cloud.lock:
            self.cloud.ess.scheduled_task_quota = quota
        return {"ok": True}

    def spot_reclaim(self, body: dict[str, Any]) -> dict[str, Any]:
        instance_id = body.get("instance_id")
        if not isinstance(instance_id, str) or instance_id not in self.cloud.ecs.instances:
            raise ControlError(f"no instance {instance_id!r}")
        notice_s = _number(body, "notice_s", 300.0) or 0.0
        if notice_s < 0:
            raise ControlError("notice_s must not be negative")
        return {"event_id": self.cloud.reclaim_spot(instance_id, notice_s)}

    def metadata(self, name: str) -> tuple[int, dict[str, Any]]:
        """``GET /_fake/metadata/<instance id>/instance/spot/termination-time``: what the instance's
        metadata service answers (404 when it is not being reclaimed)."""
        parts = name.split("/", 2)
        if len(parts) != 3 or parts[2] != "instance/spot/termination-time":
            return 404, {"error": f"no metadata item {name!r}"}
        when = self.cloud.spot_termination_time(parts[1])
        if when is None:
            return 404, {"error": "404 - Not Found"}
        return 200, {"termination_time": when}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, delayed ACKs add ~40 ms per keep-alive call.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        return  # quiet: tests and the simulator make thousands of calls

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, headers: dict[str, str], payload: str) -> None:
        data = payload.encode("utf-8")
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        body = self._body()
        if self.path.startswith(CONTROL_PREFIX):
            try:
                parsed = json.loads(body) if body.strip() else {}
                if not isinstance(parsed, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as err:
                self._send(
                    400, {"Content-Type": "application/json"}, json.dumps({"error": f"bad JSON: {err}"})
                )
                return
            path = self.path.split("?", 1)[0]
            status, result = self.server.control.handle(self.command, path, parsed)
            self._send(status, {"Content-Type": "application/json"}, json.dumps(result, default=str))
            return
        host = self.headers.get("Host", "127.0.0.1")
        status, headers, payload = self.server.cloud.handle(
            self.command, f"http://{host}{self.path}", dict(self.headers.items()), body
        )
        self._send(status, headers, payload)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch  # noqa: N815 - http.server's naming


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cloud: FakeCloud) -> None:
        super().__init__(address, _Handler)
        self.cloud = cloud
        self.control = FakeControl(cloud)


class FakeAliyunServer:
    """The fake cloud on ``127.0.0.1:<port>`` (``port=0`` picks a free one); a context manager."""

    def __init__(
        self,
        port: int = 0,
        boot_seconds: float = 30.0,
        time_scale: float = 1.0,
        seed: int = 0,
        account_id: str = DEFAULT_ACCOUNT_ID,
        host: str = "127.0.0.1",
        clock: Clock | None = None,
        start: datetime | None = None,
        **cloud_options: Any,
    ) -> None:
        self.host = host
        self.port = port
        self.cloud = FakeCloud(
            clock=clock if clock is not None else ScaledClock(time_scale, start),
            boot_seconds=boot_seconds,
            seed=seed,
            account_id=account_id,
            **cloud_options,
        )
        self.cloud.raise_on_bug = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def bind(self) -> None:
        """Open the listening socket (``start`` does this too); raises OSError when the port is taken."""
        if self._server is None:
            self._server = _Server((self.host, self.port), self.cloud)
            self.port = self._server.server_address[1]

    def start(self) -> FakeAliyunServer:
        self.bind()
        assert self._server is not None
        # A short poll interval makes stop() quick (shutdown waits for the loop's next poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-aliyun", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until ``stop`` (or KeyboardInterrupt)."""
        self.bind()
        assert self._server is not None
        self._server.serve_forever()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAliyunServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
