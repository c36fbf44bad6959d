"""pytest plugin: LibreTranslate's own API tests (libretranslate/tests/test_api/ of its PyPI wheel,
fetched by tools/setup.sh into BUILD/libretranslate_tests/) against a running `torchmt serve`.

Their conftest makes a Flask test client of LibreTranslate's app; this plugin gives them a client of
the same shape (get/post with data= or json=; .status_code, .data, .json) that sends HTTP requests
to `torchmt serve -m MODEL`, started as the README says (no language flags: the checkpoint knows
its languages). Their language codes are mapped to the served pair (en -> the model's source,
es -> its target); anything else ("zz") is sent as it is.

    python -m pytest -p lt_client BUILD/libretranslate_tests --torchmt-binary BUILD/torchmt

Without --lt-model a tiny model is trained first on data/sample.{de,en} (a few seconds)."""
import http.client
import json
import os
import subprocess
import sys
import urllib.parse

import pytest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests"))
from serve_support import start_serve  # noqa: E402
LANGUAGES = {"en": "de", "es": "en"}  # LibreTranslate's test pair -> the served one


def pytest_addoption(parser):
    parser.addoption("--torchmt-binary", default=os.path.join(SOURCE_DIR, "build", "torchmt"))
    parser.addoption("--lt-model", default="", help="the checkpoint to serve (default: train a tiny one)")


class Response:
    def __init__(self, status, data, content_type):
        self.status_code = status
        self.data = data
        self.content_type = content_type

    @property
    def json(self):
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class Client:
    """Flask's test client, as LibreTranslate's tests use it, over HTTP."""

    def __init__(self, port):
        self.port = port

    @staticmethod
    def _map(fields):
        return {k: (LANGUAGES.get(v, v) if k in ("source", "target") else v) for k, v in fields.items()}

    def open(self, method, path, data=None, json_body=None):
        headers, body = {}, None
        if json_body is not None:
            body = json.dumps(self._map(json_body)).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif data is not None:
            body = urllib.parse.urlencode(self._map(data)).encode("utf-8")
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        response = Response(r.status, r.read(), r.getheader("Content-Type") or "")
        conn.close()
        return response

    def get(self, path, **kw):
        return self.open("GET", path, kw.get("data"), kw.get("json"))

    def post(self, path, data=None, json=None):  # noqa: A002 (Flask's names)
        return self.open("POST", path, data, json)


def train_tiny_model(binary, out):
    sample = os.path.join(SOURCE_DIR, "data", "sample")
    subprocess.run([binary, "train", "--train-src", sample + ".de", "--train-tgt", sample + ".en",
                    "--preset", "tiny", "--vocab-size", "400", "--max-steps", "20", "--batch-tokens", "1000",
                    "--threads", "1", "--out", out], check=True, capture_output=True)
    return os.path.join(out, "checkpoint_last.pt")


@pytest.fixture(scope="session")
def torchmt_server(request, tmp_path_factory):
    binary = request.config.getoption("--torchmt-binary")
    model = request.config.getoption("--lt-model") or train_tiny_model(
        binary, str(tmp_path_factory.mktemp("lt") / "run"))
    proc, port = start_serve([binary, "serve", "-m", model, "--port", "0", "--threads", "1"])
    if proc is None:
        pytest.fail("torchmt serve did not start")
    yield port
    proc.terminate()
    assert proc.wait(timeout=60) == 0


@pytest.fixture()
def app(torchmt_server):
    return torchmt_server


@pytest.fixture()
def client(app):
    return Client(app)
