"""The console in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium) against
`fleet fake-cloud` and `fleet serve` running as subprocesses on 127.0.0.1.

`make test` installs the browser where it is root with apt-get (the `chromium` target); elsewhere
these tests skip and say why. One module, one pair of servers shared by all its tests; waits are bounded
polls, never timing assertions. Screenshots go to reports/console/ (generated, ignored by git) and are
checked for being non-blank.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from fleet.service.store import open_store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[4]
SHOTS = REPO / "reports" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TOKEN = "browser-token-42"
REGION = "cn-chengdu"


def _skip_reason() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} not found: install Debian's chromium and chromium-driver (make chromium, as root)"
    return None


if (_reason := _skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service as DriverService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def wait_for(pred: Callable[[], object], timeout_s: float = 30.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    try:
        r = httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return None
    return r if r.status_code == 200 else None


class Fleet:
    """`fleet fake-cloud` with a group of two InService nodes; `fleet serve` with an overheating rule."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.fake_port, self.api_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.api_port}"
        self.fake = f"http://127.0.0.1:{self.fake_port}/_fake"
        self.db_url = f"sqlite:///{tmp / 'fleet.db'}"
        self.procs: list[subprocess.Popen] = []
        self.hot: str | None = None
        self._stop = threading.Event()

    def start(self) -> Fleet:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._spawn(["fake-cloud", "--port", str(self.fake_port), "--boot-seconds", "1"], env, "fake.log")
        wait_for(lambda: _get(f"{self.fake}/clock"), what="fleet fake-cloud")
        body = {"name": "chat", "min_size": 1, "max_size": 6, "desired_capacity": 2, "in_service": 2}
        gid = httpx.post(f"{self.fake}/groups", json={**body, "region_id": REGION}).json()["group_id"]
        self.hot = sorted(httpx.get(f"{self.fake}/state").json()["ecs"]["instances"])[0]
        cfg = self.tmp / "fleet.yaml"
        cfg.write_text(
            textwrap.dedent(f"""\
            region: {REGION}
            account_id: "1234567890"
            tick_interval_s: 0.5
            lease: {{ttl_s: 3}}
            api: {{host: 127.0.0.1, port: {self.api_port}}}
            groups:
              - name: chat
                scaling_group_id: {gid}
                min_size: 1
                max_size: 6
                warm_floor: 2
                cold_start_s: 2
                isolation:
                  respond_within: 15m
                  isolate_within: 4h
                  rules:
                    - {{metric: gpu_temperature_c, above: 85, for: 2s, action: hold}}
            """)
        )
        serve_env = {
            **env,
            "FLEET_ALIYUN_ENDPOINT": f"127.0.0.1:{self.fake_port}",
            "FLEET_API_TOKEN": TOKEN,
            "ALIBABA_CLOUD_ACCESS_KEY_ID": "browser",
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "browser",
        }
        for desktop in ("DISPLAY", "WAYLAND_DISPLAY"):  # print the address, never open a window
            serve_env.pop(desktop, None)
        self._spawn(
            ["serve", "--config", str(cfg), "--database", self.db_url, "--open"], serve_env, "serve.log"
        )
        threading.Thread(target=self._publish, daemon=True).start()
        wait_for(lambda: _get(f"{self.base}/healthz"), what="fleet serve's API")
        return self

    def _spawn(self, args: list[str], env: dict[str, str], log: str) -> None:
        out = open(self.tmp / log, "ab")  # noqa: SIM115 - closed with the process
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "fleet.cli", *args],
                env=env,
                cwd=self.tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        )

    def _publish(self) -> None:
        """The hot node reads 91 C, the others 60 C, several times a second (the rule wants 2 s above 85)."""
        while not self._stop.wait(0.3):
            try:
                ids = list(httpx.get(f"{self.fake}/state", timeout=2).json()["ecs"]["instances"])
                points = [
                    {
                        "namespace": "acs_ecs_dashboard",
                        "metric": "instance_gpu_gpu_temperature",
                        "dimensions": {"instanceId": iid},
                        "value": 91.0 if iid == self.hot else 60.0,
                    }
                    for iid in ids
                ]
                httpx.post(f"{self.fake}/metrics", json={"points": points}, timeout=2)
            except httpx.HTTPError:
                continue

    def store(self):
        return open_store(self.db_url)

    def log(self, name: str) -> str:
        path = self.tmp / name
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        self._stop.set()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("console")).start()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--metrics-recording-only",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=opts, service=DriverService(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(browser, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    return path


def png_colors(path: Path, limit: int = 64) -> int:
    """How many distinct RGB colours the (8-bit RGB/RGBA, non-interlaced) PNG has, counted up to ``limit``."""
    data = path.read_bytes()
    pos, idat, width, height, bpp = 8, b"", 0, 0, 4
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, _, color_type = struct.unpack(">IIBB", chunk[:10])
            bpp = 4 if color_type == 6 else 3
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, prev = zlib.decompress(idat), width * bpp, bytearray(width * bpp)
    colors: set[bytes] = set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colors.update(bytes(line[i : i + 3]) for i in range(0, stride, bpp * 7))
        prev = line
        if len(colors) >= limit:
            break
    return len(colors)


def _requested_hosts(browser) -> set[str]:
    hosts = set()
    for entry in browser.get_log("performance"):
        msg = entry["message"]
        if '"Network.requestWillBeSent"' in msg:
            import json

            url = json.loads(msg)["message"]["params"]["request"]["url"]
            if not url.startswith(("data:", "about:")):
                hosts.add(urlsplit(url).netloc)
    return hosts


def _severe(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_serve_open_prints_the_console_address(fleet):
    wait_for(lambda: f"console: {fleet.base}/console/" in fleet.log("serve.log"), what="the printed address")


def test_fleet_page_shows_the_group_and_its_numbers(fleet, browser):
    browser.get(f"{fleet.base}/console/")
    row = wait_for(
        lambda: next(
            (
                r
                for r in browser.find_elements(By.CSS_SELECTOR, "table.fleet tbody tr")
                if r.text.startswith("chat")
            ),
            None,
        ),
        what="the chat row",
    )
    # desired and InService come from the replica's observation of the fake: 2 and 2 (or more while it grows).
    nums = wait_for(
        lambda: (
            [c.text for c in row.find_elements(By.CSS_SELECTOR, "span.num")]
            if "-" not in row.text.split()[1:3]
            else None
        ),
        what="observed numbers",
    )
    assert int(nums[0]) >= 2 and int(nums[1]) >= 2
    assert png_colors(_shot(browser, "fleet")) > 8


def test_an_overheating_node_appears_as_an_incident_with_a_countdown(fleet, browser):
    store = fleet.store()
    try:
        wait_for(lambda: store.incidents(open_only=True), what="the overheating node's incident")
    finally:
        store.close()
    browser.get(f"{fleet.base}/console/incidents")
    row = browser.find_element(By.CSS_SELECTOR, "table.incidents tbody tr")
    assert fleet.hot in row.text
    clock = row.find_element(By.CSS_SELECTOR, "[data-deadline]")
    first = clock.text
    wait_for(lambda: clock.text != first, timeout_s=5, what="the countdown to tick")
    assert png_colors(_shot(browser, "incidents")) > 8


def sign_in(fleet: Fleet, browser) -> dict:
    """Sign in through the form (once per module's browser); the session cookie."""
    if browser.get_cookie("fleet_session") is None:
        browser.get(f"{fleet.base}/console/signin")
        browser.find_element(By.NAME, "name").send_keys("oncall")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait_for(lambda: "signed in as" in browser.page_source, what="signed in")
    return browser.get_cookie("fleet_session")


def test_ack_and_release_from_the_page_change_the_store(fleet, browser):
    sign_in(fleet, browser)
    browser.get(f"{fleet.base}/console/incidents")
    browser.find_element(By.XPATH, "//table[@class='incidents']//button[text()='ack']").click()
    wait_for(lambda: "acknowledged by oncall" in browser.page_source, what="ack confirmation")
    browser.find_element(By.XPATH, "//table[@class='incidents']//button[text()='release']").click()
    wait_for(lambda: "release of" in browser.page_source, what="release confirmation")
    store = fleet.store()
    try:
        acked = [i for i in store.incidents() if i.acknowledged_by == "human:oncall"]
        released = [r for r in store.requests() if r.kind == "release" and r.actor == "oncall"]
    finally:
        store.close()
    assert acked and released and released[0].instance_id == fleet.hot
    # the operator requests panel lists the release, queued or already handled by the leader
    row = wait_for(
        lambda: browser.find_elements(By.ID, f"request-{released[0].id}"), what="the release's request row"
    )
    assert row
    text = browser.find_element(By.CSS_SELECTOR, "table.requests").text
    assert f"release {fleet.hot} oncall" in " ".join(text.split())


def test_forms_without_csrf_or_sign_in_are_refused(fleet, browser):
    cookie = sign_in(fleet, browser)
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    with httpx.Client(base_url=fleet.base) as anon:
        assert anon.post("/console/groups/chat/pause", data={"csrf": "x"}).status_code == 401
    with httpx.Client(base_url=fleet.base, cookies={"fleet_session": cookie["value"]}) as signed:
        assert signed.post("/console/groups/chat/pause", data={"next": "/console/"}).status_code == 403
    # The page's own form, with its CSRF field removed, is refused too.
    browser.get(f"{fleet.base}/console/")
    browser.execute_script("document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
    browser.find_element(By.XPATH, "//table[@class='fleet']//button[text()='pause']").click()
    wait_for(lambda: "CSRF" in browser.page_source, what="the refusal page")
    store = fleet.store()
    try:
        assert store.paused_groups() == set()
    finally:
        store.close()


def test_pages_have_no_console_errors_and_load_only_from_this_host(fleet, browser):
    browser.get_log("browser")
    browser.get_log("performance")
    for name, path in (
        ("group", "/console/groups/chat?window=1h"),
        ("decisions", "/console/decisions"),
        ("fleet", "/console/"),
        ("incidents", "/console/incidents"),
    ):
        browser.get(fleet.base + path)
        wait_for(lambda: browser.find_elements(By.TAG_NAME, "footer"), what=f"{name} page")
        assert png_colors(_shot(browser, name)) > 8, name
    assert _severe(browser) == []
    assert _requested_hosts(browser) == {f"127.0.0.1:{fleet.api_port}"}


def test_screenshots_are_generated_outside_git():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    check = subprocess.run(["git", "check-ignore", "-q", str(SHOTS / "fleet.png")], cwd=REPO, check=False)
    assert check.returncode == 0
