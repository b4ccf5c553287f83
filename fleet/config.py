"""Loading fleet.yaml plus FLEET_* environment into one validated configuration.

``FleetConfig`` is the whole file: the policy part (``groups``, each a ``policies.spec.GroupSpec`` plus its
``metrics_source``) and the service keys. Sources, highest first: ``FLEET_*`` environment variables
(nested keys with ``__``: ``FLEET_API__TOKEN``; ``FLEET_API_TOKEN`` is accepted too), then the YAML file.
``load_config`` reports every problem at once, one ``file: field.path: reason`` per line; secrets are
``SecretStr`` so that they never show in a repr, a log line or an error message.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from policies import metrics as pm
from policies.forecast import LEARNED_HOURS
from policies.schedule import (
    by_weekday,
    calendar_one_offs,
    opened_by_calendar,
    uncut_days,
    wall_start,
    weekdays_opened,
    weekly_runs,
)
from policies.spec import (
    DEFAULT_MAX_MODEL_LEN,
    Calendar,
    Duration,
    GroupSpec,
    PolicySpec,
    default_isolation_rules,
    threshold_pairs,
)

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ENV_PREFIX = "FLEET_"
# short spellings people reach for, mapped to the nested form pydantic-settings reads
_ENV_SHORTHANDS = {"FLEET_API_TOKEN": "FLEET_API__TOKEN", "FLEET_LEASE_TTL_S": "FLEET_LEASE__TTL_S"}


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one ``file: field.path: reason`` line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NotificationChannel(_Section):
    """Where incidents, SLA risk and large scale actions are announced (issue 5)."""

    type: Literal["webhook", "dingtalk", "wecom", "feishu"]
    url: str = Field(repr=False, description="robot webhook URLs carry an access token: kept out of reprs")
    secret: SecretStr | None = Field(default=None, description="robot signing secret (DingTalk, Feishu)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        # The URL carries the robot's token: problems are named, the URL is never repeated.
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not contain spaces or control characters")
        try:
            parts = urlsplit(value)
            port_ok = parts.port is None or parts.port > 0
        except ValueError as exc:  # a bracket left open, a port that is no number or out of range
            raise ValueError(f"is not a valid URL ({str(exc).split(':')[0]})") from None
        if not parts.hostname or not port_ok:
            # accepted before, every notification then failed at delivery (InvalidURL), only logged
            raise ValueError("names no host (or port 0): give the robot's or receiver's full URL")
        return value

    @model_validator(mode="after")
    def _secret_is_signed(self) -> NotificationChannel:
        # only DingTalk and Feishu robots sign with a secret: on another channel it was silently ignored,
        # and a receiver that checks a signature refused every message
        if self.secret is not None and self.type not in ("dingtalk", "feishu"):
            raise ValueError(
                f"secret: a {self.type} channel sends no signature (only dingtalk and feishu robots sign "
                "with a secret); leave it out, or put the receiver's token in the URL"
            )
        return self


# A bearer token shorter than this is guessable, and too short for the log redactor to tell from other text.
MIN_API_TOKEN_LENGTH = 8
# Listening on these exposes the unauthenticated /status, /metrics and /healthz beyond this host.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class ApiConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8780, ge=0, le=65535)
    token: SecretStr | None = Field(default=None, description="bearer token for mutating endpoints")

    @field_validator("token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_API_TOKEN_LENGTH:
            raise ValueError(f"must be at least {MIN_API_TOKEN_LENGTH} characters (a random string)")
        return value


class LeaseConfig(_Section):
    ttl_s: Duration = Field(default=30.0, gt=0, description="a replica that stops renewing loses the lease")
    shards: int = Field(
        default=1,
        ge=1,
        le=256,
        description="groups are split into this many shards, each with its own lease, spread over the "
        "running replicas (1: one leader for all groups)",
    )


class ObserveConfig(_Section):
    workers: int = Field(default=8, ge=1, le=64, description="concurrent cloud reads per product")
    instances_refresh_s: Duration = Field(
        default=0.0,
        ge=0,
        description="re-read a group's scaling instances at least this often while its capacity counts are "
        "unchanged (0: every tick)",
    )


# How long the service waits for each Prometheus answer by default (the source's own default); a hung
# Prometheus delays the tick by at least this much.
PROMETHEUS_TIMEOUT_S = 10.0
# The most of one Prometheus answer the service reads. A group's queries answer a few hundred bytes per
# series; the largest, the XID range query over an hour at a 30 s step, about 3 kB per GPU (1,000 8-GPU
# instances: about 24 MiB). A query matching far more (a lost matcher, a huge Prometheus) is refused.
PROMETHEUS_MAX_ANSWER_MIB = 64


class MetricsSource(_Section):
    type: Literal["cloudmonitor", "prometheus"] = "cloudmonitor"
    url: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="extra label matchers (prometheus)")
    instance_label: str = Field(default="instance_id", description="the label holding the ECS instance id")
    bearer_token_env: str | None = Field(
        default=None,
        description="environment variable holding a bearer token sent to Prometheus (prometheus); basic auth "
        "goes in the url as user:password@host",
    )
    timeout_s: float = Field(
        default=PROMETHEUS_TIMEOUT_S,
        gt=0,
        le=120,
        description="seconds to wait for each Prometheus answer (prometheus); a slower one fails the read as "
        "Prometheus.Unreachable and the metric is unknown that tick",
    )
    max_answer_mib: int = Field(
        default=PROMETHEUS_MAX_ANSWER_MIB,
        gt=0,
        le=1024,
        description="the largest Prometheus answer read, MiB (prometheus); a larger one fails the read as "
        "Prometheus.AnswerTooLarge and the metric is unknown that tick",
    )

    @model_validator(mode="after")
    def _prometheus_needs_url(self) -> MetricsSource:
        if self.type == "prometheus" and not self.url:
            raise ValueError("a prometheus metrics_source needs url")
        if self.url is not None and not (
            self.url.startswith(("http://", "https://")) and urlsplit(self.url).hostname
        ):
            raise ValueError(
                "url must be an http:// or https:// URL with a host, e.g. http://prometheus:9090"
            )
        parts = urlsplit(self.url or "")
        # the source adds /api/v1/query to the url: it must be Prometheus' base URL, path prefix and all
        if parts.path.rstrip("/").endswith("/api/v1"):
            raise ValueError(f"url {self.url!r}: give Prometheus' base URL, without /api/v1")
        if parts.query or parts.fragment:
            raise ValueError(f"url {self.url!r}: give Prometheus' base URL, with no query string or fragment")
        if self.bearer_token_env is not None and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*", self.bearer_token_env
        ):
            raise ValueError(
                f"bearer_token_env {self.bearer_token_env!r} is not an environment variable name"
            )
        if self.type == "cloudmonitor" and (self.url is not None or self.labels):
            # these only mean something to a prometheus source: set here, they would be silently ignored
            raise ValueError("url and labels apply to type: prometheus only; add it or drop them")
        if self.type == "cloudmonitor" and self.bearer_token_env is not None:
            raise ValueError("bearer_token_env applies to type: prometheus only; add it or drop it")
        for name in ("timeout_s", "max_answer_mib"):
            # a value other than the default: the default itself is what a config read back carries
            # (``model_validate(config.model_dump())``), and ignoring it changes nothing
            if self.type == "cloudmonitor" and getattr(self, name) != type(self).model_fields[name].default:
                raise ValueError(f"{name} applies to type: prometheus only; add it or drop it")
        # Prometheus label names: [a-zA-Z_][a-zA-Z0-9_]* (names starting with __ are reserved)
        for name in (self.instance_label, *self.labels):
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a usable Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if self.instance_label in self.labels:
            raise ValueError(f"labels must not match on instance_label {self.instance_label!r}")
        return self


def validate_hardware(spec: GroupSpec) -> str | None:
    """A problem with the group's predictive model / instance type, in one line; None when it is usable."""
    pred = spec.predictive
    if pred.capacity_rps is not None or not (pred.model or pred.instance_type):
        return None
    from sizing import Deployment, SizingInputError, find_gpu, find_instance, find_model
    from sizing.fallback import cannot_hold
    from sizing.memory import plan_memory

    try:
        model = find_model(pred.model) if pred.model else None
        if pred.instance_type:
            inst = find_instance(pred.instance_type)
            if pred.tp is not None and inst.gpus % pred.tp:
                return f"predictive.tp {pred.tp} does not divide the {inst.gpus} GPUs of {inst.name}"
            why = None if model is None else cannot_hold(model, inst)
            if why is not None:
                return f"predictive.instance_type {inst.name} cannot hold {pred.model}: {why}"
            if model is not None and (pred.max_model_len is not None or pred.vllm_settings):
                # sized at every tick, where a refusal left the capacity unknown (predictive scaling off)
                dep = Deployment(
                    model,
                    find_gpu(inst.gpu),
                    tp=pred.tp or inst.gpus,
                    max_model_len=pred.max_model_len or DEFAULT_MAX_MODEL_LEN,
                )
                memory = plan_memory(dep.with_(**pred.vllm_settings))
                if not memory.fits:
                    return _refusal(pred, inst.name, dep.max_model_len or 0, memory)
    except SizingInputError as exc:
        return str(exc)
    return None


def _refusal(pred: Any, instance_type: str, max_model_len: int, memory: Any) -> str:
    """Why vLLM would not start the group's predictive engine, naming the settings the section sets."""
    settings = ", ".join(f"predictive.{name} {value:g}" for name, value in pred.vllm_settings.items())
    if memory.max_model_len_that_fits <= 0 or pred.max_model_len is None:
        with_ = f" with {settings}" if settings else ""
        return f"vLLM cannot start {pred.model} on {instance_type}{with_}: {memory.reason}"
    return (
        f"predictive.max_model_len {max_model_len}: vLLM cannot start {pred.model} on {instance_type} with it"
        f"{', ' + settings if settings else ''} (its KV cache holds no such request); at most "
        f"{memory.max_model_len_that_fits} tokens fit"
    )


class GroupConfig(GroupSpec):
    """A group's policy plus where its metrics come from, and where it lives."""

    metrics_source: MetricsSource = Field(default_factory=MetricsSource)
    region: str | None = Field(
        default=None, min_length=1, description="its region (default: the top level's)"
    )
    account: str | None = Field(
        default=None,
        min_length=1,
        description="a credentials profile of the Alibaba Cloud credentials chain, listed under accounts",
    )

    @model_validator(mode="after")
    def _predictive_hardware(self) -> GroupConfig:
        # the capacity model sizes what the sizing catalog knows: an unknown model or type is an error now,
        # not a capacity that stays unknown at every tick
        problem = validate_hardware(self)
        if problem:
            raise ValueError(f"predictive: {problem}")
        return self


class AccountConfig(_Section):
    account_id: str = Field(min_length=1, description="the account's id, for its custom metric namespace")


# Below this a tick (at least three cloud reads and a store transaction) could not finish before the next.
MIN_TICK_INTERVAL_S = 0.1
# The longest tick accepted: a day (a longer one is a typo, and inf would overflow APScheduler's interval
# trigger).
MAX_TICK_INTERVAL_S = 86400.0

_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("fleet_config_env", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping instead of the process environment."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = dict(env)
        for short, nested in _ENV_SHORTHANDS.items():
            if short in self._mapping and nested not in self._mapping:
                self._mapping[nested] = self._mapping[short]
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._mapping.items() if k.upper().startswith(ENV_PREFIX)}


class FleetConfig(BaseSettings):
    """The whole fleet.yaml. ``groups`` doubles as the ``PolicySpec`` that ``policies.decide`` takes."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    region: str = Field(min_length=1, description="Alibaba Cloud region id, e.g. cn-chengdu")
    account_id: str | None = Field(default=None, description="for the custom metric namespace")
    groups: tuple[GroupConfig, ...] = Field(description="at least one scaling group")
    calendar: Calendar | None = Field(
        default=None,
        description=(
            "holidays and makeup workdays of every group's schedules (a group's own calendar: replaces it)"
        ),
    )
    accounts: dict[str, AccountConfig] = Field(
        default_factory=dict,
        description="credentials profile name -> its account (groups name one by account)",
    )
    notifications: tuple[NotificationChannel, ...] = ()
    database_url: str | None = Field(
        default=None, repr=False, description="default: sqlite file fleet.db (may hold a password: no repr)"
    )
    tick_interval_s: Duration = Field(
        default=15.0,
        ge=MIN_TICK_INTERVAL_S,
        le=MAX_TICK_INTERVAL_S,
        description=f"{MIN_TICK_INTERVAL_S} s to {MAX_TICK_INTERVAL_S:.0f} s",
    )
    api: ApiConfig = Field(default_factory=ApiConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    observe: ObserveConfig = Field(default_factory=ObserveConfig)
    schedule_sync_interval_s: Duration = Field(
        default=300.0, gt=0, description="how often the service re-syncs its ESS scheduled tasks"
    )
    notify_scale_min_change: int = Field(
        default=1, ge=1, description="notify scale actions that change capacity by at least this many"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _ENV.get()
        source = _MappingEnvSource(settings_cls, env if env is not None else os.environ)
        return (source, init_settings)  # the environment overrides the file

    @model_validator(mode="before")
    @classmethod
    def _inherit_calendar(cls, data: Any) -> Any:  # Any: a "before" validator sees and returns raw input
        # the top level's calendar is each group's that names none (a group's ``calendar: null`` keeps none):
        # the policies read the group's alone
        if not isinstance(data, dict) or data.get("calendar") is None:
            return data
        groups = data.get("groups")
        if not isinstance(groups, list | tuple):
            return data
        try:
            calendar = Calendar.model_validate(data["calendar"])
        except ValidationError:
            return data  # reported once, under calendar:, not again under every group
        inherited = [
            {**g, "calendar": calendar} if isinstance(g, dict) and "calendar" not in g else g for g in groups
        ]
        return {**data, "groups": inherited}

    @model_validator(mode="after")
    def _unique_groups(self) -> FleetConfig:
        if not self.groups:
            raise ValueError("groups: configure at least one scaling group")
        names = [g.name for g in self.groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError("group names must be unique: " + ", ".join(dupes))
        shared = _shared_scaling_groups(self.groups)
        if shared:
            raise ValueError(
                "two groups drive one scaling group (each would undo the other's desired capacity): "
                + "; ".join(shared)
            )
        for g in self.groups:
            region = g.region or self.region
            elsewhere = [z.zone for z in g.zones if not z.zone.startswith(region)]
            if elsewhere:
                # zone ids extend their region's (cn-hangzhou-h, ap-southeast-1a): one that does not is a
                # copy from another region, whose vSwitch the group cannot have either
                raise ValueError(
                    f"groups[{g.name}].zones: {', '.join(elsewhere)} not in the group's region {region}"
                )
            if g.account is not None and g.account not in self.accounts:
                known = ", ".join(sorted(self.accounts)) or "none"
                raise ValueError(
                    f"groups[{g.name}].account {g.account!r} is not under accounts: (listed: {known})"
                )
        return self

    def scopes(self) -> list[tuple[str | None, str | None]]:
        """Every (account, region) the groups live in; None parts are the top level's."""
        return sorted({(g.account, g.region) for g in self.groups}, key=lambda s: (s[0] or "", s[1] or ""))

    def policy(self) -> PolicySpec:
        """The policy part alone: what ``policies.decide`` takes."""
        return PolicySpec(groups=self.groups)

    def group(self, name: str) -> GroupConfig | None:
        return next((g for g in self.groups if g.name == name), None)

    def service_problems(self) -> list[str]:
        """What keeps ``fleet serve`` from running this config (``fleet terraform`` creates the groups and
        needs no ids, so these are not errors of the file itself)."""
        out = [
            f"groups[{g.name}]: give scaling_group_id or scaling_group_name: fleet serve cannot find the "
            "ESS scaling group otherwise"
            for g in self.groups
            if not g.scaling_group_id and not g.scaling_group_name
        ]
        out += [
            f"groups[{g.name}].metrics_source.bearer_token_env: environment variable {env} is not set "
            "or empty"
            for g in self.groups
            if (env := g.metrics_source.bearer_token_env) and not os.environ.get(env, "").strip()
        ]
        return out

    def _task_quota_warnings(self) -> list[str]:
        by_scope: dict[tuple[str | None, str], list[GroupConfig]] = {}
        for g in self.groups:
            by_scope.setdefault((g.account, g.region or self.region), []).append(g)
        out = []
        for (account, region), groups in sorted(by_scope.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
            where = f"region {region}" + (f" (account {account})" if account else "")
            warning = _task_quota_warning(where, groups)
            if warning:
                out.append(warning)
        return out

    def uncut_holidays(self, now: datetime) -> list[str]:
        """The holidays of the coming ``ONE_OFF_FAR_DAYS`` (``fleet validate`` prints these, read at its
        clock) on which a window's weekly start task, as a sync at ``now`` writes it, still fires: the sync
        cuts a recurrence only ``ONE_OFF_DAYS`` ahead, so with the service down from before its last workday
        ahead of them ESS raises the window's floor on them (``uncut_days``)."""
        out = []
        for g in self.groups:
            for s in g.schedules:
                if s.cron is not None:
                    continue
                days = uncut_days(s, g.calendar, now, g.cold_start_s, ONE_OFF_DAYS, ONE_OFF_FAR_DAYS)
                if days:
                    out.append(
                        f"groups[{g.name}].schedules[{s.name}]: holidays not protected yet: "
                        f"{', '.join(map(str, days))}: the sync stops the weekly start task before a holiday "
                        f"only {ONE_OFF_DAYS} days ahead, so with the service down from before then ESS "
                        f"still raises MinValue to {s.floor} on them (docs/service.md, Holidays)"
                    )
        return out

    def warnings(self) -> list[str]:
        """Valid but worth a look (``fleet validate`` prints these)."""
        out = []
        if not self.notifications:
            out.append(
                "notifications: no notification channel configured; incidents will stay unacknowledged "
                "(isolation still proceeds)"
            )
        for g in self.groups:
            if (
                g.metrics_source.type == "cloudmonitor"
                and self.account_id is None
                and (g.scale_out or g.scale_in)
            ):
                out.append(f"groups[{g.name}]: account_id is unset; custom vLLM metrics cannot be read")
            out.extend(f"groups[{g.name}]: {w}" for w in _policy_warnings(g))
        out.extend(self._task_quota_warnings())
        out.extend(self.service_problems())
        if self.api.host in WILDCARD_HOSTS:
            out.append(
                f"api.host: {self.api.host or '(empty)'} listens on every interface; /status, /metrics and "
                "/healthz need no token, so anyone who can reach the port reads the fleet's state"
            )
        return out


# ESS scheduled tasks an account holds per region by default (DescribeLimitation's MaxNumberOfScheduledTasks;
# Quota Center raises it). A group's learned floors take one an hour (policies.forecast.LEARNED_HOURS).
SCHEDULED_TASK_QUOTA = 70
# The service writes a one-off start/end pair for each day up to this many days ahead on which a calendar
# opens a window its weekday does not (fleet/service/schedules.py; ESS takes a LaunchTime up to 90 days
# ahead): a week covers the makeup days of a golden week and its weekend.
ONE_OFF_DAYS = 7
# Further ahead, to this many days, the one-off pairs are written too, after the learned floors and only as
# the quota leaves room (a service down for weeks is rarer than one down for hours): 12 weeks, under ESS's
# 90 days with room for a window that ends the next day in a zone 14 hours off UTC.
ONE_OFF_FAR_DAYS = 84


def _task_quota_warning(where: str, groups: list[GroupConfig]) -> str | None:
    """A warning when the groups of one (account, region) call for more scheduled tasks than its default
    quota: the service creates the windows first, then the learned floors that fire soonest."""
    windows = sum(2 for g in groups for s in g.schedules if s.cron is None)
    learned = sum(LEARNED_HOURS for g in groups if g.predictive.mirrors_learned_floors)
    one_off = _one_off_peak(groups, ONE_OFF_DAYS)
    total = windows + one_off + learned
    if total <= SCHEDULED_TASK_QUOTA:
        far = _one_off_peak(groups, ONE_OFF_FAR_DAYS)
        if windows + far + learned <= SCHEDULED_TASK_QUOTA:
            return None
        return (
            f"{where}: with the one-off tasks of calendar days {ONE_OFF_DAYS + 1} to {ONE_OFF_FAR_DAYS} "
            f"ahead (at most {far - one_off} more) the groups mirror {windows + far + learned} ESS scheduled "
            f"tasks where an account holds {SCHEDULED_TASK_QUOTA} per region by default: those are created "
            "after the learned floors as the quota leaves room, and a day left out holds its weekday's floor "
            f"if the service is down from more than {ONE_OFF_DAYS} days before it; raise the quota (Quota "
            "Center, ESS scheduled tasks)"
        )
    calendar = f", at most {one_off} one-off or resumed for holidays and makeup workdays" if one_off else ""
    return (
        f"{where}: the groups mirror {total} ESS scheduled tasks ({windows} for schedule "
        f"windows{calendar}, {learned} learned floors) where an account holds {SCHEDULED_TASK_QUOTA} per "
        "region by default: the windows are created first and the learned floors that fire latest are left "
        "out; raise the quota (Quota Center, ESS scheduled tasks) or set predictive.learned_floors: false on "
        "some groups"
    )


def _one_off_peak(groups: typing.Sequence[GroupSpec], ahead_days: int) -> int:
    """The most one-off and resumed tasks the groups' calendars have the service hold at once
    (``calendar_task_count``). Each window reads its today in its own zone: Pacific/Kiritimati is a day ahead
    of Pacific/Pago_Pago. The count grows only when a day enters a window's reach, at midnight in its zone, so
    those instants are the ones to count at."""
    instants: set[datetime] = set()
    for g in groups:
        cal = g.calendar
        spans = (*cal.holidays, *cal.workdays) if cal is not None else ()
        if cal is None or not spans:
            continue
        days = cal.exception_days(min(s[0] for s in spans), max(s[1] for s in spans))
        for s in g.schedules:
            if s.cron is not None or s.start is None or s.end is None:
                continue
            mine = [d for d in days if opened_by_calendar(s, cal, d)]
            mine += [d for d in days if d.weekday() in s.weekdays and cal.weekday_of(d) not in s.weekdays]
            instants.update(wall_start(d - timedelta(days=ONE_OFF_DAYS), time(0), s.zone) for d in mine)
            instants.update(wall_start(d - timedelta(days=ahead_days), time(0), s.zone) for d in mine)
    return max((calendar_task_count(groups, at, ahead_days) for at in instants), default=0)


def calendar_task_count(groups: typing.Sequence[GroupSpec], now: datetime, ahead_days: int) -> int:
    """The scheduled tasks the groups' calendars add at ``now`` to the two Weekly tasks of each ``days``
    window, from the functions the service's tasks come from (fleet/service/schedules.py): the one-off
    start/end pair of each day from yesterday to ``ahead_days`` ahead on which the calendar opens a window its
    weekday does not, less the edges already past (``calendar_one_offs``), and each Weekly task beyond the
    first of a window's start and of its end, resuming it after a run of days the calendar takes off within
    ``ONE_OFF_DAYS`` that is not directly ahead of its next firing (``weekly_runs``)."""
    count = 0
    for g in groups:
        if g.calendar is None:
            continue
        for s in g.schedules:
            if s.cron is not None or s.start is None or s.end is None:
                continue
            count += sum(
                (start > now) + (end > now)
                for _, start, end in calendar_one_offs(s, g.calendar, now, g.cold_start_s, ahead_days)
            )
            for lead_s, at_end in ((g.cold_start_s, False), (0.0, True)):
                count += len(weekly_runs(s, g.calendar, now, lead_s, at_end, ONE_OFF_DAYS)) - 1
    return count


def _shared_scaling_groups(groups: typing.Sequence[GroupSpec]) -> list[str]:
    """``scaling_group_id: ...: a, b`` for every scaling group (by id, or by name) that two groups name."""
    by: dict[str, list[str]] = {}
    for g in groups:
        if g.scaling_group_id:
            by.setdefault(f"scaling_group_id {g.scaling_group_id}", []).append(g.name)
        elif g.scaling_group_name:
            by.setdefault(f"scaling_group_name {g.scaling_group_name}", []).append(g.name)
    return [f"{key}: groups {', '.join(names)}" for key, names in sorted(by.items()) if len(names) > 1]


# The default isolation rules a custom list should keep: hardware XIDs, ECS system events, a dead vLLM on
# healthy GPUs and a silent node agent are the failures no GPU metric rule sees
# (policies.spec.default_isolation_rules).
_SAFETY_RULE_KINDS = {
    "engine_down": "engine",
    "agent_silent": "absent",
    "xid_hardware": "xid",
    "ecs_system_failure": "event",
    "ecs_maintenance": "event",
}


# What a healthy vLLM engine's GPUs read used at rest, at most: --gpu-memory-utilization 0.9 plus the
# driver's reserve that NVML counts as used.
GPU_MEM_AT_REST_PCT = 93.0


# CloudMonitor's finest period, and the node agent's default publish period
MIN_METRIC_PERIOD_S = 15.0


def _capacity_mix_warnings(g: GroupSpec) -> list[str]:
    """A ``capacity_mix`` part that can never apply: valid, but not what its author expects."""
    mix = g.capacity_mix
    if mix is None:
        return []
    out = []
    if mix.buys_spot and mix.on_demand_base >= g.max_size:
        out.append(
            f"capacity_mix.on_demand_base ({mix.on_demand_base}) is not below max_size ({g.max_size}): every "
            "instance the group may hold is on demand, so spot_percentage_above_base never buys spot"
        )
    if mix.spot_price_limit is not None and not mix.buys_spot:
        out.append(
            "capacity_mix.spot_price_limit is set but spot_percentage_above_base is 0: the group buys no "
            "spot, so the limit is never used"
        )
    return out


def _calendar_warnings(g: GroupSpec) -> list[str]:
    """A calendar the group's cron windows on dates ignore, and makeup workdays that are weekdays already."""
    cal = g.calendar
    if cal is None:
        return []
    out = [
        f"schedule {s.name!r}: cron {s.cron!r} names days of the month or months, so it follows its "
        "expression alone: the calendar's holidays and makeup workdays apply to windows that pick days by "
        "weekday (days/start/end, or a cron whose day of month and month are *)"
        for s in g.schedules
        if s.cron is not None and not by_weekday(s.cron)
    ]
    weekdays = [d for first, last in cal.workdays for d in (first, last) if first == last and d.weekday() < 5]
    out.extend(
        f"calendar.workdays: {d.isoformat()} is a {d.strftime('%A')} already; a makeup workday is a Saturday "
        "or Sunday that is worked (a holiday goes under holidays)"
        for d in weekdays
    )
    out.extend(_workday_like_warnings(g, cal))
    return out


def _workday_like_warnings(g: GroupSpec, cal: Calendar) -> list[str]:
    """A makeup workday read as a weekday none of the group's weekday windows opens on (``workday_like:
    mon`` with a ``fri``-only window): no window's floor applies on it."""
    opened = [(s.name, days) for s in g.schedules if (days := weekdays_opened(s)) is not None]
    workday_windows = [name for name, days in opened if days & set(range(5))]
    if not cal.workdays or not workday_windows or any(cal.workday_like in days for _, days in opened):
        return []
    like = WEEKDAY_NAMES[cal.workday_like]
    return [
        f"calendar.workday_like: a makeup workday ({cal.workdays[0][0].isoformat()}) is read as a {like}, "
        f"a day none of the windows opens on ({', '.join(workday_windows)}): no window's floor applies on "
        "it; set workday_like to a day they name"
    ]


def _policy_warnings(g: GroupSpec) -> list[str]:
    """Valid but risky policy choices: no dead band between scale-in and scale-out thresholds, and a custom
    isolation rule list without the default XID and system-event rules."""
    out = [
        f"scale_in rule {low.label!r} has the same threshold as scale_out rule {high.label!r}: no dead band "
        "between them, so a value hovering there flaps; keep the scale-in threshold lower"
        for low, high in threshold_pairs(g)
        if low.threshold == high.threshold
    ]
    out.extend(
        f"isolation rule {r.name!r}: {r.metric} above {r.above:g} fires on healthy vLLM engines, which "
        "pre-allocate --gpu-memory-utilization (0.9 by default) of every GPU and read 90-93 % used at rest: "
        f"every instance would be isolated; set it above what an idle engine reads ({GPU_MEM_AT_REST_PCT:g} "
        "or more; the default rule uses 95)"
        for r in g.isolation.rules
        if g.isolation.enabled
        and r.kind == "metric"
        and r.metric == pm.GPU_MEM_USED_PCT
        and r.above is not None
        and r.above < GPU_MEM_AT_REST_PCT
    )
    out.extend(_capacity_mix_warnings(g))
    out.extend(_calendar_warnings(g))
    if g.stabilization.stale_after_s < MIN_METRIC_PERIOD_S:
        out.append(
            f"stabilization.stale_after {g.stabilization.stale_after_s:g}s is under the "
            f"{MIN_METRIC_PERIOD_S:g}s period of CloudMonitor and of the node agent: every sample reads "
            "stale between two points and nothing scales, unless the agent publishes faster"
        )
    if "rules" in g.isolation.model_fields_set and g.isolation.enabled:
        defaults = {r.name: r for r in default_isolation_rules()}
        have_xids = {x for r in g.isolation.rules if r.kind == "xid" for x in r.xids or ()}
        have_events = {e for r in g.isolation.rules if r.kind == "event" for e in r.events or ()}
        # a dead engine: a rule on vllm_up that waits out one outage (a repeat rule counts short ones)
        have_engine = any(
            r.kind == "metric" and r.metric == pm.VLLM_UP and r.repeat == 1 for r in g.isolation.rules
        )
        have_absent = any(r.kind == "absent" for r in g.isolation.rules)
        dropped = []
        for name, kind in _SAFETY_RULE_KINDS.items():
            rule = defaults[name]
            if kind == "engine":
                covered = have_engine
            elif kind == "absent":
                covered = have_absent
            elif kind == "xid":
                covered = set(rule.xids or ()) <= have_xids
            else:
                covered = set(rule.events or ()) <= have_events
            if not covered:
                dropped.append(name)
        if dropped:
            out.append(
                "isolation.rules replaces the default rules and leaves out "
                + ", ".join(dropped)
                + " (a dead vLLM, a silent node agent, hardware XIDs and ECS system events: failures no GPU"
                " metric rule sees); add"
                " them back "
                "unless that is intended"
            )
    return out


def config_json_schema() -> dict[str, Any]:
    """The JSON schema of fleet.yaml (``fleet validate --schema``)."""
    return FleetConfig.model_json_schema(by_alias=True)


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> FleetConfig:
    """Read, merge with ``FLEET_*`` from ``env`` (default os.environ), validate; ConfigError otherwise."""
    file = str(path)
    env = os.environ if env is None else env
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{file}: file not found"]) from None
    except OSError as exc:
        raise ConfigError([f"{file}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{file}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ConfigError([f"{file}: nested too deeply to be a fleet.yaml"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{file}: {where}not valid YAML: {problem}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{file}: the top level must be a mapping of keys (region, groups, ...)"])
    token = _ENV.set(env)
    try:
        return FleetConfig(**data)
    except ValidationError as exc:
        raise ConfigError(format_errors(file, exc, env_sources(env))) from None
    except SettingsError as exc:
        raise ConfigError([_settings_error(exc, env)]) from None
    except RecursionError:
        raise ConfigError([f"{file}: nested too deeply to be a fleet.yaml"]) from None
    finally:
        _ENV.reset(token)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark.line)
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        if first != key_node.start_mark.line:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"duplicate key {key!r} (first given on line {first + 1})",
                key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _timestamp(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> Any:
    """A date or time as PyYAML reads it; one that reads as a date but is none (2027-02-30) stays text, for
    the field to refuse in one line (PyYAML raised a bare ValueError out of the load)."""
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except ValueError:
        return loader.construct_scalar(node)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)

# FLEET_* variables read by other parts of fleet (the adapters, the agent, the CLI), not by FleetConfig.
OTHER_ENV_VARS = frozenset(
    {
        "FLEET_ALIYUN_ENDPOINT",
        "FLEET_ECS_METADATA_URL",
        "FLEET_TRACES_DIR",
        "FLEET_INSTANCE_ID",
        "FLEET_SERVICE_NAME",
        "FLEET_LOG_JSON",
        "FLEET_LOG_LEVEL",
        "FLEET_AGENT_ARGS",
        "FLEET_TERRAFORM_SCHEMA",
        "FLEET_TEST_PROMETHEUS",
        "FLEET_API_TOKEN",
        "FLEET_LEASE_TTL_S",
    }
)


def env_sources(env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """The config path each ``FLEET_*`` variable sets (``FLEET_API__PORT`` -> ("api", "port"))."""
    out: dict[tuple[str, ...], str] = {}
    for name in env:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        nested = _ENV_SHORTHANDS.get(upper, upper)
        out[tuple(p.lower() for p in nested[len(ENV_PREFIX) :].split("__"))] = name
    return out


def unknown_env_vars(env: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``FLEET_*`` variable nothing reads, with the nearest known name."""
    env = os.environ if env is None else env
    fields = {f"{ENV_PREFIX}{name.upper()}" for name in FleetConfig.model_fields}
    known = sorted(fields | OTHER_ENV_VARS | set(_ENV_SHORTHANDS.values()))
    out = []
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        head = upper.split("__")[0]
        if head in fields and "__" in upper:
            continue  # a nested key of a known section: the model checks the rest
        near = difflib.get_close_matches(upper, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        out.append(f"environment: {name} is not a setting fleet reads{hint}; it is ignored")
    return out


def _settings_error(exc: SettingsError, env: Mapping[str, str]) -> str:
    """pydantic-settings could not parse a variable (e.g. FLEET_GROUPS=notjson): name it."""
    text = str(exc)
    match = re.search(r'field "(\w+)"', text)
    field = match.group(1) if match else None
    names = [n for n in env if field and n.upper() == f"{ENV_PREFIX}{field.upper()}"]
    if names:
        return f"environment: {names[0]}: not valid JSON (a list or mapping value is given as JSON)"
    return f"environment: {text.splitlines()[0]}"


def format_errors(
    file: str, exc: ValidationError, from_env: Mapping[tuple[str, ...], str] | None = None
) -> list[str]:
    """One ``file: field.path: reason`` line per error, with the nearest valid key for unknown keys.

    A value that came from a ``FLEET_*`` variable is reported under the variable's name, not the file's.
    """
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        where = file
        for path, var in (from_env or {}).items():
            if tuple(str(p).lower() for p in loc[: len(path)]) == path:
                where = f"environment {var}"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            valid = _keys_at(FleetConfig, loc[:-1])
            near = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            msg = "unknown key" + (f" (did you mean {near[0]!r}?)" if near else "")
            if valid:
                msg += "; valid keys: " + ", ".join(valid)
        elif err["type"] == "missing":
            msg = "required"
        elif err["type"] in ("tuple_type", "list_type"):
            # pydantic says "tuple" for the immutable sequences the models hold; in YAML it is a list
            msg = f"must be a list (- item lines or [a, b]), got {type(err['input']).__name__}"
        lines.append(f"{where}: {_path(loc) or '(top level)'}: {msg}")
    return lines


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "tagged-union")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The YAML keys of the model found by following ``loc`` from ``model`` (best effort)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = _field_by_key(current, str(part))
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        keys = []
        for name, f in current.model_fields.items():
            alias = f.serialization_alias or f.alias or name
            keys.append(str(alias))
        return sorted(keys)
    return []


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, f in model.model_fields.items():
        if key in (name, f.alias, f.serialization_alias):
            return f
        choices = getattr(f.validation_alias, "choices", None)
        if choices and key in choices:
            return f
    return None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
