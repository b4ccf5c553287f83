"""RAM as the fake sees it: which Actions a caller (an AccessKeyId, or everyone) may call.

By default every Action is allowed, as for an account's own keys. `deny` refuses Actions outright (an
explicit Deny statement); `allow_only` confines a caller to a list (a custom policy, everything else
implicitly denied), the way a RAM role holding the Terraform module's policy is confined. A refused call is
answered the way the real products answer a RAM denial: HTTP 403 with a `Forbidden.RAM` code (ESS:
`Forbidden.Unauthorized`, aliyun-api.md section 1.4; CMS: `NoPermission`, one of the codes RAM's
troubleshooting guide names: which one CloudMonitor sends is not documented, so this is the fake's choice)
and an `AccessDeniedDetail` naming the `AuthAction`, as ECS sends since its 2025 authentication change. Each
refusal is recorded in `denials`.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from fleet.testing.core.errors import AliyunError

PERMISSION = re.compile(r"^(ess|cms|ecs):[A-Z][A-Za-z0-9]*$")
DENIAL_CODES = {"ecs": "Forbidden.RAM", "ess": "Forbidden.Unauthorized", "cms": "NoPermission"}
DENIAL_MESSAGE = "User not authorized to operate on the specified resource, or this API doesn't support RAM."


class RamDenied(AliyunError):
    """A RAM refusal: an AliyunError whose body also carries AccessDeniedDetail."""

    def __init__(self, code: str, auth_action: str, explicit: bool, caller: str) -> None:
        super().__init__(code, DENIAL_MESSAGE, 403)
        self.detail = {
            "AuthAction": auth_action,
            "NoPermissionType": "ExplicitDeny" if explicit else "ImplicitDeny",
            "PolicyType": "AccountLevelIdentityBasedPolicy",
            "AuthPrincipalType": "SubUser",
            "AuthPrincipalDisplayName": caller,
        }


@dataclass
class RamRules:
    denied: dict[str, str | None] = field(default_factory=dict)  # permission -> caller (None = everyone)
    allowed: dict[str | None, frozenset[str]] = field(default_factory=dict)  # caller -> its only Actions
    denials: deque[dict[str, str]] = field(default_factory=lambda: deque(maxlen=1000))

    def deny(self, permissions: list[str], caller: str | None = None) -> None:
        for p in _checked(permissions):
            self.denied[p] = caller

    def allow_only(self, permissions: list[str], caller: str | None = None) -> None:
        self.allowed[caller] = frozenset(_checked(permissions))

    def clear(self) -> None:
        self.denied.clear()
        self.allowed.clear()

    def check(self, product: str, action: str, caller: str) -> RamDenied | None:
        wanted = f"{product}:{action}"
        explicit = wanted in self.denied and self.denied[wanted] in (None, caller)
        confined = [self.allowed[k] for k in (None, caller) if k in self.allowed]
        if not explicit and all(wanted in allowed for allowed in confined):
            return None
        self.denials.append({"caller": caller, "permission": wanted})
        return RamDenied(DENIAL_CODES[product], wanted, explicit, caller)

    def state(self) -> dict[str, object]:
        return {
            "denied": [{"permission": p, "access_key_id": c} for p, c in sorted(self.denied.items())],
            "allow_only": [
                {"access_key_id": c, "permissions": sorted(ps)}
                for c, ps in sorted(self.allowed.items(), key=lambda kv: kv[0] or "")
            ],
            "denials": list(self.denials),
        }


def _checked(permissions: list[str]) -> list[str]:
    if isinstance(permissions, str) or not isinstance(permissions, list):
        raise ValueError("permissions must be a list of 'product:Action' strings")
    bad = [p for p in permissions if not isinstance(p, str) or not PERMISSION.match(p)]
    if bad:
        raise ValueError(f"not a permission of ess, cms or ecs as RAM names it (product:Action): {bad[0]!r}")
    return list(permissions)
