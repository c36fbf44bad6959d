#!/usr/bin/env python3
"""`torchmt serve` under a long mixed load: does anything fail or grow?

    tools/bench/serve_soak.py -m DEEN.pt [-m ENDE.pt] [--clients 6] [--seconds 600] [--torchmt build/torchmt]
                              [-- extra serve flags]

Starts `torchmt serve` with the models (both directions when two are given: each must record its
languages) and runs CLIENTS threads for SECONDS, each looping over a mix of requests built from
Multi30k test_2016: LibreTranslate text (one and several texts), html, alternatives, "auto"; /v1
with alignments, constraints, target prefixes, confidence; both directions when served. Samples
the server's RSS every 5 s. Prints requests, non-200 answers, p50/p99 latency, RSS after the
first 2 minutes and at the end, and the growth between them (goal: no errors, growth <= 5%)."""
import argparse
import gzip
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lines(name):
    with gzip.open(os.path.join(ROOT, "data", "multi30k", name), "rt", encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", dest="models", action="append", required=True)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--torchmt", default=os.path.join(ROOT, "build", "torchmt"))
    ap.add_argument("--kinds", default="0,1,2,3,4,5,6,7",
                    help="the request kinds to mix: 0 text, 1 list, 2 html, 3 alternatives, 4 auto, "
                         "5 /v1 alignments, 6 /v1 constraints, 7 /v1 prefix + confidence")
    ap.add_argument("serve_flags", nargs="*")
    a = ap.parse_args()
    de, en = lines("test_2016_flickr.de.gz"), lines("test_2016_flickr.en.gz")
    both = len(a.models) > 1
    kinds = [int(k) for k in a.kinds.split(",")]
    cmd = [a.torchmt, "serve", "--port", "0"] + sum((["-m", m] for m in a.models), []) + a.serve_flags
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    threading.Thread(target=proc.stderr.read, daemon=True).start()

    def requests(rng):
        i = rng.randrange(len(de))
        pair = ("de", "en", de, en) if not both or rng.random() < 0.5 else ("en", "de", en, de)
        src, tgt, texts, refs = pair
        t = texts[i]
        kind = rng.choice(kinds)
        if kind == 0:
            return "/translate", {"q": t, "source": src, "target": tgt, "format": "text"}
        if kind == 1:
            return "/translate", {"q": [texts[(i + k) % len(texts)] for k in range(4)], "source": src, "target": tgt}
        if kind == 2:
            return "/translate", {"q": f"<p>{t} <b>{texts[(i + 1) % len(texts)]}</b></p>", "source": src,
                                  "target": tgt, "format": "html"}
        if kind == 3:
            return "/translate", {"q": t, "source": src, "target": tgt, "alternatives": 2}
        if kind == 4:
            return "/translate", {"q": [t, refs[i]], "source": "auto", "target": tgt}
        v1 = {"q": t, "source": src, "target": tgt} if both else {"q": t}
        if kind == 5:
            return "/v1/translate", dict(v1, alignments=True)
        if kind == 6:
            word = refs[i].split()[-1].strip(".") or refs[i]
            return "/v1/translate", dict(v1, constraints=[word], beam=4)
        return "/v1/translate", dict(v1, target_prefix=refs[i].split()[0], confidence=True)

    latencies, errors, count = [], [], [0]
    lock = threading.Lock()
    stop_at = time.time() + a.seconds

    def client(seed):
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while time.time() < stop_at:
            path, body = requests(rng)
            start = time.perf_counter()
            try:
                conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                status, data = -1, str(e).encode()
            elapsed = time.perf_counter() - start
            with lock:
                count[0] += 1
                latencies.append(elapsed)
                if status != 200:
                    errors.append((status, path, data[:200]))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    samples = []
    while time.time() < stop_at:
        samples.append((time.time() - t0, rss_mib(proc.pid)))
        time.sleep(5)
    for t in threads:
        t.join()
    samples.append((time.time() - t0, rss_mib(proc.pid)))
    proc.terminate()
    proc.wait(timeout=60)
    at2 = next((r for s, r in samples if s >= min(120, a.seconds / 2)), samples[-1][1])
    end = samples[-1][1]
    lat = sorted(latencies)
    print(f"models: {' + '.join(a.models)}; {a.clients} clients for {a.seconds:.0f} s; kinds {a.kinds}")
    print(f"requests {count[0]}, non-200 {len(errors)}, {count[0] / a.seconds:.1f}/s, "
          f"p50 {statistics.median(lat) * 1000:.0f} ms, p99 {lat[int(len(lat) * 0.99) - 1] * 1000:.0f} ms")
    print(f"RSS MiB: start {samples[0][1]:.0f}, max {max(r for _, r in samples):.0f}, "
          f"after {min(120, a.seconds / 2):.0f} s {at2:.0f}, end {end:.0f}: growth {(end / at2 - 1) * 100:+.1f}%")
    print("RSS every 30 s:", " ".join(f"{r:.0f}" for s, r in samples[::6]))
    for e in errors[:5]:
        print("error:", e)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
