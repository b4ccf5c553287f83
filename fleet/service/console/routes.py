"""The console's routes: four read-only pages for everyone, sign-in, and operator actions for the signed-in.

Actions write exactly what the JSON API's do (fleet/service/api.py): acknowledging marks the incident
and queues an ``ack`` for the leader; isolate and release queue operator requests that the lease holder's
next tick carries out, and cancel withdraws one still queued; pause and resume write the group's control
row. Each is recorded under the signed-in operator's name. The order of checks on a POST: a token is
configured (403), the Origin is this host (403), a valid session (401), the form's CSRF token (403), then
the input (400).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from fleet.service.console import data, pages, security
from fleet.service.console.html import Safe
from fleet.service.console.static import CSS, FAVICON_SVG, JS
from fleet.service.store import NOT_RELEASABLE, AckOutcome, CancelOutcome, Store, human_actor
from fleet.service.views import (
    REQUEST_LOG_ROWS,
    cancel_refusal,
    request_id_problem,
    request_what,
    sla_report,
)
from policies.spec import parse_duration

log = logging.getLogger("fleet.console")

# Nothing but this listener: scripts, styles, images, fetches and form posts stay on the console's origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_INSTANCE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
MAX_FORM_BYTES = 16 * 1024


class Refused(Exception):
    """An action refused before it touched the store: the HTTP status and the line the page shows."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Action:
    """A signed-in operator's form, checked: who sent it and its fields."""

    session: security.Session
    form: dict[str, str]

    def field(self, name: str) -> str:
        return self.form.get(name, "").strip()


class Console:
    """The console over one store; callables give the live view, as for the JSON API."""

    def __init__(
        self,
        *,
        store: Store,
        token: str | None,
        clock: Callable[[], datetime],
        groups: Callable[[], set[str]],
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self.store = store
        self.token = token
        self.clock = clock
        self.groups = groups
        self.status = status

    def routes(self) -> list[Route]:
        return [
            Route("/", self.root, methods=["GET"]),
            Route("/console", self.root, methods=["GET"]),
            Route("/console/", self.fleet, methods=["GET"]),
            Route("/console/groups/{name}", self.group, methods=["GET"]),
            Route("/console/incidents", self.incidents, methods=["GET"]),
            Route("/console/decisions", self.decisions, methods=["GET"]),
            Route("/console/signin", self.signin_form, methods=["GET"]),
            Route("/console/signin", self.signin, methods=["POST"]),
            Route("/console/signout", self.action(self._signout), methods=["POST"]),
            Route("/console/incidents/{incident_id}/ack", self.action(self._ack), methods=["POST"]),
            Route("/console/isolate", self.action(self._isolate), methods=["POST"]),
            Route("/console/release", self.action(self._release), methods=["POST"]),
            Route("/console/requests/{request_id}/cancel", self.action(self._cancel), methods=["POST"]),
            Route("/console/groups/{name}/pause", self.action(self._pause(True)), methods=["POST"]),
            Route("/console/groups/{name}/resume", self.action(self._pause(False)), methods=["POST"]),
            Route("/console/static/{file}", self.static, methods=["GET"]),
        ]

    # -- plumbing ---------------------------------------------------------------------------------------
    def viewer(self, request: Request) -> tuple[pages.Viewer, security.Session | None]:
        session = security.read_session(
            request.cookies.get(security.SESSION_COOKIE), self.token, self.clock()
        )
        if session is None or not self.token:
            return pages.Viewer(can_sign_in=bool(self.token)), None
        return pages.Viewer(name=session.name, csrf=security.csrf_token(session, self.token)), session

    def page(self, request: Request, title: str, here: str, body: Safe, status_code: int = 200) -> Response:
        viewer, _ = self.viewer(request)
        message = self._flash(request)
        html = pages.layout(title, here, viewer, body, self.clock(), message)
        return Response(html, status_code, headers=SECURITY_HEADERS, media_type="text/html; charset=utf-8")

    def _flash_query(self, message: str) -> str:
        """The confirmation shown after a redirect, signed: a crafted link cannot put words on a page."""
        return urlencode({"msg": message, "sig": security.sign_message(self.token or "", message)})

    def _flash(self, request: Request) -> str:
        message = request.query_params.get("msg", "")
        given = request.query_params.get("sig", "")
        if not message or not self.token or not security.message_ok(self.token, message, given):
            return ""
        return message[:300]

    async def root(self, request: Request) -> Response:
        return RedirectResponse("/console/", 307)

    async def static(self, request: Request) -> Response:
        files = {
            "console.css": (CSS, "text/css"),
            "console.js": (JS, "text/javascript"),
            "favicon.svg": (FAVICON_SVG, "image/svg+xml"),
        }
        found = files.get(request.path_params["file"])
        if found is None:
            return Response("not found", 404, media_type="text/plain")
        headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=300"}
        return Response(found[0], media_type=found[1], headers=headers)

    # -- pages ------------------------------------------------------------------------------------------
    def fleet(self, request: Request) -> Response:  # sync: run in a worker thread (store reads)
        now = self.clock()
        status = self.status()
        last = data.latest_decisions(self.store)
        series = data.spark_series(self.store, now - pages.SPARK_WINDOW)
        floors = data.latest_floor_codes(self.store)
        viewer, _ = self.viewer(request)
        body = pages.fleet_page(status, last, series, floors, viewer, now)
        return self.page(request, "Fleet", "fleet", body)

    def group(self, request: Request) -> Response:  # sync: run in a worker thread (store reads)
        name = request.path_params["name"]
        g = next((x for x in self.status().get("groups", []) if x["name"] == name), None)
        if g is None:
            return self.page(
                request, "Unknown group", "fleet", pages.refusal(f"no group named {name!r}"), 404
            )
        window = request.query_params.get("window", "6h")
        window = window if window in pages.WINDOWS else "6h"
        now = self.clock()
        start = now - pages.WINDOWS[window]
        points = data.capacity_series(self.store, start, group=name).get(name, [])
        forecast = data.forecasts(self.store, name, start, now)
        viewer, _ = self.viewer(request)
        body = pages.group_page(name, g, points, forecast, window, viewer, now)
        return self.page(request, f"Group {name}", "fleet", body)

    def incidents(self, request: Request) -> Response:  # sync: run in a worker thread (store reads)
        window = request.query_params.get("window", "7d")
        window = window if window in pages.WINDOWS else "7d"
        now = self.clock()
        since = now - pages.WINDOWS[window]
        # Open incidents whatever their age, then those detected in the window.
        rows = {i.id: i for i in self.store.incidents(since=since)}
        rows.update({i.id: i for i in self.store.incidents(open_only=True)})
        events = {i: self.store.incident_events(i) for i in rows}
        report = sla_report(self.store, since, now)
        requests = self.store.request_log(REQUEST_LOG_ROWS)
        viewer, _ = self.viewer(request)
        body = pages.incidents_page(list(rows.values()), events, report, window, viewer, now, requests)
        return self.page(request, "Incidents", "incidents", body)

    def decisions(self, request: Request) -> Response:  # sync: run in a worker thread (store reads)
        q = request.query_params
        now = self.clock()
        since_text = q.get("since", "24h").strip()
        error = ""
        since: datetime | None = None
        if since_text:
            try:
                since = now - timedelta(seconds=parse_duration(since_text))
            except ValueError:
                error = f"since: {since_text!r} is not a duration (e.g. 30m, 6h, 7d); showing all"
        before = q.get("before", "")
        f = data.DecisionFilter(
            group=q.get("group") or None,
            outcome=q.get("outcome") or None,
            reason_code=q.get("reason") or None,
            kind=q.get("kind") or None,
            since=since,
            before_id=int(before) if before.isdigit() else None,
        )
        rows = data.decision_log(self.store, f)
        more = None
        if len(rows) == data.PAGE_ROWS and rows[-1].id is not None:
            params = {k: v for k, v in q.items() if k != "before"}
            more = "/console/decisions?" + urlencode({**params, "before": rows[-1].id})
        body = pages.decisions_page(
            rows, f, since_text, sorted(self.groups()), data.outcomes_seen(self.store), more
        )
        if error:
            body = Safe(pages.refusal(error).split("<p><a")[0] + body)
        return self.page(request, "Decisions", "decisions", body)

    # -- sign-in --------------------------------------------------------------------------------------
    async def signin_form(self, request: Request) -> Response:
        return self.page(request, "Sign in", "", pages.signin_page(can_sign_in=bool(self.token)))

    async def signin(self, request: Request) -> Response:
        if not self.token:
            return self.page(request, "Sign in", "", pages.signin_page(can_sign_in=False), 403)
        if not security.same_origin(request.headers.get("origin"), request.headers.get("host")):
            return self.page(request, "Sign in", "", pages.refusal("cross-origin sign-in refused"), 403)
        try:
            form = await _form(request)
        except Refused as exc:
            return self.page(request, "Sign in", "", pages.signin_page(exc.message), exc.status)
        name = form.get("name", "").strip()
        if not security.valid_name(name):
            body = pages.signin_page("a name of letters, digits and . _ @ + - (up to 64) is required")
            return self.page(request, "Sign in", "", body, 400)
        if not security.token_matches(form.get("token", ""), self.token):
            log.warning("console: failed sign-in as %s", name)
            return self.page(request, "Sign in", "", pages.signin_page("wrong token"), 403)
        session = security.issue_session(name, self.token, self.clock())
        log.info("console: %s signed in", name)
        response = RedirectResponse("/console/?" + self._flash_query(f"signed in as {name}"), 303)
        response.set_cookie(
            security.SESSION_COOKIE,
            session.cookie,
            max_age=int(security.SESSION_TTL.total_seconds()),
            path=security.COOKIE_PATH,
            httponly=True,
            samesite="strict",
        )
        return response

    # -- actions --------------------------------------------------------------------------------------
    def action(
        self, perform: Callable[[Request, Action], Awaitable[str]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST handler: the checks of the security model, then ``perform``, then back to the page."""

        async def handler(request: Request) -> Response:
            try:
                act = await self._checked(request)
                message = await perform(request, act)
            except Refused as exc:
                return self.page(request, "Refused", "", pages.refusal(exc.message), exc.status)
            target = _safe_next(act.form.get("next", ""))
            sep = "&" if "?" in target else "?"
            response = RedirectResponse(f"{target}{sep}{self._flash_query(message)}", 303)
            if perform == self._signout:
                response.delete_cookie(security.SESSION_COOKIE, path=security.COOKIE_PATH)
            return response

        return handler

    async def _checked(self, request: Request) -> Action:
        if not self.token:
            raise Refused(403, "actions are disabled: no API token is configured")
        if not security.same_origin(request.headers.get("origin"), request.headers.get("host")):
            raise Refused(403, "cross-origin request refused")
        _, session = self.viewer(request)
        if session is None:
            raise Refused(401, "sign in first: actions need the API token")
        form = await _form(request)
        if not security.csrf_ok(session, self.token, form.get(security.CSRF_FIELD)):
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return Action(session=session, form=form)

    async def _signout(self, request: Request, act: Action) -> str:
        log.info("console: %s signed out", act.session.name)
        return "signed out"

    async def _ack(self, request: Request, act: Action) -> str:
        incident_id = request.path_params["incident_id"]
        name, now = act.session.name, self.clock()
        found = await run_in_threadpool(self.store.acknowledge_incident, incident_id, name, now)
        if found == AckOutcome.UNKNOWN:
            raise Refused(404, f"unknown incident {incident_id!r}")
        if found == AckOutcome.CLOSED:
            raise Refused(409, f"incident {incident_id} is closed: nothing to acknowledge")
        if found == AckOutcome.OTHER_SERVICE:
            owner = await run_in_threadpool(self.store.incident_owner, incident_id)
            raise Refused(409, f"incident {incident_id} belongs to service {owner!r}")
        # As the API does: the policy learns of it on the leader's next tick (respond-by stops there).
        await run_in_threadpool(
            partial(self.store.add_request, "ack", now, incident_id=incident_id, actor=human_actor(name))
        )
        log.info("console: %s acknowledged %s", name, incident_id)
        return f"{incident_id} acknowledged by {name}"

    async def _isolate(self, request: Request, act: Action) -> str:
        instance_id, reason = act.field("instance_id"), act.field("reason")
        if not _INSTANCE.match(instance_id):
            raise Refused(400, "isolate needs an instance id")
        if not reason:
            raise Refused(400, "isolate needs a reason")
        rid = await run_in_threadpool(
            partial(
                self.store.add_request,
                "isolate",
                self.clock(),
                instance_id=instance_id,
                reason=reason[:500],
                actor=act.session.name,
            )
        )
        log.info("console: %s asked to isolate %s (request %s)", act.session.name, instance_id, rid)
        return f"isolation of {instance_id} queued (request {rid}) by {act.session.name}"

    async def _release(self, request: Request, act: Action) -> str:
        instance_id = act.field("instance_id")
        if not _INSTANCE.match(instance_id):
            raise Refused(400, "release needs an instance id")
        if not await run_in_threadpool(self.store.releasable, instance_id):
            raise Refused(409, f"{instance_id} {NOT_RELEASABLE}")
        rid = await run_in_threadpool(
            partial(
                self.store.add_request,
                "release",
                self.clock(),
                instance_id=instance_id,
                reason=act.field("reason"),
                actor=act.session.name,
            )
        )
        log.info("console: %s asked to release %s (request %s)", act.session.name, instance_id, rid)
        return f"release of {instance_id} queued (request {rid}) by {act.session.name}"

    async def _cancel(self, request: Request, act: Action) -> str:
        """Withdraw a queued request, as ``POST /requests/{id}/cancel`` does; refused with its one line."""
        raw = request.path_params["request_id"]
        if (problem := request_id_problem(raw)) is not None:
            raise Refused(400, problem)
        rid, name = int(raw.strip()), act.session.name
        found, req = await run_in_threadpool(self.store.cancel_request, rid, name, self.clock())
        if found != CancelOutcome.CANCELLED or req is None:
            status = 404 if found == CancelOutcome.UNKNOWN else 409
            raise Refused(status, cancel_refusal(found, req, rid, self.store.service))
        log.info("console: %s cancelled request %s (%s)", name, rid, request_what(req))
        return f"request {rid} ({request_what(req)}) cancelled by {name}"

    def _pause(self, paused: bool) -> Callable[[Request, Action], Awaitable[str]]:
        async def perform(request: Request, act: Action) -> str:
            name = request.path_params["name"]
            if name not in self.groups():
                raise Refused(404, f"unknown group {name!r}")
            await run_in_threadpool(
                partial(self.store.set_paused, name, paused, act.session.name, self.clock(), reason="console")
            )
            verb = "paused" if paused else "resumed"
            log.info("console: %s %s group %s", act.session.name, verb, name)
            return f"{name} {verb} by {act.session.name}"

        return perform


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (first value each); another body reads as no fields (so its CSRF check
    fails), one over the limit is refused."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    # Read in chunks and stop at the limit: the sign-in form reads its body before any credential is
    # checked, so a body read whole first let anyone make the service hold gigabytes.
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise Refused(413, "form too large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise Refused(413, "form too large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    parsed = parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def _safe_next(target: str) -> str:
    """Only back to a console page of this origin (never an open redirect)."""
    if target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console/"
