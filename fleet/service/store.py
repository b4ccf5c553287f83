"""The service's record: decisions, the persisted policy history, incidents with their timeline, operator
requests.

One SQLAlchemy 2 engine over SQLite (default) or PostgreSQL (``postgresql+psycopg://...``). The schema is
owned by the alembic migrations shipped in ``fleet/service/migrations`` and applied at start-up by
:func:`open_store`, so every replica and every CLI command sees the same tables. Times are stored in UTC and
come back timezone-aware whatever the backend (SQLite keeps no zone). Nothing here reads the clock: callers
pass ``now``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

log = logging.getLogger(__name__)

DEFAULT_DATABASE_URL = "sqlite:///fleet.db"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def default_database_url(env: Mapping[str, str] | None = None) -> str:
    """``FLEET_DATABASE_URL`` when set, else a SQLite file ``fleet.db`` in the working directory."""
    source = os.environ if env is None else env
    return source.get("FLEET_DATABASE_URL") or DEFAULT_DATABASE_URL


class UtcDateTime(sa.types.TypeDecorator):
    """Aware datetimes in, aware UTC datetimes out; SQLite stores naive UTC, PostgreSQL timestamptz."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass timezone-aware times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("acquired_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
)

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("service", sa.String(100), nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("group_name", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("decision_id", sa.String(200), nullable=False),
    sa.Column("target", sa.Integer, nullable=True),
    sa.Column("instance_id", sa.String(64), nullable=True),
    sa.Column("incident_id", sa.String(100), nullable=True),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("inputs", sa.JSON, nullable=True),
    sa.Column("client_token", sa.String(64), nullable=True),
    sa.Column("request_id", sa.String(128), nullable=True),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("dry_run", sa.Boolean, nullable=False, default=False),
    sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    sa.Index("ix_decisions_service_at", "service", "at"),
    sa.Index("ix_decisions_group_kind", "service", "group_name", "kind"),
)

policy_state = sa.Table(
    "policy_state",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("history", sa.JSON, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("lease_epoch", sa.BigInteger, nullable=True),
)

incidents = sa.Table(
    "incidents",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("service", sa.String(100), nullable=False),
    sa.Column("group_name", sa.String(200), nullable=False),
    sa.Column("instance_id", sa.String(64), nullable=False),
    sa.Column("cause", sa.Text, nullable=False, default=""),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("detected_at", UtcDateTime, nullable=False),
    sa.Column("respond_by", UtcDateTime, nullable=True),
    sa.Column("isolate_by", UtcDateTime, nullable=True),
    sa.Column("acknowledged_at", UtcDateTime, nullable=True),
    sa.Column("acknowledged_by", sa.String(200), nullable=True),
    sa.Column("notified_at", UtcDateTime, nullable=True),
    sa.Column("isolated_at", UtcDateTime, nullable=True),
    sa.Column("closed_at", UtcDateTime, nullable=True),
    sa.Column("body", sa.JSON, nullable=True),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Index("ix_incidents_service_state", "service", "state"),
)

incident_events = sa.Table(
    "incident_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("incident_id", sa.String(100), nullable=False, index=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("detail", sa.Text, nullable=False, default=""),
    sa.Column("actor", sa.String(200), nullable=False, default="service"),
)

group_controls = sa.Table(
    "group_controls",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("actor", sa.String(200), nullable=False, default=""),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

operator_requests = sa.Table(
    "operator_requests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("service", sa.String(100), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("instance_id", sa.String(64), nullable=True),
    sa.Column("incident_id", sa.String(100), nullable=True),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("actor", sa.String(200), nullable=False, default=""),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("handled_at", UtcDateTime, nullable=True),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("group_name", sa.String(200), nullable=True),  # a request on a group (reset_breaker)
)

# Demand history (issue 16): one row per group and minute, the mean arrival rate and token mix of that minute.
demand_samples = sa.Table(
    "demand_samples",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("at", UtcDateTime, primary_key=True),
    sa.Column("request_rate_rps", sa.Float, nullable=False),
    sa.Column("prompt_tokens", sa.Float, nullable=True),
    sa.Column("output_tokens", sa.Float, nullable=True),
)

# What the predictive scaler's forecast predicted, once a minute per group: the demand at ``at`` (the end of
# the horizon it looked over), forecast at ``made_at``; the console plots it against ``demand_samples``.
forecasts = sa.Table(
    "forecasts",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("made_at", UtcDateTime, primary_key=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("forecast_rps", sa.Float, nullable=False),
    sa.Column("forecast_upper_rps", sa.Float, nullable=True),
    sa.Index("ix_forecasts_group_at", "service", "group_name", "at"),
)

# Each group's scaling instances as last read from ESS (JSON), so that a replica started while ESS cannot be
# read still watches them for isolation (fleet/service/observe.py, blind mode).
instance_lists = sa.Table(
    "instance_lists",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("read_at", UtcDateTime, nullable=False),
    sa.Column("body", sa.JSON, nullable=False),
)


# Each group name's ESS scaling group as last observed (account and region as fleet.yaml gives them, "" for
# the top level's): a group renamed in fleet.yaml is known by its scaling group (fleet/service/renames.py).
group_identities = sa.Table(
    "group_identities",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("scaling_group_id", sa.String(64), nullable=False),
    sa.Column("account", sa.String(200), nullable=False),
    sa.Column("region", sa.String(64), nullable=False),
    sa.Column("seen_at", UtcDateTime, nullable=False),
    sa.Index("ix_group_identities_scaling_group", "service", "scaling_group_id"),
)


# Why a release or a replacement is refused when ``Store.releasable`` is False (the CLI, the API and the
# console say it alike).
NO_INCIDENT = "has no open incident and no queued isolation"
NOT_RELEASABLE = f"{NO_INCIDENT}: nothing to release"


class AckOutcome(StrEnum):
    """What a human acknowledgment found (``Store.acknowledge_incident``)."""

    ACKNOWLEDGED = "acknowledged"
    UNKNOWN = "unknown"  # no incident has that id
    CLOSED = "closed"  # it ended before the acknowledgment: nothing is written
    OTHER_SERVICE = "other_service"  # another service's (``Store.incident_owner``): nothing is written


class CancelOutcome(StrEnum):
    """What an operator's cancel of a queued request found (``Store.cancel_request``)."""

    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # no request has that id
    HANDLED = "handled"  # taken, refused, expired or cancelled before: nothing is written
    OTHER_SERVICE = "other_service"  # another service's: nothing is written
    ACK = "ack"  # an acknowledgment is recorded when it is made: its queued copy only tells the policy


# The outcome a cancelled request ends with: "cancelled by NAME" and, where one was given, ": REASON".
CANCELLED_PREFIX = "cancelled by "


class Outcome(StrEnum):
    """What became of a decision: the ``outcome`` of its record (and of the actuator's result)."""

    APPLIED = "applied"  # the write was made (or found already made)
    NOOP = "noop"
    DRY_RUN = "dry_run"  # decided, not written: the actuator runs dry
    CONFLICT = "conflict"  # the cloud refused for now (an activity in progress): retried next tick
    BLOCKED = "blocked"  # a guardrail held the step: retried next tick
    ERROR = "error"  # transient failure (throttled, server, network): retried with the same token
    FAILED = "failed"  # the cloud refused for good
    FENCED = "fenced"  # the lease was lost before the write: nothing written
    SKIPPED = "skipped"  # nothing to do (a scheduled task already as wanted)
    NOTIFIED = "notified"  # an incident step announced on a human channel
    RECORDED = "recorded"  # an incident step with no write, only recorded
    # written before a cloud write is sent (with its ClientToken) and settled after it; one still intended
    # after a restart was interrupted mid-write and is reconciled from the ESS scaling activities
    INTENDED = "intended"


@dataclass(frozen=True)
class DecisionRecord:
    """One audited decision: what was decided from which inputs, what was done, and how it ended."""

    service: str
    at: datetime
    group_name: str
    kind: str  # scale | isolation | schedule
    action: str  # scale_to | enter_standby | reboot | ... | create_task ...
    decision_id: str
    outcome: str  # an Outcome
    reason: str = ""
    target: int | None = None
    instance_id: str | None = None
    incident_id: str | None = None
    inputs: dict[str, Any] | None = None
    client_token: str | None = None
    request_id: str | None = None
    error: str | None = None
    dry_run: bool = False
    lease_epoch: int | None = None
    id: int | None = None


@dataclass(frozen=True)
class IncidentRecord:
    """An incident as the operators see it; ``body`` keeps the policy engine's full model."""

    id: str
    service: str
    group_name: str
    instance_id: str
    state: str
    detected_at: datetime
    updated_at: datetime
    cause: str = ""
    respond_by: datetime | None = None
    isolate_by: datetime | None = None
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    notified_at: datetime | None = None
    isolated_at: datetime | None = None
    closed_at: datetime | None = None
    body: dict[str, Any] | None = None

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    @property
    def outcome(self) -> str | None:
        """How a closed incident ended (rebooted, replaced, released, recovered, ...); None while open."""
        return None if self.closed_at is None else (self.body or {}).get("outcome")


def state_label(state: str, outcome: str | None) -> str:
    """An incident's state as operators read it: a closed one with how it ended, ``closed (recovered)``."""
    return f"{state} ({outcome})" if outcome else state


# Who acknowledged an incident: a person is recorded as ``human:<name>``; anything else (a channel label) is
# the service's own acknowledgment once a human channel was reached. Built and read only through these two.
HUMAN_ACTOR_PREFIX = "human:"
# The actor columns hold 200 characters (``acknowledged_by``, ``operator_requests.actor``), and a person's
# name is kept behind HUMAN_ACTOR_PREFIX: a longer name was refused by PostgreSQL with a traceback.
MAX_HUMAN_NAME_CHARS = 200 - len(HUMAN_ACTOR_PREFIX)


def human_actor(name: str) -> str:
    """The actor recorded for a person (``fleet incidents ack``, the API's ack)."""
    return f"{HUMAN_ACTOR_PREFIX}{name}"


def is_human(actor: str | None) -> bool:
    """Whether ``actor`` names a person rather than the service."""
    return (actor or "").startswith(HUMAN_ACTOR_PREFIX)


@dataclass(frozen=True)
class IncidentEvent:
    incident_id: str
    at: datetime
    kind: str
    detail: str = ""
    actor: str = "service"


@dataclass(frozen=True)
class OperatorRequest:
    """An operator's isolate / release / ack, queued for the leader's next tick."""

    id: int
    service: str
    kind: str  # isolate | release | ack | reset_breaker
    created_at: datetime
    instance_id: str | None = None
    incident_id: str | None = None
    reason: str = ""
    actor: str = ""
    handled_at: datetime | None = None
    outcome: str | None = None
    group_name: str | None = None  # what a request on a group names (reset_breaker)


# Threads of one process (tests, the API beside the loop) never migrate concurrently.
_MIGRATION_LOCK = threading.Lock()


SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def _check_backend(url: str) -> None:
    parsed = sa.engine.make_url(url)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ValueError(
            f"a {backend} database is not supported: give sqlite:///FILE (the default) or "
            "postgresql+psycopg://USER@HOST:PORT/DB"
        )
    if backend == "postgresql":
        # the driver is the "postgres" extra, not a dependency of a plain install; without it SQLAlchemy
        # says "No module named 'psycopg'", which reads as a broken install
        driver = parsed.get_dialect().driver
        if importlib.util.find_spec(driver) is None:
            raise ValueError(
                f"the PostgreSQL driver {driver!r} is not installed: install the postgres extra "
                "(pip install 'gpu-fleet[postgres]', which brings psycopg) and give "
                "postgresql+psycopg://USER@HOST:PORT/DB"
            )


def make_engine(url: str) -> Engine:
    """An engine for ``url``: SQLite gets a busy timeout (replicas share the file), in-memory one pool.
    Another database is refused by name (its driver may be importable, its SQL is not what the
    migrations were tested on)."""
    _check_backend(url)
    if url.startswith("sqlite"):
        memory = url in ("sqlite://", "sqlite:///:memory:") or ":memory:" in url
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = StaticPool
        engine = sa.create_engine(url, **kwargs)

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            if not memory:
                # WAL lets readers (the CLI, the status API) run beside the writer: no "database is locked".
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


@contextmanager
def _migration_transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction around every migration step, committed or rolled back whole.

    PostgreSQL's DDL is transactional as it is. Python's sqlite3 driver, left to itself, opens a transaction
    only before INSERT/UPDATE/DELETE and runs CREATE TABLE and ALTER in autocommit: a start-up killed (or
    failing) between a migration's DDL and alembic's version stamp left the new tables in place under the old
    revision, and every later start failed on ``table ... already exists``. Here the driver's own transaction
    handling is switched off for this connection and the transaction is opened by hand (IMMEDIATE: the write
    lock at once, so a second replica starting beside this one waits instead of reading a half-migrated file).
    """
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            yield conn
        return
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        saved = raw.isolation_level  # type: ignore[union-attr]  # sqlite3.Connection on this dialect
        raw.isolation_level = None  # type: ignore[union-attr]
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            raw.isolation_level = saved  # type: ignore[union-attr]


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest alembic revision (idempotent; safe with several replicas starting)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _MIGRATION_LOCK:
        for attempt in range(5):
            try:
                with _migration_transaction(engine) as conn:
                    if conn.dialect.name == "postgresql":
                        # Serialise concurrent start-ups of replicas: the lock ends with the transaction.
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(7315001)"))
                    cfg.attributes["connection"] = conn
                    _refuse_unknown_revision(conn, cfg)
                    command.upgrade(cfg, "head")
                return
            except sa.exc.OperationalError as exc:  # SQLite: another replica holds the write lock
                if attempt == 4:
                    raise
                log.info("migration retry after %s", type(exc).__name__)
                time.sleep(0.2 * (attempt + 1))
            except sa.exc.IntegrityError:  # another replica created the version row first
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))


class StoreTooNew(RuntimeError):
    """The store's schema is at a revision this version does not know: a newer fleet migrated it."""


def _refuse_unknown_revision(conn: Connection, cfg: Any) -> None:
    """A store a newer fleet has migrated is refused by name (alembic would say only "Can't locate revision
    identified by ..."): nothing is changed, and its own version, or a newer one, reads it."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    known = {rev.revision for rev in ScriptDirectory.from_config(cfg).walk_revisions()}
    unknown = sorted(set(MigrationContext.configure(conn).get_current_heads()) - known)
    if unknown:
        newest = ScriptDirectory.from_config(cfg).get_current_head()
        raise StoreTooNew(
            f"the store's schema is at revision {', '.join(unknown)}, which this fleet version does not know "
            f"(its newest is {newest}): a newer fleet has migrated it; run that version or a newer one"
        )


class StoreFileGone(RuntimeError):
    """The SQLite file was deleted or replaced under a running store: its writes would reach no one."""


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None for in-memory databases and other backends)."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or ":memory:" in parsed.database:
        return None
    if parsed.database.startswith("file:"):
        return None  # a URI filename: leave it to SQLite
    return Path(parsed.database).resolve()


class StoreNotWritable(RuntimeError):
    """The store can be read but not written (a read-only file or mount, a read-only PostgreSQL replica)."""


class Store:
    """Typed reads and writes over the service tables; every method is one short transaction."""

    def __init__(self, engine: Engine, service: str = "fleet") -> None:
        self.engine = engine
        self.service = service
        # SQLite: which file (device, inode) this store opened, so that a deleted or replaced file is noticed
        # (SQLite itself goes on writing into the unlinked inode, which no other process can ever read).
        self.sqlite_path = sqlite_file(engine.url.render_as_string(hide_password=False))
        self._file_id: tuple[int, int] | None = None
        if self.sqlite_path is not None and self.sqlite_path.exists():
            st = self.sqlite_path.stat()
            self._file_id = (st.st_dev, st.st_ino)

    def check_file(self) -> None:
        """Raise StoreFileGone when the SQLite file this store opened is no longer at its path."""
        if self.sqlite_path is None or self._file_id is None:
            return
        try:
            st = self.sqlite_path.stat()
        except FileNotFoundError:
            raise StoreFileGone(
                f"database file {self.sqlite_path} was deleted while the service ran; its writes would be "
                "lost"
            ) from None
        if (st.st_dev, st.st_ino) != self._file_id:
            raise StoreFileGone(
                f"database file {self.sqlite_path} was replaced by another file while the service ran"
            )

    def check_writable(self) -> None:
        """Raise StoreNotWritable unless a write transaction can be opened: an UPDATE that matches no row,
        which SQLite refuses on a read-only file and PostgreSQL in a read-only transaction (a standby)."""
        try:
            with self.begin() as c:
                c.execute(sa.update(leases).where(sa.false()).values(holder=leases.c.holder))
        except (sa.exc.OperationalError, sa.exc.InternalError, sa.exc.ProgrammingError) as exc:
            reason = str(getattr(exc, "orig", exc)).splitlines()[0]
            raise StoreNotWritable(
                f"the store cannot be written ({reason}): the service writes its lease, history and "
                "decisions there; give a writable database"
            ) from None

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    # -- decisions ------------------------------------------------------------------------------------
    def record_decision(self, rec: DecisionRecord, conn: Connection | None = None) -> int:
        values = {k: v for k, v in rec.__dict__.items() if k != "id"}
        if conn is not None:
            return _new_id(conn.execute(sa.insert(decisions).values(**values)))
        with self.begin() as c:
            return _new_id(c.execute(sa.insert(decisions).values(**values)))

    def settle_decision(
        self,
        decision_id: int,
        outcome: str,
        *,
        request_id: str | None,
        error: str | None,
        reason: str | None = None,
    ) -> None:
        """Settle an ``intended`` record with what became of its write."""
        values: dict[str, Any] = {"outcome": outcome, "request_id": request_id, "error": error}
        if reason is not None:
            values["reason"] = reason
        with self.begin() as c:
            c.execute(sa.update(decisions).where(decisions.c.id == decision_id).values(**values))

    def delete_decision(self, decision_id: int) -> None:
        """Drop an ``intended`` record whose write ended as the previous attempt did (audited once)."""
        with self.begin() as c:
            c.execute(sa.delete(decisions).where(decisions.c.id == decision_id))

    def intended_decisions(self) -> list[DecisionRecord]:
        """This service's writes recorded as intended and never settled (a crash between write and audit)."""
        q = (
            sa.select(decisions)
            .where(decisions.c.service == self.service, decisions.c.outcome == Outcome.INTENDED)
            .order_by(decisions.c.id)
        )
        with self.engine.connect() as c:
            return [DecisionRecord(**dict(r._mapping)) for r in c.execute(q)]

    def decisions(
        self,
        since: datetime | None = None,
        group: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
    ) -> list[DecisionRecord]:
        """Decisions of this service, newest first."""
        q = sa.select(decisions).where(decisions.c.service == self.service)
        if since is not None:
            q = q.where(decisions.c.at >= since)
        if group is not None:
            q = q.where(decisions.c.group_name == group)
        if kind is not None:
            q = q.where(decisions.c.kind == kind)
        q = q.order_by(decisions.c.id.desc())
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as c:
            return [DecisionRecord(**dict(r._mapping)) for r in c.execute(q)]

    def decided_groups(self) -> list[str]:
        """The groups this service has recorded any decision for, sorted."""
        q = (
            sa.select(decisions.c.group_name)
            .where(decisions.c.service == self.service)
            .distinct()
            .order_by(decisions.c.group_name)
        )
        with self.engine.connect() as c:
            return [str(r[0]) for r in c.execute(q)]

    def applied_count(self, group: str, kind: str, action: str) -> int:
        """How many writes of this kind were applied for the group: the next decision's sequence number."""
        q = (
            sa.select(sa.func.count())
            .select_from(decisions)
            .where(
                decisions.c.service == self.service,
                decisions.c.group_name == group,
                decisions.c.kind == kind,
                decisions.c.action == action,
                decisions.c.outcome == Outcome.APPLIED,
            )
        )
        with self.engine.connect() as c:
            return int(c.execute(q).scalar_one())

    # -- policy history -------------------------------------------------------------------------------
    def load_history(self, key: str | None = None) -> dict[str, Any] | None:
        """The persisted policy history of this service (or of one of its shards: ``key``)."""
        with self.engine.connect() as c:
            row = c.execute(
                sa.select(policy_state.c.history).where(policy_state.c.service == (key or self.service))
            ).first()
        return None if row is None else row[0]

    def save_history(
        self,
        history: dict[str, Any],
        now: datetime,
        epoch: int | None,
        conn: Connection | None = None,
        key: str | None = None,
    ) -> None:
        service = key or self.service

        def _write(c: Connection) -> None:
            updated = c.execute(
                sa.update(policy_state)
                .where(policy_state.c.service == service)
                .values(history=history, updated_at=now, lease_epoch=epoch)
            )
            if updated.rowcount == 0:
                c.execute(
                    sa.insert(policy_state).values(
                        service=service, history=history, updated_at=now, lease_epoch=epoch
                    )
                )

        if conn is not None:
            _write(conn)
        else:
            with self.begin() as c:
                _write(c)

    # -- instance lists -----------------------------------------------------------------------------
    def save_instance_list(
        self, group: str, read_at: datetime, body: list[dict[str, Any]], conn: Connection
    ) -> None:
        """Keep a group's instance list as read at ``read_at`` (replacing the one kept before)."""
        where = (instance_lists.c.service == self.service) & (instance_lists.c.group_name == group)
        conn.execute(sa.delete(instance_lists).where(where))
        row = {"service": self.service, "group_name": group, "read_at": read_at, "body": body}
        conn.execute(sa.insert(instance_lists).values(**row))

    def instance_lists(self) -> dict[str, tuple[datetime, list[dict[str, Any]]]]:
        """Every group's kept instance list, with when it was read."""
        q = sa.select(instance_lists.c.group_name, instance_lists.c.read_at, instance_lists.c.body).where(
            instance_lists.c.service == self.service
        )
        with self.engine.connect() as c:
            return {str(name): (read_at, list(body or [])) for name, read_at, body in c.execute(q)}

    # -- incidents ------------------------------------------------------------------------------------
    def upsert_incident(self, inc: IncidentRecord, conn: Connection | None = None) -> bool:
        """Insert or update; returns True when the incident is new."""
        values = dict(inc.__dict__)

        def _write(c: Connection) -> bool:
            existing = c.execute(sa.select(incidents.c.id).where(incidents.c.id == inc.id)).first()
            if existing is None:
                c.execute(sa.insert(incidents).values(**values))
                return True
            # Operator fields written by the API or CLI must not be overwritten by an older view.
            keep = {"acknowledged_at", "acknowledged_by", "notified_at"}
            update = {k: v for k, v in values.items() if k not in keep or v is not None}
            update.pop("id")
            c.execute(sa.update(incidents).where(incidents.c.id == inc.id).values(**update))
            return False

        if conn is not None:
            return _write(conn)
        with self.begin() as c:
            return _write(c)

    def incidents(self, open_only: bool = False, since: datetime | None = None) -> list[IncidentRecord]:
        q = sa.select(incidents).where(incidents.c.service == self.service)
        if open_only:
            q = q.where(incidents.c.closed_at.is_(None))
        if since is not None:
            q = q.where(incidents.c.detected_at >= since)
        q = q.order_by(incidents.c.detected_at.desc())
        with self.engine.connect() as c:
            return [IncidentRecord(**dict(r._mapping)) for r in c.execute(q)]

    def incident(self, incident_id: str) -> IncidentRecord | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(incidents).where(incidents.c.id == incident_id)).first()
        return None if row is None else IncidentRecord(**dict(row._mapping))

    def incident_owner(self, incident_id: str) -> str | None:
        """The service an incident belongs to (None: no incident has that id)."""
        rec = self.incident(incident_id)
        return rec.service if rec is not None else None

    def incidents_by_id(self, incident_ids: Iterable[str]) -> dict[str, IncidentRecord]:
        """Several incidents in one read, by id (as ``incident``); unknown ids are absent."""
        ids = sorted(set(incident_ids))
        if not ids:
            return {}
        with self.engine.connect() as c:
            rows = c.execute(sa.select(incidents).where(incidents.c.id.in_(ids))).all()
        return {r.id: IncidentRecord(**dict(r._mapping)) for r in rows}

    def add_incident_event(self, ev: IncidentEvent, conn: Connection | None = None) -> None:
        if conn is not None:
            conn.execute(sa.insert(incident_events).values(**ev.__dict__))
            return
        with self.begin() as c:
            c.execute(sa.insert(incident_events).values(**ev.__dict__))

    def incident_events(self, incident_id: str) -> list[IncidentEvent]:
        q = (
            sa.select(incident_events)
            .where(incident_events.c.incident_id == incident_id)
            .order_by(incident_events.c.at, incident_events.c.id)
        )
        with self.engine.connect() as c:
            rows = [dict(r._mapping) for r in c.execute(q)]
        return [IncidentEvent(**{k: v for k, v in r.items() if k != "id"}) for r in rows]

    def incident_events_by_incident(
        self, incident_ids: Iterable[str], kind: str | None = None
    ) -> dict[str, list[IncidentEvent]]:
        """``incident_events`` of several incidents in one read (optionally one kind), each list in order."""
        ids = sorted(set(incident_ids))
        if not ids:
            return {}
        q = sa.select(incident_events).where(incident_events.c.incident_id.in_(ids))
        if kind is not None:
            q = q.where(incident_events.c.kind == kind)
        q = q.order_by(incident_events.c.at, incident_events.c.id)
        with self.engine.connect() as c:
            rows = [dict(r._mapping) for r in c.execute(q)]
        out: dict[str, list[IncidentEvent]] = {}
        for r in rows:
            event = IncidentEvent(**{k: v for k, v in r.items() if k != "id"})
            out.setdefault(event.incident_id, []).append(event)
        return out

    def acknowledge_incident(self, incident_id: str, actor: str, now: datetime) -> AckOutcome:
        """Mark a human acknowledgment. Idempotent (first ack wins). A closed incident is left as it ended:
        an acknowledgment after the close would read as a response that came (late) and turn an incident
        that needed none into a respond breach in the SLA report. Another service's incident is refused: its
        own service's policy acts on it, and this one would queue an ack that no policy of its holds."""
        with self.begin() as c:
            row = c.execute(
                sa.select(
                    incidents.c.acknowledged_at,
                    incidents.c.acknowledged_by,
                    incidents.c.closed_at,
                    incidents.c.service,
                ).where(incidents.c.id == incident_id)
            ).first()
            if row is None:
                return AckOutcome.UNKNOWN
            if row[3] != self.service:
                return AckOutcome.OTHER_SERVICE
            if row[2] is not None:
                return AckOutcome.CLOSED
            if row[0] is None or not is_human(row[1]):
                c.execute(
                    sa.update(incidents)
                    .where(incidents.c.id == incident_id)
                    .values(acknowledged_at=row[0] or now, acknowledged_by=human_actor(actor))
                )
            c.execute(
                sa.insert(incident_events).values(
                    incident_id=incident_id, at=now, kind="acknowledged", detail="", actor=actor
                )
            )
        return AckOutcome.ACKNOWLEDGED

    def mark_notified(self, incident_id: str, channel: str, now: datetime) -> None:
        """A human channel received the incident: the service's own acknowledgment now counts."""
        with self.begin() as c:
            c.execute(
                sa.update(incidents)
                .where(incidents.c.id == incident_id, incidents.c.notified_at.is_(None))
                .values(notified_at=now)
            )
            c.execute(
                sa.insert(incident_events).values(
                    incident_id=incident_id, at=now, kind="notified", detail=channel, actor="service"
                )
            )

    # -- group controls -------------------------------------------------------------------------------
    def set_paused(self, group: str, paused: bool, actor: str, now: datetime, reason: str = "") -> None:
        with self.begin() as c:
            key = (group_controls.c.service == self.service) & (group_controls.c.group_name == group)
            updated = c.execute(
                sa.update(group_controls)
                .where(key)
                .values(paused=paused, actor=actor, reason=reason, updated_at=now)
            )
            if updated.rowcount == 0:
                c.execute(
                    sa.insert(group_controls).values(
                        service=self.service,
                        group_name=group,
                        paused=paused,
                        actor=actor,
                        reason=reason,
                        updated_at=now,
                    )
                )

    def paused_groups(self) -> set[str]:
        q = sa.select(group_controls.c.group_name).where(
            group_controls.c.service == self.service, group_controls.c.paused.is_(True)
        )
        with self.engine.connect() as c:
            return {r[0] for r in c.execute(q)}

    # -- operator requests ----------------------------------------------------------------------------
    def add_request(
        self,
        kind: str,
        now: datetime,
        *,
        instance_id: str | None = None,
        incident_id: str | None = None,
        reason: str = "",
        actor: str = "",
        group_name: str | None = None,
    ) -> int:
        with self.begin() as c:
            res = c.execute(
                sa.insert(operator_requests).values(
                    service=self.service,
                    kind=kind,
                    instance_id=instance_id,
                    incident_id=incident_id,
                    group_name=group_name,
                    reason=reason,
                    actor=actor,
                    created_at=now,
                )
            )
            return _new_id(res)

    def services(self) -> list[str]:
        """The service names that have run against this store (they record decisions and policy state)."""
        with self.engine.connect() as conn:
            names = set(conn.execute(sa.select(decisions.c.service).distinct()).scalars())
            names.update(conn.execute(sa.select(policy_state.c.service).distinct()).scalars())
        return sorted(names)

    def releasable(self, instance_id: str) -> bool:
        """Whether a release of ``instance_id`` has something to act on: an open incident of this service
        for it, or an isolation of it still queued (the leader takes requests in order)."""
        open_incident = sa.select(incidents.c.id).where(
            incidents.c.service == self.service,
            incidents.c.instance_id == instance_id,
            incidents.c.closed_at.is_(None),
        )
        queued = sa.select(operator_requests.c.id).where(
            operator_requests.c.service == self.service,
            operator_requests.c.instance_id == instance_id,
            operator_requests.c.kind == "isolate",
            operator_requests.c.handled_at.is_(None),
        )
        with self.engine.connect() as c:
            return c.execute(open_incident.limit(1)).first() is not None or (
                c.execute(queued.limit(1)).first() is not None
            )

    def pending_requests(self) -> list[OperatorRequest]:
        q = (
            sa.select(operator_requests)
            .where(operator_requests.c.service == self.service, operator_requests.c.handled_at.is_(None))
            .order_by(operator_requests.c.id)
        )
        with self.engine.connect() as c:
            return [OperatorRequest(**dict(r._mapping)) for r in c.execute(q)]

    def requests(self) -> list[OperatorRequest]:
        q = sa.select(operator_requests).where(operator_requests.c.service == self.service)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(operator_requests.c.id))
            return [OperatorRequest(**dict(r._mapping)) for r in rows]

    def request_log(self, limit: int) -> list[OperatorRequest]:
        """The queued requests (oldest first: the order the leader takes them), then the newest handled
        ones, ``limit`` in all. Acknowledgments are left out: the incident records them when they are made."""
        t = operator_requests
        q = (
            sa.select(t)
            .where(t.c.service == self.service, t.c.kind != "ack")
            .order_by(
                sa.case((t.c.handled_at.is_(None), 0), else_=1),
                sa.case((t.c.handled_at.is_(None), t.c.id), else_=-t.c.id),
            )
            .limit(limit)
        )
        with self.engine.connect() as c:
            return [OperatorRequest(**dict(r._mapping)) for r in c.execute(q)]

    def note_request(self, request_id: int, note: str | None, conn: Connection) -> None:
        """Why a queued request still waits (kept in ``outcome`` while ``handled_at`` is unset), or None."""
        conn.execute(
            sa.update(operator_requests)
            .where(operator_requests.c.id == request_id, operator_requests.c.handled_at.is_(None))
            .values(outcome=note)
        )

    def mark_request(
        self, request_id: int, outcome: str, now: datetime, conn: Connection | None = None
    ) -> bool:
        """End a queued request with ``outcome``; False when it had already ended (an operator cancelled
        it since it was read, say): the outcome first written stays."""
        stmt = (
            sa.update(operator_requests)
            .where(operator_requests.c.id == request_id, operator_requests.c.handled_at.is_(None))
            .values(handled_at=now, outcome=outcome)
        )
        if conn is not None:
            return bool(conn.execute(stmt).rowcount)
        with self.begin() as c:
            return bool(c.execute(stmt).rowcount)

    def cancel_request(
        self, request_id: int, actor: str, now: datetime, reason: str = ""
    ) -> tuple[CancelOutcome, OperatorRequest | None]:
        """Withdraw a request the leader has not taken yet: it ends as ``cancelled by ACTOR[: REASON]`` at
        ``now``, in one conditional UPDATE, so that a leader taking it at the same moment and the cancel
        cannot both win (``mark_request`` writes only a request still queued). The request as it was read
        comes back with what was found (None when unknown)."""
        outcome = f"{CANCELLED_PREFIX}{actor}" + (f": {reason}" if reason else "")
        t = operator_requests
        with self.begin() as c:
            row = c.execute(sa.select(t).where(t.c.id == request_id)).first()
            req = OperatorRequest(**dict(row._mapping)) if row is not None else None
            if req is None:
                return CancelOutcome.UNKNOWN, None
            if req.service != self.service:
                return CancelOutcome.OTHER_SERVICE, req
            if req.kind == "ack":
                return CancelOutcome.ACK, req
            done = c.execute(
                sa.update(t)
                .where(t.c.id == request_id, t.c.handled_at.is_(None))
                .values(handled_at=now, outcome=outcome[:2000])
            )
        if done.rowcount == 0:
            return CancelOutcome.HANDLED, self.request(request_id) or req
        return CancelOutcome.CANCELLED, req

    def request(self, request_id: int) -> OperatorRequest | None:
        """One request by id, of any service."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(operator_requests).where(operator_requests.c.id == request_id)).first()
        return OperatorRequest(**dict(row._mapping)) if row is not None else None


def _new_id(result: Any) -> int:
    """The primary key an INSERT generated."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def open_store(url: str, service: str = "fleet") -> Store:
    """Connect, migrate to head, and return the store (what the service and every CLI command call)."""
    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        # SQLite says only "unable to open database file" (after the migration's five tries): name the cause
        raise FileNotFoundError(
            f"the folder {path.parent} of the SQLite store does not exist; create it first"
        )
    engine = make_engine(url)
    try:
        migrate(engine)
    except Exception:
        engine.dispose()
        raise
    return Store(engine, service=service)


def known_tables() -> Sequence[str]:
    return sorted(metadata.tables)


def existing_tables(url: str) -> list[str]:
    """The tables a database holds, read without migrating or configuring it (a plain connection: no WAL
    switch on a SQLite file that may not be ours)."""
    _check_backend(url)
    engine = sa.create_engine(url)
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
