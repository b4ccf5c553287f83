"""The ECS instance metadata service: who am I, when the operator did not say.

Only asked when a value was not given on the command line or in the environment, and only with a short
timeout: off ECS (a laptop, CI) the address does not answer and the agent must not hang. The base URL can be
pointed elsewhere with ``FLEET_ECS_METADATA_URL`` (tests use a local server; nothing else should).
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Mapping

# The link-local metadata address of every ECS instance (Alibaba Cloud ECS docs, "instance metadata").
DEFAULT_METADATA_URL = "http://100.100.100.200/latest/meta-data/"
METADATA_TIMEOUT_S = 1.0


def metadata_base_url(env: Mapping[str, str] = os.environ) -> str:
    return env.get("FLEET_ECS_METADATA_URL", DEFAULT_METADATA_URL)


def fetch_metadata(
    item: str, base_url: str = DEFAULT_METADATA_URL, timeout_s: float = METADATA_TIMEOUT_S
) -> str | None:
    """One metadata item (``instance-id``, ``region-id``, ...), or None when the service does not answer."""
    url = base_url.rstrip("/") + "/" + item
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (fixed link-local URL)
            text = resp.read(4096).decode("utf-8", errors="replace").strip()
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):  # not HTTP at all too
        return None
    return text or None
