"""What the Python tests of `torchmt serve` share: starting the server on a free port."""
import os
import re
import shutil
import subprocess
import threading
import time


def start_serve(command, timeout=120):
    """Runs `command` (a `torchmt serve ... --port 0` command line) and waits for its "listening on"
    line; returns (process, port), or (None, None) when it did not start (the process killed)."""
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        if m:
            # Keep draining stderr so that the server never blocks on it.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    return None, None


def chromium_and_driver():
    """Debian's chromium and chromedriver (tools/setup.sh installs them): their paths, or (None, None)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    if not chromium or not os.path.exists(driver):
        return None, None
    return chromium, driver
