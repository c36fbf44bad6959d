#!/usr/bin/env python3
"""Generated-input campaign for `torchmt translate`: N generated inputs (random bytes, control
characters, invalid UTF-8, 2,000-word lines, CR-only lines, blanks, no final newline, NULs),
each translated by its own `torchmt translate` process. Counts crashes (killed by a signal),
hangs (over --timeout), lost lines (output lines != input lines) and failed jobs (non-zero
exit). Exits 1 if any is non-zero.
    tools/input_campaign.py [--n 1000] [--model CKPT] [--torchmt build/torchmt]
Without --model it trains a tiny model on data/sample.* first (a few seconds)."""
import argparse
import os
import random
import subprocess
import sys
import tempfile


def generate(rng):
    kind = rng.randrange(8)
    lines = []
    for _ in range(rng.randint(1, 12)):
        k = kind if rng.random() < 0.7 else rng.randrange(8)
        if k == 0:
            lines.append(bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))).replace(b"\n", b""))
        elif k == 1:
            lines.append(bytes(rng.choice(list(range(1, 32)) + [127]) for _ in range(rng.randint(1, 50))).replace(b"\n", b""))
        elif k == 2:
            lines.append(b"Ein Mann " + bytes([rng.choice([0xff, 0xfe, 0xc3, 0xe2, 0xed, 0xf4])]) + b" im Park.")
        elif k == 3:
            lines.append(b" ".join(rng.choice([b"Haus", b"Hund", b"der", b"ein", b"spielt", b"\xc3\xa4rger"])
                                   for _ in range(2000)))
        elif k == 4:
            lines.append(b"\r" * rng.randint(1, 3))
        elif k == 5:
            lines.append(b" \t " * rng.randint(0, 3))
        elif k == 6:
            lines.append(b"Zwei Kinder\x00spielen.")
        else:
            lines.append("Eine Frau liest ein Buch am Strand. 😀 ÄÖÜ ß".encode())
    data = b"\n".join(lines)
    if rng.random() < 0.8:
        data += b"\n"
    return data


def count_lines(data):
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--model")
    p.add_argument("--torchmt", default="build/torchmt")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as work:
        model = args.model
        if not model:
            subprocess.run([args.torchmt, "vocab", "--src", "data/sample.de", "--tgt", "data/sample.en", "--out",
                            f"{work}/spm", "--vocab-size", "400"], check=True, capture_output=True)
            subprocess.run([args.torchmt, "train", "--train-src", "data/sample.de", "--train-tgt", "data/sample.en",
                            "--spm", f"{work}/spm.model", "--preset", "tiny", "--device", "cpu", "--threads", "1",
                            "--max-steps", "30", "--out", f"{work}/run"], check=True, capture_output=True)
            model = f"{work}/run/checkpoint_last.pt"
        crashes = hangs = lost = failed = 0
        for i in range(args.n):
            data = generate(rng)
            src, out = f"{work}/in.txt", f"{work}/out.txt"
            with open(src, "wb") as f:
                f.write(data)
            try:
                r = subprocess.run([args.torchmt, "translate", "-m", model, "-i", src, "-o", out, "--threads", "1"],
                                   capture_output=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                hangs += 1
                print(f"input {i}: hang", file=sys.stderr)
                continue
            if r.returncode < 0:
                crashes += 1
                print(f"input {i}: killed by signal {-r.returncode}", file=sys.stderr)
            elif r.returncode != 0:
                failed += 1
                print(f"input {i}: exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[:200]}",
                      file=sys.stderr)
            else:
                with open(out, "rb") as f:
                    got = count_lines(f.read())
                if got != count_lines(data):
                    lost += 1
                    print(f"input {i}: {count_lines(data)} lines in, {got} out", file=sys.stderr)
        print(f"input_campaign: {args.n} inputs: {crashes} crashes, {hangs} hangs, {lost} with lost lines, "
              f"{failed} failed jobs")
        sys.exit(1 if crashes or hangs or lost or failed else 0)


if __name__ == "__main__":
    main()
