#!/usr/bin/env python3
"""LibreTranslate's own web page, unchanged, against `torchmt serve`, in headless Chromium.

    tools/libretranslate_page_check.py -m MODEL [-m MODEL2] [--torchmt build/torchmt] [--shots DIR]

LibreTranslate's page is a Flask template and a script (templates/index.html, app.js.template and
static/ of its PyPI wheel, downloaded here into a temporary directory, never into the repository).
This renders them as LibreTranslate's Flask app does (English, no API secret) and serves them from
a small local server that forwards every other request, unchanged, to `torchmt serve`: the page
reads /frontend/settings and /languages, and a sentence typed into it comes back translated
through POST /translate (a multipart form with alternatives 3), as `torchmt translate --beam 4`
translates it. Needs selenium, jinja2, Debian's chromium and chromium-driver. Exit 0 when the
page works, 77 when a requirement is missing here, 1 otherwise."""
import argparse
import glob
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from serve_support import chromium_and_driver, start_serve  # noqa: E402

try:
    import jinja2
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    print(f"{e.name} is not installed (pip install selenium jinja2)")
    sys.exit(77)
CHROMIUM, DRIVER = chromium_and_driver()
if not CHROMIUM:
    print("no chromium / chromedriver here (Debian: chromium chromium-driver)")
    sys.exit(77)


def fetch_page(work):
    """LibreTranslate 1.9.6's templates and static files, from its wheel."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "libretranslate==1.9.6", "-d",
                        work], capture_output=True, text=True)
    wheels = glob.glob(os.path.join(work, "libretranslate-*.whl"))
    if r.returncode != 0 or not wheels:
        print("cannot download libretranslate==1.9.6 from PyPI:", r.stderr.strip()[-300:])
        sys.exit(77)
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.startswith(("libretranslate/templates/", "libretranslate/static/")):
                z.extract(name, work)
    return os.path.join(work, "libretranslate")


def render(lt_dir):
    """index.html and app.js as LibreTranslate's Flask app renders them (English, no secret)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(lt_dir, "templates")))

    def gettext(text, **kw):
        return text % kw if kw else text

    env.globals.update(
        url_for=lambda endpoint, filename=None, **kw: f"/static/{filename}" if endpoint == "static" else "/",
        _=gettext, _h=gettext, _lazy=lambda s: s, _e=lambda text, **kw: json.dumps(gettext(text, **kw)))
    index = env.get_template("index.html").render(
        gaId=None, frontendTimeout=500, api_keys=False, get_api_key_link="", web_version=False, version="1.9.6",
        swagger_url="/spec", available_locales=[{"code": "en", "name": "English"}], current_locale="en",
        alternate_locales=[], under_attack=False, hide_api=False, get_api_key_text="", menulinks="",
        frontend_title="LibreTranslate")
    app_js = env.get_template("app.js.template").render(url_prefix="", get_api_key_link="", api_secret="",
                                                         bogus_api_secret="", under_attack=False)
    return index, app_js


def page_server(lt_dir, index, app_js, api_port):
    """Serves the page and its files; every other request goes to torchmt serve as it came."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body, content_type):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
            conn = http.client.HTTPConnection("127.0.0.1", api_port, timeout=120)
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            self.reply(r.status, r.read(), r.getheader("Content-Type") or "application/json")
            conn.close()

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/":
                self.reply(200, index.encode("utf-8"), "text/html; charset=utf-8")
            elif path == "/js/app.js":
                self.reply(200, app_js.encode("utf-8"), "application/javascript; charset=utf-8")
            elif path.startswith("/static/"):
                file = os.path.normpath(os.path.join(lt_dir, path.lstrip("/")))
                if not file.startswith(lt_dir) or not os.path.isfile(file):
                    self.reply(404, b"not found", "text/plain")
                    return
                kind = {".js": "application/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
                with open(file, "rb") as f:
                    self.reply(200, f.read(), kind.get(os.path.splitext(file)[1], "application/octet-stream"))
            else:
                self.forward()

        def do_POST(self):  # noqa: N802
            self.forward()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", dest="models", action="append", required=True)
    ap.add_argument("--torchmt", default=os.path.join(ROOT, "build", "torchmt"))
    ap.add_argument("--shots", default=os.path.join(tempfile.gettempdir(), "torchmt-libretranslate-page"))
    a = ap.parse_args()
    sentence = "Ein Hund läuft über die Wiese."
    want = subprocess.run([a.torchmt, "translate", "-m", a.models[0], "--beam", "4", "-q"], input=sentence + "\n",
                          capture_output=True, text=True, check=True).stdout.rstrip("\n")
    work = tempfile.mkdtemp()
    proc, port = start_serve([a.torchmt, "serve", "--port", "0"] + sum((["-m", m] for m in a.models), []))
    if proc is None:
        sys.exit("torchmt serve did not start")
    driver = None
    try:
        lt_dir = fetch_page(work)
        index, app_js = render(lt_dir)
        page = page_server(lt_dir, index, app_js, port)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1200,900"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
        driver.get(f"http://127.0.0.1:{page.server_address[1]}/?source=de&target=en")
        box = WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "textarea1"))
        WebDriverWait(driver, 60).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "select[aria-labelledby=sourceLangLabel] option")) >= 2)
        box.send_keys(sentence)
        WebDriverWait(driver, 120).until(lambda d: d.find_element(By.ID, "textarea2").get_attribute("value").strip())
        shown = driver.find_element(By.ID, "textarea2").get_attribute("value").strip()
        os.makedirs(a.shots, exist_ok=True)
        shot = os.path.join(a.shots, "libretranslate-page.png")
        driver.save_screenshot(shot)
        languages = [o.text for o in driver.find_elements(By.CSS_SELECTOR,
                                                          "select[aria-labelledby=sourceLangLabel] option")]
        print(f"LibreTranslate's page lists {languages}; {sentence!r} -> {shown!r}; screenshot {shot}")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if shown != want:
            print(f"FAIL: the page shows {shown!r}, torchmt translate --beam 4 gives {want!r}")
            return 1
        if errors:
            print("FAIL: console errors:", errors)
            return 1
        print("ok: LibreTranslate's own page translates through torchmt serve")
        return 0
    finally:
        if driver:
            driver.quit()
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
