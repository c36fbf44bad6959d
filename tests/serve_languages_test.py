#!/usr/bin/env python3
"""`torchmt serve` as a LibreTranslate operator runs it: both directions in one server, language
detection, API keys and limits, and LibreTranslate's other endpoints.

    serve_languages_test.py TORCHMT DEEN_MODEL ENDE_MODEL WORKDIR BOTH_MODEL

The two models record their languages (de->en, en->de) and an identifier; the server is started
with no language flags. BOTH_MODEL records de->en trained on both directions: alone it serves
both pairs. Exit 0 when all hold; prints the first failure otherwise."""
import http.client
import json
import os
import subprocess
import sys
import threading
import urllib.parse

from serve_support import start_serve

TORCHMT, DEEN, ENDE, WORK, BOTH = sys.argv[1:6]
GERMAN = ["Ein Mann fährt mit dem Fahrrad über eine Brücke.", "Zwei Hunde spielen im Schnee."]
ENGLISH = ["A woman is walking her dog in the park.", "The children are playing outside."]


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def start(*args):
    proc, port = start_serve([TORCHMT, "serve", "--port", "0", "--threads", "2", *args])
    check(proc, "the server did not start: " + " ".join(args))
    return proc, port


def stop(proc):
    proc.terminate()
    check(proc.wait(timeout=60) == 0, "the server exits 0 on SIGTERM")


def call(port, method, path, body=None, form=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {}
    if body is not None:
        if form:
            body = urllib.parse.urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif not isinstance(body, (str, bytes)):
            body = json.dumps(body)
            headers["Content-Type"] = "application/json"
        else:
            headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body.encode("utf-8") if isinstance(body, str) else body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    retry = r.getheader("Retry-After")
    conn.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    return r.status, parsed, retry


def upload(port, name, content, fields, path="/translate_file"):
    """POST a browser's multipart form (FormData): `fields`, and a file `name` unless it is None."""
    boundary = "torchmt-test-boundary"
    parts = []
    for key, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode())
    if name is not None:
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                     f'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, body=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    r = conn.getresponse()
    answer = r.read()
    conn.close()
    return r.status, json.loads(answer), None


def fetch(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def translate_cli(model, lines, *flags):
    path = os.path.join(WORK, "in.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    r = subprocess.run([TORCHMT, "translate", "-m", model, "-q", "-i", path, "--threads", "1", *flags],
                       capture_output=True, text=True, check=True)
    return r.stdout.splitlines()


def reranking():
    """Beams reranked with the reverse direction: by the served model of the other pair (a request's
    reverse_weight), by the model itself when it knows both directions (the server's --reverse-weight,
    LibreTranslate's API too), each as `translate --reverse-weight` ranks and scores them."""
    beam = ["--beam", "3", "--lenpen", "1.0"]
    nbest = [tuple(l.split(" ||| ")) for l in
             translate_cli(DEEN, GERMAN, *beam, "--nbest", "3", "--reverse-weight", "0.5", "--reverse-model", ENDE)]
    plain = translate_cli(DEEN, GERMAN, *beam, "--nbest", "3")
    proc, port = start("-m", DEEN, "-m", ENDE, *beam)
    try:
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN, "source": "de", "target": "en", "nbest": 3,
                                                              "scores": True, "reverse_weight": 0.5})
        check(status == 200, f"/v1 reverse_weight: {status} {out}")
        got = [(i, h["text"], h["score"]) for i, t in enumerate(out["translations"])
               for h in t["sentences"][0]["hypotheses"]]
        check(len(got) == len(nbest) == len(plain) and
              all(g[0] == int(w[0]) and g[1] == w[1] and abs(g[2] - float(w[2])) < 1e-3 for g, w in zip(got, nbest)),
              f"/v1 reranked by the en->de model as the CLI: {got} vs {nbest}")
        check(all(abs(g[2] - float(p.split(" ||| ")[2])) > 1e-3 for g, p in zip(got, plain)),
              "the reranked scores are not the plain beam's")
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN[0], "beam": 1, "reverse_weight": 0.5,
                                                              "source": "de", "target": "en"})
        check(status == 400 and "beam 2 or more" in out["error"], f"reverse_weight with a greedy request: {out}")
    finally:
        stop(proc)
    proc, port = start("-m", DEEN, *beam)
    try:
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN[0], "reverse_weight": 0.5})
        check(status == 400 and "no model translating the other way" in out["error"], f"no reverse served: {out}")
    finally:
        stop(proc)
    r = subprocess.run([TORCHMT, "serve", "-m", DEEN, "--reverse-weight", "0.5", *beam, "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and "has no reverse model" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"--reverse-weight with no reverse model: {r.returncode} {r.stderr}")
    r = subprocess.run([TORCHMT, "serve", "-m", DEEN, "--reverse-weight", "0.5", "--reverse-model", DEEN, *beam,
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and "translates de to en, not en to de" in r.stderr,
          f"a --reverse-model of the same direction: {r.returncode} {r.stderr}")
    want = translate_cli(BOTH, GERMAN, *beam, "--reverse-weight", "0.5")
    proc, port = start("-m", BOTH, *beam, "--reverse-weight", "0.5")
    try:
        status, out, _ = call(port, "POST", "/translate", {"q": GERMAN, "source": "de", "target": "en"})
        check(status == 200 and out["translatedText"] == want, f"LibreTranslate's API reranked by the model itself: {out}")
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN, "beam": 1, "source": "de", "target": "en"})
        check(status == 200 and [t["text"] for t in out["translations"]] == translate_cli(BOTH, GERMAN),
              f"a greedy request is not reranked: {out}")
    finally:
        stop(proc)


def both_directions():
    """One model trained on both directions serves de->en and en->de from the same weights."""
    for flags in ([], ["--source-language", "en", "--target-language", "de"]):
        proc, port = start("-m", BOTH, *flags)
        try:
            status, langs, _ = call(port, "GET", "/languages")
            check(status == 200 and langs == [{"code": "de", "name": "German", "targets": ["en"]},
                                              {"code": "en", "name": "English", "targets": ["de"]}],
                  f"both directions {flags}: /languages: {langs}")
            status, health, _ = call(port, "GET", "/v1/health")
            check(status == 200 and [(m["source_language"], m["target_language"]) for m in health["models"]] ==
                  [("de", "en"), ("en", "de")], f"/v1/health lists the model once a direction: {health}")
            want_de, want_en = translate_cli(BOTH, GERMAN), translate_cli(BOTH, ENGLISH)
            status, out, _ = call(port, "POST", "/translate", {"q": ENGLISH, "source": "en", "target": "de"})
            check(status == 200 and out["translatedText"] == want_en, f"en->de by the one model: {out}")
            status, out, _ = call(port, "POST", "/translate", {"q": GERMAN[0], "source": "auto", "target": "en"})
            check(status == 200 and out["translatedText"] == want_de[0], f"auto, de->en by the one model: {out}")
        finally:
            stop(proc)
    r = subprocess.run([TORCHMT, "serve", "-m", BOTH, "-m", ENDE, "--port", "0"], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 2 and "two models translate en to de" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"a second en->de model beside one of both directions: {r.returncode} {r.stderr}")


def main():
    both_directions()
    reranking()
    proc, port = start("-m", DEEN, "-m", ENDE)
    try:
        status, langs, _ = call(port, "GET", "/languages")
        check(status == 200 and langs == [{"code": "de", "name": "German", "targets": ["en"]},
                                          {"code": "en", "name": "English", "targets": ["de"]}], f"/languages: {langs}")
        check(call(port, "GET", "/health")[1] == {"status": "ok"}, "/health is LibreTranslate's")
        status, health, _ = call(port, "GET", "/v1/health")
        check(status == 200 and len(health["models"]) == 2, "/v1/health lists both models")
        # Each direction is its own model: the answers are what `translate` gives with it.
        want_de_en, want_en_de = translate_cli(DEEN, GERMAN), translate_cli(ENDE, ENGLISH)
        status, out, _ = call(port, "POST", "/translate", {"q": GERMAN, "source": "de", "target": "en"})
        check(status == 200 and out["translatedText"] == want_de_en, f"de->en routed to its model: {out}")
        status, out, _ = call(port, "POST", "/translate", {"q": ENGLISH[0], "source": "en", "target": "de"}, form=True)
        check(status == 200 and out["translatedText"] == want_en_de[0], f"en->de routed to its model: {out}")
        # LibreTranslate's own page sends FormData (multipart), alternatives 3 included.
        status, out, _ = upload(port, None, None, {"q": GERMAN[0], "source": "de", "target": "en", "format": "text",
                                                   "alternatives": 3, "api_key": ""}, path="/translate")
        check(status == 200 and len(out["alternatives"]) <= 3, f"/translate as a multipart form: {status} {out}")
        status, out, _ = upload(port, None, None, {"q": GERMAN[1]}, path="/detect")
        check(status == 200 and out[0]["language"] == "de", f"/detect as a multipart form: {out}")
        # "auto": each text of a list routed by its own language; one already in the target comes back as is.
        mixed = [GERMAN[0], ENGLISH[0], GERMAN[1]]
        status, out, _ = call(port, "POST", "/translate", {"q": mixed, "source": "auto", "target": "en"})
        check(status == 200, f"auto: {status} {out}")
        check(out["translatedText"] == [want_de_en[0], ENGLISH[0], want_de_en[1]], f"auto routes text by text: {out}")
        check([d["language"] for d in out["detectedLanguage"]] == ["de", "en", "de"], f"detectedLanguage: {out}")
        check(all(50 < d["confidence"] <= 100 for d in out["detectedLanguage"]), "confidences are percents")
        status, out, _ = call(port, "POST", "/translate", {"q": ENGLISH[0], "source": "auto", "target": "de"})
        check(status == 200 and out["translatedText"] == want_en_de[0] and out["detectedLanguage"]["language"] == "en",
              f"auto, one text: {out}")
        status, out, _ = call(port, "POST", "/translate", {"q": "x", "source": "de", "target": "de"})
        check(status == 400 and out["error"] == "German (de) is not available as a target language from German (de)",
              f"a pair nobody serves: {out}")
        status, out, _ = call(port, "POST", "/translate", {"q": "x", "source": "auto"})
        check(status == 400 and out["error"] == "Invalid request: missing target parameter", f"which target: {out}")
        # /detect, as LibreTranslate answers it.
        status, out, _ = call(port, "POST", "/detect", {"q": GERMAN[1]}, form=True)
        check(status == 200 and out[0]["language"] == "de" and len(out) == 2, f"/detect: {out}")
        check(call(port, "GET", "/detect")[0] == 405, "GET /detect is a 405")
        for body in ["", "{", '{"q": 5}', '{"q": []}', b"\xff\xfe", '{"q": "' + "a" * 100 + '"}']:
            status, out, _ = call(port, "POST", "/detect", body)
            check(status in (200, 400, 415) and out is not None, f"/detect of {body!r}: {status}")
        check(call(port, "POST", "/suggest", {"q": "a", "s": "b", "source": "de", "target": "en"})[0] == 403, "/suggest off")
        # /translate_file: a .txt file's lines and blank lines kept, each line as /translate gives it.
        text = GERMAN[0] + "\n\n" + GERMAN[1] + "\n"
        status, out, _ = upload(port, "notes.txt", text, {"source": "de", "target": "en"})
        check(status == 200 and "/download_file/" in out["translatedFileUrl"], f"/translate_file: {status} {out}")
        path = out["translatedFileUrl"].split(str(port), 1)[1]
        status, data = fetch(port, path)
        check(status == 200 and data.decode("utf-8") == want_de_en[0] + "\n\n" + want_de_en[1] + "\n",
              f"the translated file keeps its layout: {data!r}")
        check(path.endswith("/notes.en.txt"), f"its name: {path}")
        status, out, _ = upload(port, "page.html", "<p>" + GERMAN[1] + "</p>", {"source": "de", "target": "en"})
        status, data = fetch(port, out["translatedFileUrl"].split(str(port), 1)[1])
        check(status == 200 and data.decode("utf-8").startswith("<p>") and data.decode("utf-8").endswith("</p>"),
              f"an HTML file keeps its markup: {data!r}")
        for name, content, fields, message in (
                ("a.pdf", "x", {"source": "de", "target": "en"}, "Invalid request: file format not supported"),
                ("a.txt", "", {"source": "de", "target": "en"}, "Invalid request: empty file"),
                ("a.txt", "x", {"target": "en"}, "Invalid request: missing source parameter"),
                ("a.txt", "x", {"source": "de", "target": "zz"}, "zz is not supported"),
                ("a.txt", b"\xff\xfe", {"source": "de", "target": "en"}, "Invalid request: the file is not UTF-8 text")):
            status, out, _ = upload(port, name, content, fields)
            check(status == 400 and out["error"] == message, f"/translate_file {name} {fields}: {status} {out}")
        check(call(port, "POST", "/translate_file", {"source": "de"})[1]["error"] == "Invalid request: missing file parameter",
              "/translate_file without a file")
        check(fetch(port, "/download_file/" + "0" * 32 + "/notes.en.txt")[0] == 404, "an unknown file")
        status, spec, _ = call(port, "GET", "/spec")
        check(status == 200 and "/translate" in spec["paths"], "/spec")
        status, settings, _ = call(port, "GET", "/frontend/settings")
        check(status == 200 and settings["language"]["source"]["code"] == "de", f"/frontend/settings: {settings}")
        # libretranslatepy, LibreTranslate's Python client, unchanged (where it is installed: tools/setup.sh).
        try:
            from libretranslatepy import LibreTranslateAPI
        except ImportError:
            LibreTranslateAPI = None
        if LibreTranslateAPI is not None:
            lt = LibreTranslateAPI(f"http://127.0.0.1:{port}/")
            check([l["code"] for l in lt.languages()] == ["de", "en"], "libretranslatepy: languages")
            check(lt.detect(GERMAN[0])[0]["language"] == "de", "libretranslatepy: detect")
            check(lt.translate(GERMAN[0], "de", "en") == want_de_en[0], "libretranslatepy: translate de->en")
            check(lt.translate(ENGLISH[0], "en", "de") == want_en_de[0], "libretranslatepy: translate en->de")
        # /v1 with two directions needs to be told which.
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN[0]})
        check(status == 400, "/v1 without a direction")
        status, out, _ = call(port, "POST", "/v1/translate", {"q": GERMAN[0], "source": "de", "target": "en"})
        check(status == 200 and out["translations"][0]["text"] == want_de_en[0], f"/v1 routed: {out}")
    finally:
        stop(proc)

    # Operator controls: keys (one with its own limit), a limit per address, text limits.
    keys = os.path.join(WORK, "keys.txt")
    with open(keys, "w") as f:
        f.write("# keys\nopen-sesame-0001\nlimited-key-0002 2\n")
    proc, port = start("-m", DEEN, "--api-keys", keys, "--require-api-key", "--req-limit", "100",
                       "--char-limit", "60", "--batch-limit", "2")
    try:
        body = {"q": GERMAN[0], "source": "de", "target": "en"}
        status, out, _ = call(port, "POST", "/translate", body)
        check(status == 403 and out["error"] == "Please contact the server operator to get an API key", f"no key: {out}")
        status, out, _ = call(port, "POST", "/translate", dict(body, api_key="open-sesame-0000"))
        check(status == 403 and out["error"] == "Invalid API key", f"unknown key: {out}")
        check(call(port, "POST", "/translate", dict(body, api_key="open-sesame-0001"))[0] == 200, "a key")
        check(call(port, "POST", "/detect", {"q": "Hallo", "api_key": "open-sesame-0001"}, form=True)[0] == 200, "detect with a key")
        codes = [call(port, "POST", "/translate", dict(body, api_key="limited-key-0002")) for _ in range(3)]
        check([c[0] for c in codes] == [200, 200, 429] and int(codes[2][2]) >= 1, f"a key's limit: {codes}")
        check(codes[2][1]["error"].startswith("Slowdown:"), "429's message")
        status, out, _ = call(port, "POST", "/translate", dict(body, q="x" * 61, api_key="open-sesame-0001"))
        check(status == 400 and out["error"] == "Invalid request: request (61) exceeds text limit (60)", f"{out}")
        status, out, _ = call(port, "POST", "/v1/translate", {"q": "x" * 61, "api_key": "open-sesame-0001"})
        check(status == 400 and out["error"] == "Invalid request: request (61) exceeds text limit (60)", f"v1: {out}")
        status, out, _ = call(port, "POST", "/translate", dict(body, q=["a", "b", "c"], api_key="open-sesame-0001"))
        check(status == 400 and out["error"] == "Invalid request: request (3) exceeds text limit (2)", f"{out}")
        status, settings, _ = call(port, "GET", "/frontend/settings")
        check(settings["charLimit"] == 60 and settings["apiKeys"] and settings["keyRequired"], f"{settings}")
        check(upload(port, "a.txt", "Hallo", {"source": "de", "target": "en"})[0] == 403, "/translate_file needs a key too")
    finally:
        stop(proc)
    # The per-address limit with 16 clients at once: exactly the limit passes.
    proc, port = start("-m", DEEN, "--req-limit", "20", "--disable-files-translation")
    try:
        status, out, _ = upload(port, "a.txt", "Hallo", {"source": "de", "target": "en"})
        check(status == 403 and out["error"] == "Files translation are disabled on this server.", f"files off: {out}")
        results = []
        lock = threading.Lock()

        def client():
            for _ in range(3):
                status = call(port, "POST", "/detect", {"q": "Hallo Welt"})[0]
                with lock:
                    results.append(status)
        threads = [threading.Thread(target=client) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(results.count(200) in (19, 20, 21) and results.count(429) == 48 - results.count(200),
              f"16 clients under --req-limit 20: {results.count(200)} passed")
    finally:
        stop(proc)
    for bad in (["--api-keys", "/nonexistent/keys"], ["--require-api-key"], ["--req-limit", "0"],
                ["--char-limit", "-5"], ["--source-language", "fr", "--target-language", "en"]):
        r = subprocess.run([TORCHMT, "serve", "-m", DEEN, "--port", "0", *bad], capture_output=True, text=True,
                           timeout=120)
        want = 1 if bad[0] == "--api-keys" else 2  # a missing file is a failure, a wrong flag a usage error
        check(r.returncode == want and len(r.stderr.strip().splitlines()) == 1, f"serve {bad}: {r.returncode} {r.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
