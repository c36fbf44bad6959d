#!/usr/bin/env python3
"""`torchmt serve` end to end, with nothing but Python's standard library as the client.

    serve_test.py TORCHMT MODEL SAMPLE_DE

1. Both APIs (LibreTranslate's /translate as JSON and as a form, /v1/translate with beam and
   n-best) answer exactly what `torchmt translate` writes for the same sentences and options.
2. Concurrent clients each get the answer to their own sentence.
3. Caps and malformed requests get their documented status and a one-line JSON error.
4. SIGTERM with requests in flight: every one of them is answered, then the server exits 0.
Exit 0 when all hold; prints the first failure otherwise.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from serve_support import start_serve

TORCHMT, MODEL, SAMPLE = sys.argv[1:4]


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def start_server(*flags):
    proc, port = start_serve([TORCHMT, "serve", "-m", MODEL, "--port", "0", "--threads", "2", *flags])
    check(proc, "the server did not start")
    return proc, port


def request(port, method, path, body=None, content_type="application/json", timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": content_type} if body is not None else {}
    if isinstance(body, str):
        body = body.encode("utf-8")
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, response.getheader("Content-Type") or "", data


def post_json(port, path, obj):
    status, _, data = request(port, "POST", path, json.dumps(obj))
    return status, json.loads(data)


def cli_translate(sentences, *flags):
    out = subprocess.run([TORCHMT, "translate", "-m", MODEL, "--threads", "2", *flags],
                         input="\n".join(sentences) + "\n", capture_output=True, text=True, check=True)
    return out.stdout.split("\n")[:-1]


def expect_error(port, status, body, content_type="application/json", path="/translate", method="POST"):
    got, ctype, data = request(port, method, path, body, content_type)
    check(got == status, f"{method} {path} {(body or '')[:60]!r}: status {got}, expected {status}: {data[:200]!r}")
    check(ctype.startswith("application/json"), f"{path}: error content type {ctype}")
    error = json.loads(data).get("error", "")
    check(error and "\n" not in error, f"{path}: error message {error!r}")


def main():
    sentences = [line.rstrip("\n") for line in open(SAMPLE, encoding="utf-8")][:20]
    greedy = cli_translate(sentences)
    beam4 = cli_translate(sentences, "--beam", "4")
    early = cli_translate(sentences, "--beam", "4", "--early-exit")
    nbest = cli_translate(sentences[:3], "--beam", "4", "--nbest", "2")
    paragraph = sentences[2] + " " + sentences[3] + "  " + sentences[4]
    split = cli_translate([paragraph], "--split-sentences")
    aligned = cli_translate(sentences[:2], "--alignments")
    html = ('<div><p class="a&amp;b">' + sentences[0] + ' <b>' + sentences[1] + '</b></p>'
            '<script>if (a<b) x();</script><p translate="no">' + sentences[2] + '</p></div>')
    html_cli = cli_translate([html], "--format", "html")

    proc, port = start_server("--max-sentences", "24", "--max-sentence-chars", "300", "--max-body-bytes", "8192",
                              "--max-wait-ms", "20", "--source-language", "de", "--target-language", "en")
    try:
        # 1. Both APIs against the CLI.
        status, answer = post_json(port, "/translate", {"q": sentences, "source": "de", "target": "en",
                                                        "format": "text"})
        check(status == 200 and answer["translatedText"] == greedy, f"/translate list: {status} {answer}")
        status, answer = post_json(port, "/translate", {"q": sentences[0], "source": "auto", "target": "en"})
        check(status == 200 and answer["translatedText"] == greedy[0], f"/translate string: {answer}")
        form = "q=" + "".join("%%%02X" % b for b in sentences[1].encode("utf-8")) + "&source=de&target=en"
        status, _, data = request(port, "POST", "/translate", form, "application/x-www-form-urlencoded")
        check(status == 200 and json.loads(data)["translatedText"] == greedy[1], f"/translate form: {data!r}")
        status, answer = post_json(port, "/translate", {"q": sentences[0] + "\n" + sentences[1]})
        check(answer.get("translatedText") == greedy[0] + "\n" + greedy[1], f"a text's lines: {answer}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences, "beam": 4})
        check(status == 200 and [t["text"] for t in answer["translations"]] == beam4, f"/v1 beam 4: {answer}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences, "beam": 4, "early_exit": True})
        check(status == 200 and [t["text"] for t in answer["translations"]] == early, f"/v1 early exit: {answer}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences[:3], "beam": 4, "nbest": 2, "scores": True})
        got = []
        for i, t in enumerate(answer["translations"]):
            for h in t["sentences"][0]["hypotheses"]:
                got.append((i, h["text"], h["score"]))
        want = [(int(a), b, float(c)) for a, b, c in (line.split(" ||| ") for line in nbest)]
        check(len(got) == len(want) and all(g[:2] == w[:2] and abs(g[2] - w[2]) < 1e-4 for g, w in zip(got, want)),
              f"/v1 n-best with scores: {got} vs {want}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences[0], "attention": True})
        att = answer["translations"][0]["sentences"][0]["attention"]
        check(len(att["weights"]) == len(att["target_pieces"]) and att["svg"].startswith("<svg"),
              f"/v1 attention: {str(answer)[:300]}")
        # Paragraphs, alignments and HTML: as `translate --split-sentences / --alignments / --format html`.
        status, answer = post_json(port, "/translate", {"q": paragraph})
        check(status == 200 and [answer["translatedText"]] == split
              and split[0] == greedy[2] + " " + greedy[3] + "  " + greedy[4], f"/translate paragraph: {answer} {split}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences[:2], "confidence": True})
        rated = [s["confidence"] for t in answer["translations"] for s in t["sentences"]]
        check(status == 200 and len(rated) == 2 and all(0 <= r["sentence"] <= 1 and r["words"] for r in rated),
              f"/v1 confidence: {answer}")
        status, answer = post_json(port, "/translate", {"q": sentences[:2], "source": "de", "target": "en",
                                                        "confidence": True})
        check(status == 200 and len(answer["confidence"]) == 2 and answer["confidence"][0]["words"][0]["word"],
              f"LibreTranslate confidence: {answer}")
        status, answer = post_json(port, "/v1/translate", {"q": sentences[:2], "alignments": True})
        got = [t["text"] + " ||| " + t["sentences"][0]["alignment"] for t in answer["translations"]]
        check(status == 200 and got == aligned, f"/v1 alignments: {got} vs {aligned}")
        status, answer = post_json(port, "/translate", {"q": html, "format": "html"})
        text = answer.get("translatedText", "")
        check(status == 200 and [text] == html_cli and text.startswith('<div><p class="a&amp;b">')
              and text.count("<b>") == 1 and text.count("</b>") == 1
              and text.endswith('</p><script>if (a<b) x();</script><p translate="no">' + sentences[2] + '</p></div>'),
              f"/translate html: {answer} vs {html_cli}")
        deep = "<b>" * 1000 + sentences[0] + "</b>" * 1000
        status, answer = post_json(port, "/translate", {"q": deep, "format": "html"})
        check(status == 200 and answer["translatedText"].count("<b>") == 1000
              and answer["translatedText"].count("</b>") == 1000, f"1000 nested elements: {str(answer)[:200]}")
        status, answer = post_json(port, "/translate", {"q": "<p>Hallo <b>Welt <i>offen</p> </u>", "format": "html"})
        check(status == 200 and "</u>" in answer["translatedText"], f"unclosed and stray tags: {answer}")
        status, _, data = request(port, "GET", "/")
        check(status == 200 and b"<textarea" in data and b"http" not in data.split(b"<body>")[1].replace(
            b"http-equiv", b""), "the page is served and names no other site")

        # 2. Concurrent clients, each its own sentence, several rounds.
        failures = []

        def client(i):
            for _ in range(3):
                s, a = post_json(port, "/translate", {"q": sentences[i]})
                if s != 200 or a.get("translatedText") != greedy[i]:
                    failures.append((i, s, a))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sentences))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not failures, f"concurrent clients: {failures[:3]}")
        status, _, data = request(port, "GET", "/metrics")
        metrics = data.decode()
        check(status == 200 and 'torchmt_requests_total{endpoint="/translate",code="200"}' in metrics,
              "metrics count requests")
        batches = float(re.search(r"^torchmt_batch_sentences_count (\S+)$", metrics, re.M).group(1))
        total = float(re.search(r"^torchmt_batch_sentences_sum (\S+)$", metrics, re.M).group(1))
        check(total / batches > 1.0, f"requests shared batches (mean batch {total / batches})")
        status, _, data = request(port, "GET", "/health")
        check(status == 200 and json.loads(data)["status"] == "ok", "health")
        status, _, data = request(port, "GET", "/languages")
        check(json.loads(data)[0]["code"] == "de", "languages")

        # 3. Caps and malformed requests.
        expect_error(port, 413, json.dumps({"q": "x" * 9000}))                   # body cap
        expect_error(port, 413, json.dumps({"q": ["a"] * 25}))                   # sentences cap
        expect_error(port, 413, json.dumps({"q": "ä" * 301}))                    # characters cap
        expect_error(port, 400, '{"q": ')                                         # malformed JSON
        expect_error(port, 400, b'{"q": "\xff\xfe"}')                             # invalid UTF-8
        expect_error(port, 400, json.dumps({"source": "de"}))                    # no q
        expect_error(port, 400, json.dumps({"q": "a", "source": "fr"}))          # another language
        expect_error(port, 415, "q=a", "text/csv")
        expect_error(port, 413, json.dumps({"q": '<a title="' + "x" * 9000 + '">y</a>', "format": "html"}))
        expect_error(port, 400, b'{"q": "<a href=\xff>x</a>", "format": "html"}')  # invalid UTF-8 in a tag
        expect_error(port, 400, json.dumps({"q": "a", "format": "xml"}))
        expect_error(port, 400, json.dumps({"q": "a", "format": "html", "alternatives": 1}))
        expect_error(port, 400, json.dumps({"q": "a", "split_sentences": True, "target_prefix": "b"}),
                     path="/v1/translate")
        expect_error(port, 400, json.dumps({"q": "a", "beam": 99}), path="/v1/translate")
        expect_error(port, 400, json.dumps({"q": "a", "nonsense": 1}), path="/v1/translate")
        expect_error(port, 400, json.dumps({"q": "a", "attention": True, "attention_layer": 40}), path="/v1/translate")
        expect_error(port, 404, None, path="/nowhere", method="GET")
        # Raw bytes that are not HTTP at all: the server answers or closes, and keeps serving.
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"\x00\xff garbage \r\n\r\n")
            try:
                s.recv(1000)
            except OSError:
                pass
        status, answer = post_json(port, "/translate", {"q": sentences[0]})
        check(status == 200 and answer["translatedText"] == greedy[0], "still serving after garbage")

        # What the HTTP library would let through: a chunked body (read whole, past the body cap),
        # two Content-Lengths, a flood of header fields; Range is ignored (a POST's JSON was cut).
        def raw_status(head, body=b""):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(head + b"\r\n" + body)
                answer = b""
                while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 4 + int(
                        re.search(rb"Content-Length: (\d+)", answer).group(1)):
                    data = s.recv(65536)
                    if not data:
                        break
                    answer += data
            return int(answer.split(b" ")[1]), answer.split(b"\r\n\r\n", 1)[1]
        body = json.dumps({"q": sentences[0]}).encode()
        post = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        status, data = raw_status(post + b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % len(body) + body + b"\r\n")
        check(status == 411 and b"Content-Length" in data, f"chunked body: {status} {data!r}")
        status, data = raw_status(post + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(body), body)
        check(status == 415 and b"Content-Encoding gzip" in data, f"gzip body: {status} {data!r}")
        status, data = raw_status(post + b"Content-Length: %d\r\nContent-Length: 3\r\n" % len(body), body)
        check(status == 400 and b"invalid Content-Length" in data, f"two Content-Lengths: {status} {data!r}")
        status, data = raw_status(post + b"Content-Length: %d\r\nRange: bytes=0-5\r\n" % len(body), body)
        check(status == 200 and json.loads(data)["translatedText"] == greedy[0], f"Range on POST: {status} {data!r}")
        status, data = raw_status(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(200)))
        check(status == 431 and b"too many header fields" in data, f"200 header fields: {status} {data!r}")
        status, answer = post_json(port, "/translate", {"q": sentences[0]})
        check(status == 200 and answer["translatedText"] == greedy[0], "still serving after those")
        check(proc.poll() is None, "the server is still running")
        # A second server on the same port is refused, with one line naming the address.
        second = subprocess.run([TORCHMT, "serve", "-m", MODEL, "--port", str(port)], capture_output=True,
                                text=True, timeout=120)
        check(second.returncode != 0 and f"127.0.0.1:{port}" in second.stderr
              and len(second.stderr.strip().split("\n")) == 1, f"second server on the port: {second.stderr!r}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # 4. SIGTERM with requests in flight: each is answered, then exit 0.
    proc, port = start_server("--max-wait-ms", "1500")  # requests wait in the queue for company
    results = [None] * 8

    def slow(i):
        try:
            results[i] = post_json(port, "/v1/translate", {"q": sentences[i * 2:i * 2 + 2], "beam": 4})
        except Exception as e:  # noqa: BLE001 - any failure is a lost request
            results[i] = ("error", str(e))

    threads = [threading.Thread(target=slow, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    in_flight = 0
    while time.time() < deadline and in_flight < 8:
        _, _, data = request(port, "GET", "/metrics")
        m = re.search(r"^torchmt_requests_in_flight (\d+)$", data.decode(), re.M)
        in_flight = int(m.group(1)) if m else 0
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    check(in_flight == 8, f"requests in flight before SIGTERM: {in_flight} of 8")
    for t in threads:
        t.join()
    code = proc.wait(timeout=60)
    check(code == 0, f"exit code after SIGTERM: {code}")
    for i, r in enumerate(results):
        check(r is not None and r[0] == 200, f"request {i} in flight at SIGTERM: {r}")
        check([t["text"] for t in r[1]["translations"]] == beam4[i * 2:i * 2 + 2], f"request {i}: wrong answer")
    print("serve: both APIs = translate (paragraphs, alignments, HTML too), concurrency, caps, malformed bodies, SIGTERM with 8 in flight: ok")


if __name__ == "__main__":
    main()
