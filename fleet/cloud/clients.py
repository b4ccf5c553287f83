"""Build the three SDK clients (ESS, CMS, ECS) and wrap them in adapters: endpoint, credentials, timeouts.

Credentials, in order:
1. the `credential` argument (an `alibabacloud_credentials` Client or credentials provider);
2. `ALIBABA_CLOUD_ACCESS_KEY_ID` / `ALIBABA_CLOUD_ACCESS_KEY_SECRET` (+ `ALIBABA_CLOUD_SECURITY_TOKEN`)
   read from `env` now (the SDK's own environment provider reads them once at import: tests cannot steer it);
3. otherwise the alibabacloud-credentials default chain (profile files, ECS RAM role, credentials URI),
   resolved lazily on the first call;
4. except that with an endpoint override (a local fake) and no key in the environment or a profile file, dummy
   keys are used, so that `FLEET_ALIYUN_ENDPOINT=127.0.0.1:P fleet ...` works with no account at all.

`FLEET_ALIYUN_ENDPOINT` (`host:port`, plain http, or a full `http(s)://host:port` URL) points all three
clients at one endpoint such as `fleet fake-cloud`. No secret is ever put in a repr, a log line or an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_credentials import models as credential_models
from alibabacloud_credentials.client import Client as CredentialClient
from alibabacloud_credentials_api import ICredentialsProvider
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.models import Config

from fleet.cloud.cms import CmsAdapter, CmsApi
from fleet.cloud.ecs import EcsAdapter, EcsApi
from fleet.cloud.ess import EssAdapter, EssApi
from fleet.cloud.retry import RetryPolicy

ENDPOINT_ENV = "FLEET_ALIYUN_ENDPOINT"
ACCESS_KEY_ID_ENV = "ALIBABA_CLOUD_ACCESS_KEY_ID"
ACCESS_KEY_SECRET_ENV = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"  # noqa: S105 - the variable's name, not a secret
SECURITY_TOKEN_ENV = "ALIBABA_CLOUD_SECURITY_TOKEN"  # noqa: S105
CONNECT_TIMEOUT_MS = 5_000  # the SDK's own default connect timeout (darabonba-core 1.0.9)
READ_TIMEOUT_MS = 15_000  # a little above the SDK's 10 s: DescribeMetricList pages of 1440 points can be slow
# Keys for local fakes only: the fake ignores signatures (aliyun-api.md section 0).
_DUMMY_ACCESS_KEY_ID = "fleet-local-fake"
_DUMMY_ACCESS_KEY_SECRET = "fleet-local-fake"  # noqa: S105


@dataclass(frozen=True)
class CloudClients:
    """The three adapters the service uses; build with make_clients, or with fakes in tests."""

    ess: EssApi
    cms: CmsApi
    ecs: EcsApi


@dataclass(frozen=True)
class Endpoint:
    host: str  # host[:port]
    protocol: str  # http / https


def parse_endpoint(value: str) -> Endpoint:
    """`127.0.0.1:8080` -> plain http; `https://host:443` keeps its scheme. Raises ValueError when empty."""
    text = value.strip().rstrip("/")
    if not text:
        raise ValueError(f"{ENDPOINT_ENV} is empty; expected host:port such as 127.0.0.1:8080")
    protocol = "http"
    for scheme in ("http", "https"):
        prefix = f"{scheme}://"
        if text.lower().startswith(prefix):
            text, protocol = text[len(prefix) :], scheme
            break
    else:
        if "://" in text:
            raise ValueError(f"{ENDPOINT_ENV}={value!r}: only http:// and https:// endpoints are supported")
    # Checked here so a typo is one clear line at start-up, not a NetworkError retried on every call.
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host or any(c.isspace() or c in "/?#@" for c in text) or (port and not port.isdigit()):
        raise ValueError(f"{ENDPOINT_ENV}={value!r}: expected host:port such as 127.0.0.1:8080")
    return Endpoint(host=text, protocol=protocol)


def make_clients(
    region: str,
    account_id: str,
    endpoint: str | None = None,
    credential: CredentialClient | ICredentialsProvider | None = None,
    retry: RetryPolicy | None = None,
    *,
    env: Mapping[str, str] | None = None,
    connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
    read_timeout_ms: int = READ_TIMEOUT_MS,
) -> CloudClients:
    """The ESS, CMS and ECS adapters for `region`, all pointed at `endpoint` (or $FLEET_ALIYUN_ENDPOINT)."""
    environ = os.environ if env is None else env
    raw_endpoint = endpoint or environ.get(ENDPOINT_ENV) or None
    target = parse_endpoint(raw_endpoint) if raw_endpoint else None
    cred = resolve_credential(credential, environ, local_endpoint=target is not None)
    policy = retry or RetryPolicy()

    def config() -> Config:
        cfg = Config(
            credential=cred,
            region_id=region,
            connect_timeout=connect_timeout_ms,
            read_timeout=read_timeout_ms,
        )
        if target is not None:
            cfg.endpoint = target.host
            cfg.protocol = target.protocol
        return cfg

    # Without an override each SDK picks its regional endpoint (ess.<region>, metrics.<region>, ecs...).
    # One Config per client: the SDK clients write into the Config they are given.
    return CloudClients(
        ess=EssAdapter(EssClient(config()), retry=policy, region=region),
        cms=CmsAdapter(CmsClient(config()), account_id, retry=policy, region=region),
        ecs=EcsAdapter(EcsClient(config()), region, retry=policy),
    )


def resolve_credential(
    credential: CredentialClient | ICredentialsProvider | None,
    env: Mapping[str, str],
    *,
    local_endpoint: bool = False,
) -> CredentialClient:
    """The credentials client to sign with; see the module docstring for the order."""
    if isinstance(credential, CredentialClient):
        return credential
    if credential is not None:
        return CredentialClient(provider=credential)
    key_id = env.get(ACCESS_KEY_ID_ENV) or ""
    secret = env.get(ACCESS_KEY_SECRET_ENV) or ""
    if key_id and secret:
        token = env.get(SECURITY_TOKEN_ENV) or None
        return CredentialClient(
            credential_models.Config(
                type="sts" if token else "access_key",
                access_key_id=key_id,
                access_key_secret=secret,
                security_token=token,
            )
        )
    if local_endpoint and not _profile_file_exists(env):
        return CredentialClient(
            credential_models.Config(
                type="access_key",
                access_key_id=_DUMMY_ACCESS_KEY_ID,
                access_key_secret=_DUMMY_ACCESS_KEY_SECRET,
            )
        )
    return CredentialClient()  # the default chain: profiles, ECS RAM role, credentials URI


def _profile_file_exists(env: Mapping[str, str]) -> bool:
    home = Path(env.get("HOME") or Path.home())
    candidates: list[Any] = [
        env.get("ALIBABA_CLOUD_CREDENTIALS_FILE"),
        home / ".alibabacloud" / "credentials.ini",
        home / ".alibabacloud" / "credentials",
        home / ".aliyun" / "config.json",
    ]
    return any(path and Path(path).is_file() for path in candidates)


def known_profiles(env: Mapping[str, str]) -> set[str]:
    """Profile names of the credentials files the Alibaba credentials chain reads: the sections of
    ``credentials.ini`` (``ALIBABA_CLOUD_CREDENTIALS_FILE`` or ``~/.alibabacloud/credentials.ini``) and the
    ``profiles[].name`` of the aliyun CLI's ``~/.aliyun/config.json``."""
    import configparser

    home = Path(env.get("HOME") or Path.home())
    names: set[str] = set()
    for ini in (env.get("ALIBABA_CLOUD_CREDENTIALS_FILE"), home / ".alibabacloud" / "credentials.ini"):
        if ini and Path(ini).is_file():
            parser = configparser.ConfigParser()
            try:
                parser.read(str(ini), encoding="utf-8")
            except configparser.Error:
                continue
            names.update(parser.sections())
    return names | _cli_profile_names(home)


def _cli_profile_names(home: Path) -> set[str]:
    """``profiles[].name`` of the aliyun CLI's ``~/.aliyun/config.json`` (none when it is unreadable)."""
    import json

    cli = home / ".aliyun" / "config.json"
    if not cli.is_file():
        return set()
    try:
        data = json.loads(cli.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    profiles = data.get("profiles", []) if isinstance(data, dict) else []
    return {str(p["name"]) for p in profiles if isinstance(p, dict) and p.get("name")}


def profile_credential(profile: str, env: Mapping[str, str]) -> CredentialClient | None:
    """The credentials of a named profile, of any type the Alibaba credentials chain knows (``access_key``,
    ``ram_role_arn``, ``ecs_ram_role``, ``oidc_role_arn``, ...): an INI section first (as `known_profiles`
    reads them), else an aliyun CLI profile of ``~/.aliyun/config.json``. None when no file names it.

    The profile's own provider signs every call, so a role is assumed (and its STS token refreshed before it
    expires) for that account alone; never the default chain, which would sign with another account's keys.
    """
    import configparser

    from alibabacloud_credentials.provider import CLIProfileCredentialsProvider, ProfileCredentialsProvider

    home = Path(env.get("HOME") or Path.home())
    for ini in (env.get("ALIBABA_CLOUD_CREDENTIALS_FILE"), home / ".alibabacloud" / "credentials.ini"):
        if not ini or not Path(ini).is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(str(ini), encoding="utf-8")
        except configparser.Error:
            continue
        if parser.has_section(profile):
            return CredentialClient(
                provider=ProfileCredentialsProvider(profile_file=str(ini), profile_name=profile)
            )
    if profile in _cli_profile_names(home):
        cli = home / ".aliyun" / "config.json"
        return CredentialClient(
            provider=CLIProfileCredentialsProvider(profile_name=profile, profile_file=str(cli))
        )
    return None
