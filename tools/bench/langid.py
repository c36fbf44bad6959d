#!/usr/bin/env python3
"""Language identification: torchmt's identifier against py3langid restricted to {de, en}.

    tools/bench/langid.py [--model CKPT] [--texts test|val] [--torchmt build/torchmt]

Texts: the sentences of Multi30k test_2016 and test_2017 (--texts test; 4,000: both sides), or of
val (--texts val, 2,028: for choosing the identifier's settings; the test sets never choose), and
1-3-word snippets cut from each of them (seeded). torchmt's identifier is the model's (--model),
or one learned here from train.{de,en} as `train` learns it (`torchmt detect --learn`). Prints
accuracy for each and the time per text (torchmt: measured inside `torchmt detect`, per call;
py3langid: per classify() call, in this process)."""
import argparse
import gzip
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "data", "multi30k")


def lines(name):
    with gzip.open(os.path.join(DATA, name), "rt", encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def snippets(texts, seed):
    rng = random.Random(seed)
    out = []
    for text, lang in texts:
        words = text.split()
        if not words:
            continue
        n = min(len(words), rng.choice([1, 2, 3]))
        start = rng.randrange(len(words) - n + 1)
        out.append((" ".join(words[start:start + n]), lang))
    return out


def torchmt_detect(binary, source, texts, workdir):
    path = os.path.join(workdir, "langid_texts.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t.replace("\n", " ") + "\n" for t, _ in texts))
    r = subprocess.run([binary, "detect", *source, "-i", path], capture_output=True, text=True, check=True)
    guesses = [l.split("\t")[0] for l in r.stdout.splitlines()]
    us = float(r.stderr.split(" texts, ")[1].split(" us")[0])
    return guesses, us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--texts", choices=["test", "val"], default="test")
    ap.add_argument("--torchmt", default=os.path.join(ROOT, "build", "torchmt"))
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    sets = ["test_2016_flickr", "test_2017_flickr"] if args.texts == "test" else ["val"]
    texts = [(t, lang) for s in sets for lang in ("de", "en") for t in lines(f"{s}.{lang}.gz")]
    cut = snippets(texts, 1)
    source = ["-m", args.model] if args.model else [
        "--learn", "de=" + os.path.join(DATA, "train.de.gz"), "--learn", "en=" + os.path.join(DATA, "train.en.gz")]
    print(f"texts: {len(texts)} sentences ({args.texts}), {len(cut)} snippets of 1-3 words")
    results = {}
    for name, items in (("sentences", texts), ("snippets", cut)):
        guesses, us = torchmt_detect(args.torchmt, source, items, args.workdir)
        correct = sum(g == lang for g, (_, lang) in zip(guesses, items))
        results[("torchmt", name)] = (correct / len(items), us)
    try:
        from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
        lid = LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE)
        lid.set_languages(["de", "en"])
        for name, items in (("sentences", texts), ("snippets", cut)):
            start = time.perf_counter()
            guesses = [lid.classify(t)[0] for t, _ in items]
            us = (time.perf_counter() - start) / len(items) * 1e6
            correct = sum(g == lang for g, (_, lang) in zip(guesses, items))
            results[("py3langid", name)] = (correct / len(items), us)
    except ImportError:
        print("py3langid is not installed (pip install py3langid): torchmt only")
    for (who, name), (accuracy, us) in results.items():
        print(f"{who:10s} {name:10s} accuracy {accuracy * 100:6.2f}%  {us:7.2f} us per text")
    for name in ("sentences", "snippets"):
        if ("py3langid", name) in results:
            a, b = results[("torchmt", name)][0], results[("py3langid", name)][0]
            print(f"{name}: torchmt - py3langid = {(a - b) * 100:+.2f} points")


if __name__ == "__main__":
    sys.exit(main())
