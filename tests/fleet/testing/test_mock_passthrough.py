"""mock_aliyun lets listed URL prefixes reach a real local server while answering everything else itself."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from fleet.testing import mock_aliyun


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = b"hello from the local server"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_passthrough_prefix_reaches_the_real_local_server():
    server = _serve()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with mock_aliyun(passthrough=[url]):
            answer = requests.get(url + "/anything", timeout=5)
        assert answer.status_code == 200
        assert answer.text == "hello from the local server"
    finally:
        server.shutdown()


def test_urls_outside_the_passthrough_prefixes_are_still_answered_by_the_fake():
    server = _serve()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with mock_aliyun(passthrough=[url]):
            answer = requests.get("http://127.0.0.2:9/else", timeout=5)
        assert answer.status_code == 400
        assert answer.json()["Code"] == "NotImplemented"
    finally:
        server.shutdown()
