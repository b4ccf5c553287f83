"""`fleet fake-cloud`: serve the fake Alibaba Cloud (ECS, ESS, CMS) over HTTP on 127.0.0.1.

Point the official SDK clients at it with ``Config(endpoint="127.0.0.1:<port>", protocol="http")`` or set
``FLEET_ALIYUN_ENDPOINT=127.0.0.1:<port>``; drive time, metrics, faults and events through ``/_fake/``
(docs/fake-cloud.md).
"""

from __future__ import annotations

import re
import signal
import sys
from types import FrameType

import typer

from fleet.commands._common import fail

MAX_BOOT_S = 86400.0  # a day to boot is a typo; beyond it the fake's timers would never fire in a demo
MAX_TIME_SCALE = 10000.0  # a simulated week in a minute; more than that and the clock jumps past every timer


def register(app: typer.Typer) -> None:
    app.command("fake-cloud")(fake_cloud)


def fake_cloud(
    port: int = typer.Option(..., "--port", help="TCP port on 127.0.0.1 (0 picks a free one and prints it)."),
    boot_seconds: float = typer.Option(30.0, "--boot-seconds", help="Fake seconds to InService."),
    restart_seconds: float | None = typer.Option(
        None,
        "--restart-seconds",
        help="Fake seconds for a stopped instance (economical mode) to run again; default: --boot-seconds.",
    ),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Fake seconds per real second."),
    seed: int = typer.Option(0, "--seed", help="Seed for ids and random faults (reproducible runs)."),
    account_id: str = typer.Option("1234567890", "--account-id", help="Account id (custom namespace)."),
    region: str = typer.Option(
        "cn-hangzhou", "--region", help="Region of resources whose request names none."
    ),
) -> None:
    """Serve the fake Alibaba Cloud until interrupted (Ctrl-C or SIGTERM)."""
    from fleet.testing import FakeAliyunServer

    if not 0 <= port <= 65535:
        fail(f"--port: {port} is not a TCP port (0-65535)")
    if not 0 <= boot_seconds <= MAX_BOOT_S:  # NaN fails these too
        fail(f"--boot-seconds: must be between 0 and {MAX_BOOT_S:g}, got {boot_seconds}")
    if restart_seconds is not None and not 0 <= restart_seconds <= MAX_BOOT_S:
        fail(f"--restart-seconds: must be between 0 and {MAX_BOOT_S:g}, got {restart_seconds}")
    if not 0 < time_scale <= MAX_TIME_SCALE:
        fail(f"--time-scale: must be positive and at most {MAX_TIME_SCALE:g}, got {time_scale}")
    if not account_id.isdigit():
        fail(f"--account-id: must be digits, got {account_id!r}")
    if not re.fullmatch(r"[a-z]{2}-[a-z0-9-]+", region):
        fail(f"--region: {region!r} is not a region id such as cn-chengdu")
    server = FakeAliyunServer(
        port=port,
        boot_seconds=boot_seconds,
        time_scale=time_scale,
        seed=seed,
        account_id=account_id,
        region_id=region,
        restart_seconds=restart_seconds,
    )
    try:
        server.bind()
    except OSError as exc:
        fail(f"--port: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}")

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    # One machine-readable line first: scripts wait for it and read the port.
    sys.stdout.write(f"fake Alibaba Cloud listening on {server.endpoint} (control: {server.url}/_fake/)\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
