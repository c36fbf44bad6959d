#!/usr/bin/env python3
"""The page `torchmt serve` shows, in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium) opens it, types a German sentence key by key, and waits
for the translation (which must equal `torchmt translate`'s) and the attention heatmap (an
image the browser decoded, of non-zero size). Also at a phone's width. Screenshots are kept.

    serve_browser_test.py TORCHMT MODEL [SCREENSHOT_DIR]

Exit 0 when all hold, 77 when there is no browser to drive here, 1 otherwise.
"""
import os
import subprocess
import sys
import tempfile
import time

from serve_support import chromium_and_driver, start_serve

TORCHMT, MODEL = sys.argv[1:3]
SHOTS = sys.argv[3] if len(sys.argv) > 3 else os.path.join(tempfile.gettempdir(), "torchmt-serve-screenshots")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    print("selenium is not installed (tools/setup.sh installs it)")
    sys.exit(77)

CHROMIUM, DRIVER = chromium_and_driver()
if not CHROMIUM:
    print("no chromium / chromedriver here (Debian: chromium chromium-driver; tools/setup.sh installs them)")
    sys.exit(77)


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    sentence = "Ein Hund läuft über die Wiese."
    want = subprocess.run([TORCHMT, "translate", "-m", MODEL, "--beam", "5"], input=sentence + "\n",
                          capture_output=True, text=True, check=True).stdout.rstrip("\n")
    proc, port = start_serve([TORCHMT, "serve", "-m", MODEL, "--port", "0"])
    check(proc, "the server did not start")
    os.makedirs(SHOTS, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900"):
        options.add_argument(arg)
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
        for width, height, name in ((1200, 900, "desktop"), (390, 844, "phone")):
            driver.set_window_size(width, height)
            driver.get(f"http://127.0.0.1:{port}/")
            box = driver.find_element(By.ID, "source")
            for ch in sentence:  # typed key by key, as a person does
                box.send_keys(ch)
                time.sleep(0.01)
            WebDriverWait(driver, 60).until(
                lambda d: d.find_element(By.ID, "target").text.strip() == want
                and d.execute_script(
                    "const i = document.getElementById('heatmap-image');"
                    "return i !== null && i.complete && i.naturalWidth > 0;"))
            target = driver.find_element(By.ID, "target").text.strip()
            check(target == want, f"{name}: page shows {target!r}, translate gives {want!r}")
            size = driver.execute_script(
                "const i = document.getElementById('heatmap-image'); return [i.naturalWidth, i.clientWidth];")
            check(size[0] > 50 and size[1] > 0, f"{name}: heatmap size {size}")
            # Every word carries its confidence; a random model's words are all doubtful, and marked.
            rated = driver.execute_script(
                "const s = document.querySelectorAll('#target span');"
                "return [s.length, document.querySelectorAll('#target span.doubt').length,"
                "        s.length ? s[0].title : ''];")
            check(rated[0] == len(want.split()) and rated[1] == rated[0] and rated[2].startswith("confidence "),
                  f"{name}: words with their confidence: {rated}")
            links = driver.execute_script("return document.getElementById('alignment').rows.length;")
            check(links > 0, f"{name}: no word alignment beside the heatmap")
            # Nothing wider than the screen on a phone: the page scrolls only vertically.
            overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth;")
            check(overflow <= 1, f"{name}: the page is {overflow}px wider than the window")
            shot = os.path.join(SHOTS, f"serve-{name}.png")
            driver.save_screenshot(shot)
            check(os.path.getsize(shot) > 1000, f"{name}: screenshot {shot}")
            print(f"{name}: translation and heatmap shown; screenshot {shot}")
        # HTML input: the translation keeps the markup (shown as text, never rendered).
        driver.find_element(By.ID, "html").click()
        box = driver.find_element(By.ID, "source")
        box.clear()
        box.send_keys('<p>Guten <b>Morgen</b>!</p><p class="x">Wie geht es?</p>')
        WebDriverWait(driver, 60).until(
            lambda d: d.find_element(By.ID, "target").text.strip().startswith("<p>")
            and '<p class="x">' in d.find_element(By.ID, "target").text)
        shown = driver.find_element(By.ID, "target").text.strip()
        check(shown.count("<b>") == 1 and shown.count("</b>") == 1 and shown.endswith("</p>"), f"HTML input: {shown!r}")
        print("HTML input: translated with its markup")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        check(not errors, f"console errors: {errors}")
    finally:
        if driver:
            driver.quit()
        proc.terminate()
        proc.wait(timeout=60)
    print("serve page: typed sentence translated and heatmap drawn in headless Chromium: ok")


if __name__ == "__main__":
    main()
