"""The console's security model: a signed session cookie in place of the bearer token, and CSRF tokens.

Signing in checks the operator's bearer token (the status API's ``api.token``) once and sets a session cookie
``fleet_session`` = ``<name>.<issued_at>.<signature>``, the signature an HMAC-SHA256 keyed by the token. The
cookie therefore never holds the token itself, every replica configured with the same token accepts it, and
rotating the token signs everyone out. It is HttpOnly (no script reads it) and SameSite=Strict (no other
site's page sends it), scoped to the console's path, and expires after :data:`SESSION_TTL`.

Every form that changes something carries a CSRF token derived from the session (an HMAC of the cookie value),
so a request that did not come from a page this console rendered for this session is refused even where a
browser ignores SameSite. Cross-origin POSTs (an ``Origin`` that is not this host) are refused before anything
else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

SESSION_COOKIE = "fleet_session"
CSRF_FIELD = "csrf"
# A working shift and then some: long enough not to sign an on-call engineer out mid-incident.
SESSION_TTL = timedelta(hours=12)
COOKIE_PATH = "/console"
_NAME = re.compile(r"^[A-Za-z0-9._@+-]{1,64}$")


@dataclass(frozen=True)
class Session:
    """A signed-in operator: ``name`` is what every action they take is recorded under."""

    name: str
    cookie: str


def valid_name(name: str) -> bool:
    """Operator names are short identifiers (they end up in audit rows and log lines)."""
    return bool(_NAME.match(name))


def _sign(token: str, message: str) -> str:
    digest = hmac.new(token.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def token_matches(given: str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(given.strip().encode(), (token or "").encode())


def issue_session(name: str, token: str, now: datetime) -> Session:
    issued = str(int(now.timestamp()))
    body = f"{name}.{issued}"
    return Session(name=name, cookie=f"{body}.{_sign(token, 'session|' + body)}")


def read_session(cookie: str | None, token: str | None, now: datetime) -> Session | None:
    """The session a cookie proves, or None (no token configured, forged, expired or malformed)."""
    if not cookie or not token:
        return None
    body, _, signature = cookie.rpartition(".")
    name, _, issued = body.rpartition(".")
    if not valid_name(name) or not issued.isdigit():
        return None
    if not hmac.compare_digest(signature.encode(), _sign(token, "session|" + body).encode()):
        return None
    age_s = now.timestamp() - int(issued)
    if age_s < -60 or age_s > SESSION_TTL.total_seconds():
        return None
    return Session(name=name, cookie=cookie)


def csrf_token(session: Session, token: str) -> str:
    """The CSRF value every form of this session carries."""
    return _sign(token, "csrf|" + session.cookie)


def csrf_ok(session: Session, token: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest((given or "").encode(), csrf_token(session, token).encode())


def same_origin(origin: str | None, host: str | None) -> bool:
    """No ``Origin`` (old browsers, curl) passes to the CSRF check; one naming another host is refused."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return origin.split("://", 1)[-1].rstrip("/") == host


def sign_message(token: str, message: str) -> str:
    return _sign(token, "flash|" + message)


def message_ok(token: str, message: str, given: str) -> bool:
    return hmac.compare_digest(given.encode(), sign_message(token, message).encode())
