"""What the Python tests of `torchmt serve` share: starting the server on a free port."""
import re
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
