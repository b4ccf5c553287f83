"""The status API: health, status and Prometheus metrics for everyone, operator actions behind a bearer token,
and the web console (fleet/service/console, docs/console.md) on the same listener.

Reads come from the shared store (so every replica answers the same) plus the replica's own last tick.
Mutations never touch the cloud directly: pausing a group writes a control row, and acknowledging, isolating
and releasing write to the store or queue an operator request that the lease holder's next tick carries out
through the same workflow as automatic actions. Without a configured token every mutation is refused (403);
a request without credentials gets 401, a wrong token 403.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fleet.service.console import Console
from fleet.service.ess_reach import outage_for_instance
from fleet.service.metrics import ServiceMetrics
from fleet.service.store import (
    MAX_HUMAN_NAME_CHARS,
    NO_INCIDENT,
    AckOutcome,
    CancelOutcome,
    Store,
    human_actor,
)
from fleet.service.views import (
    REQUEST_LOG_ROWS,
    cancel_refusal,
    request_id_problem,
    request_limit_problem,
    request_log_view,
    request_what,
)

log = logging.getLogger(__name__)

# Every body this API takes is a small JSON object; a larger one is refused before it is held in memory.
MAX_BODY_BYTES = 64 * 1024
# Column widths of the store (fleet/service/store.py): longer values would fail the insert on PostgreSQL.
MAX_INSTANCE_ID_CHARS = 64
MAX_ACTOR_CHARS = 200


def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj, default=str), status_code=status, media_type="application/json")


def create_app(
    *,
    store: Store,
    metrics: ServiceMetrics,
    token: str | None,
    clock: Callable[[], datetime],
    groups: Callable[[], set[str]],
    status: Callable[[], dict[str, Any]],
    health: Callable[[], dict[str, Any]],
) -> Starlette:
    """The Starlette app: the JSON API and the web console; callables give the live view (no state here)."""
    api = _StatusApi(
        store=store, metrics=metrics, token=token, clock=clock, groups=groups, status=status, health=health
    )
    console = Console(store=store, token=token, clock=clock, groups=groups, status=status)
    return Starlette(routes=api.routes() + console.routes())


class _StatusApi:
    """The JSON endpoints; each handler is a method so that none hides inside one long factory."""

    def __init__(
        self,
        *,
        store: Store,
        metrics: ServiceMetrics,
        token: str | None,
        clock: Callable[[], datetime],
        groups: Callable[[], set[str]],
        status: Callable[[], dict[str, Any]],
        health: Callable[[], dict[str, Any]],
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.token = token
        self.clock = clock
        self.groups = groups
        self.status = status
        self.health = health

    def routes(self) -> list[Route]:
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/status", self.status_view, methods=["GET"]),
            Route("/metrics", self.metrics_view, methods=["GET"]),
            Route("/groups/{name}/pause", self.pause_or_resume(True), methods=["POST"]),
            Route("/groups/{name}/resume", self.pause_or_resume(False), methods=["POST"]),
            Route("/groups/{name}/reset-breaker", self.reset_breaker, methods=["POST"]),
            Route("/incidents/{incident_id}/ack", self.ack, methods=["POST"]),
            Route("/isolate", self.operator_request("isolate"), methods=["POST"]),
            Route("/release", self.operator_request("release"), methods=["POST"]),
            Route("/replace", self.operator_request("replace"), methods=["POST"]),
            Route("/requests", self.requests_view, methods=["GET"]),
            Route("/requests/{request_id}/cancel", self.cancel_request, methods=["POST"]),
        ]

    def authorized(self, request: Request) -> Response | None:
        token = self.token
        if not token:
            return _json({"error": "mutations disabled: no API token configured"}, 403)
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            return JSONResponse(
                {"error": "bearer token required"}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
        if not hmac.compare_digest(given.strip().encode(), token.encode()):
            return _json({"error": "invalid token"}, 403)
        return None

    async def body_of(self, request: Request) -> dict[str, Any]:
        """The JSON object of the body; 413 beyond MAX_BODY_BYTES, read in chunks so none is held whole."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # 64 KiB of '[' nests deeper than the parser goes
            return {"__invalid__": True}
        return data if isinstance(data, dict) else {"__invalid__": True}

    # Handlers that read the store are plain functions: Starlette runs them in worker threads, so a slow or
    # locked database never blocks the event loop, and /healthz (memory only) answers whatever the store does.
    async def healthz(self, request: Request) -> Response:
        return _json({"ok": True, **self.health()})

    def status_view(self, request: Request) -> Response:
        return _json(self.status())

    def metrics_view(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def requests_view(self, request: Request) -> Response:
        """The queued requests, then the newest handled ones: ``limit`` in all (open, like /status, whose
        ``requests`` lists the queued ones)."""
        raw = request.query_params.get("limit", str(REQUEST_LOG_ROWS))
        problem = request_limit_problem(raw)
        if problem:
            return _json({"error": problem}, 400)
        rows = self.store.request_log(int(raw))
        return _json({"service": self.store.service, "requests": [request_log_view(r) for r in rows]})

    def unknown_group(self, name: str) -> Response | None:
        """A 404 naming the groups there are, for a group name this service does not decide."""
        known = self.groups()
        if name in known:
            return None
        return _json({"error": f"unknown group {name!r}; known: {', '.join(sorted(known))}"}, 404)

    def pause_or_resume(self, paused: bool) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            if (denied := self.authorized(request)) is not None:
                return denied
            name = request.path_params["name"]
            if (unknown := self.unknown_group(name)) is not None:
                return unknown
            body = await self.body_of(request)
            reason = str(body.get("reason", ""))
            pause = partial(self.store.set_paused, name, paused, "api", self.clock(), reason=reason)
            await run_in_threadpool(pause)
            log.info("group %s %s through the API", name, "paused" if paused else "resumed")
            return _json({"group": name, "paused": paused})

        return handler

    async def reset_breaker(self, request: Request) -> Response:
        """Queue a human's reset of a group's isolation breaker (only a human ends it: docs/policies.md)."""
        if (denied := self.authorized(request)) is not None:
            return denied
        name = request.path_params["name"]
        if (unknown := self.unknown_group(name)) is not None:
            return unknown
        body = await self.body_of(request)
        reason, actor = str(body.get("reason") or ""), str(body.get("actor") or "api")
        if body.get("__invalid__") or not reason.strip():
            return _json({"error": "body must be JSON with a non-empty string field reason"}, 400)
        bad = _text_problem("actor", actor, MAX_ACTOR_CHARS) or (
            "reason must not contain NUL characters" if "\x00" in reason else None
        )
        if bad is not None:
            return _json({"error": bad}, 400)
        fields = {"group_name": name, "reason": reason, "actor": actor}
        rid = await run_in_threadpool(
            partial(self.store.add_request, "reset_breaker", self.clock(), **fields)
        )
        return _json({"request": rid, "kind": "reset_breaker", "group": name, "queued": True}, 202)

    async def ack(self, request: Request) -> Response:
        if (denied := self.authorized(request)) is not None:
            return denied
        incident_id = request.path_params["incident_id"]
        body = await self.body_of(request)
        actor = str(body.get("actor") or "api")
        if (bad := _text_problem("actor", actor, MAX_HUMAN_NAME_CHARS)) is not None:
            return _json({"error": bad}, 400)
        now = self.clock()
        found = await run_in_threadpool(self.store.acknowledge_incident, incident_id, actor, now)
        if found == AckOutcome.UNKNOWN:
            return _json({"error": f"unknown incident {incident_id!r}"}, 404)
        if found == AckOutcome.CLOSED:
            return _json({"error": f"incident {incident_id!r} is closed: nothing to acknowledge"}, 409)
        if found == AckOutcome.OTHER_SERVICE:
            owner = await run_in_threadpool(self.store.incident_owner, incident_id)
            return _json({"error": f"incident {incident_id!r} belongs to service {owner!r}"}, 409)
        # The policy learns of it on the leader's next tick (the respond-by clock stops there too).
        await run_in_threadpool(
            partial(self.store.add_request, "ack", now, incident_id=incident_id, actor=human_actor(actor))
        )
        return _json({"incident": incident_id, "acknowledged_by": actor})

    async def cancel_request(self, request: Request) -> Response:
        """Withdraw a queued request the leader has not taken: 404 unknown, 409 already handled (its
        outcome named), an acknowledgment, or another service's."""
        if (denied := self.authorized(request)) is not None:
            return denied
        raw = request.path_params["request_id"]
        if (problem := request_id_problem(raw)) is not None:
            return _json({"error": problem}, 400)
        body = await self.body_of(request)
        reason, actor = str(body.get("reason") or ""), str(body.get("actor") or "api")
        bad = _text_problem("actor", actor, MAX_ACTOR_CHARS) or (
            "reason must not contain NUL characters" if "\x00" in reason else None
        )
        if body.get("__invalid__") or bad is not None:
            return _json({"error": bad or "body must be a JSON object"}, 400)
        rid = int(raw.strip())
        cancel = partial(self.store.cancel_request, rid, actor, self.clock(), reason=reason)
        found, req = await run_in_threadpool(cancel)
        if found == CancelOutcome.CANCELLED and req is not None:
            log.info("request %s (%s) cancelled by %s through the API", rid, request_what(req), actor)
            return _json({"request": rid, "kind": req.kind, "cancelled": True, "by": actor})
        status = 404 if found == CancelOutcome.UNKNOWN else 409
        return _json({"error": cancel_refusal(found, req, rid, self.store.service)}, status)

    def operator_request(self, kind: str) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            if (denied := self.authorized(request)) is not None:
                return denied
            body = await self.body_of(request)
            instance_id = body.get("instance_id")
            if body.get("__invalid__") or not isinstance(instance_id, str) or not instance_id:
                return _json({"error": "body must be JSON with a string field instance_id"}, 400)
            reason = str(body.get("reason") or "")
            if kind == "isolate" and not reason:
                return _json({"error": "isolate needs a reason"}, 400)
            actor = str(body.get("actor") or "api")
            bad = (
                _text_problem("instance_id", instance_id, MAX_INSTANCE_ID_CHARS)
                or _text_problem("actor", actor, MAX_ACTOR_CHARS)
                or ("reason must not contain NUL characters" if "\x00" in reason else None)
            )
            if bad is not None:
                return _json({"error": bad}, 400)
            if kind in ("release", "replace") and not await run_in_threadpool(
                self.store.releasable, instance_id
            ):
                return _json({"error": f"{instance_id} {NO_INCIDENT}: nothing to {kind}"}, 409)
            now = self.clock()
            fields = {"instance_id": instance_id, "reason": reason, "actor": actor}
            rid = await run_in_threadpool(partial(self.store.add_request, kind, now, **fields))
            # while ESS cannot be read for its group it waits: say why (None: the next tick takes it)
            outage = await run_in_threadpool(partial(outage_for_instance, self.store, instance_id))
            answer = {"request": rid, "kind": kind, "instance_id": instance_id, "queued": True}
            return _json({**answer, "waiting": outage.why() if outage is not None else None}, 202)

        return handler


def _text_problem(field: str, value: str, max_chars: int) -> str | None:
    """Why ``value`` cannot be stored in ``field`` (PostgreSQL refuses NUL and over-long ids), or None."""
    if len(value) > max_chars:
        return f"{field} must be at most {max_chars} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{field} must not contain control characters"
    return None


class ApiServer:
    """uvicorn in a daemon thread (signals stay with the main loop); ``port`` is the bound port."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 8080) -> None:
        import uvicorn

        self._config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 10.0) -> ApiServer:
        self._thread = threading.Thread(target=self._serve, name="fleet-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"status API could not listen on {self.host}:{self.port}")
            if time.monotonic() > deadline:
                raise RuntimeError("status API did not start in time")
            time.sleep(0.02)
        sockets = [s for srv in self._server.servers for s in srv.sockets]
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    def _serve(self) -> None:
        try:
            self._server.run()
        except SystemExit:  # uvicorn exits when it cannot bind; start() reports that to the caller
            log.error("status API stopped: could not listen on %s:%s", self.host, self.port)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
