#!/usr/bin/env python3
"""Corpus cleaning (issue 76 part 4): Multi30k train with 20% of its pairs corrupted (their targets
shuffled among each other; half of those then truncated to their first half or replaced by the
pair's own source-language text), filtered by `torchmt filter`; prints the share of corrupted
pairs removed (goal >= 90%) and of clean pairs dropped (goal <= 5%).

Three thresholds: `--reference-src/--reference-tgt` val (the command's own: the 0.95 quantile of the clean
validation set's dual scores, no knowledge of the noise, with its length bounds: the pairs its --dropped
lists), and from the same scores alone --max-score at their 99th percentile and --keep-fraction 0.8 (an
oracle that knows the noise rate). The command's run also takes --realign: the
pairs it re-paired are counted by whether each source got its own target back (kept.de/kept.en hold them).

--contrast scores each side against another pair's (`filter --contrast`). With --clean FLAGS there are no trusted models: `torchmt clean` trains them on the corrupted corpus itself,
cross-fitted (each half scored by models trained on the other), with FLAGS for the trainings (contrasted
unless FLAGS say --contrast=false).

  tools/bench/filter_noise.py DEEN.pt ENDE.pt [--data data/multi30k] [--build build] [--keep DIR] [--contrast]
  tools/bench/filter_noise.py - - --clean "--recipe multi30k-15min --max-minutes 0 --max-steps 1500" --keep DIR
"""
import argparse
import gzip
import os
import random
import subprocess
import sys
import tempfile


def lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(r + "\n" for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("deen")
    ap.add_argument("ende")
    ap.add_argument("--data", default="data/multi30k")
    ap.add_argument("--build", default="build")
    ap.add_argument("--keep", help="keep the corrupted corpus and the filtered one here")
    ap.add_argument("--clean", metavar="FLAGS",
                    help="no trusted models (give DEEN and ENDE as -): run `torchmt clean` with these training flags "
                         "(e.g. \"--recipe multi30k-15min --max-steps 1500\") and --realign on the corrupted corpus, "
                         "its models trained on it, cross-fitted, in KEEP/clean (a finished run's are reused)")
    ap.add_argument("--contrast", action="store_true", help="the trusted models' filter with --contrast")
    ap.add_argument("--corpus-only", action="store_true",
                    help="write the corrupted corpus (noisy.de, noisy.en, noisy.labels) to --keep and stop: to train "
                         "the filter's models on the noisy data itself (the fair test), give DEEN and ENDE as -")
    args = ap.parse_args()
    if args.corpus_only and not args.keep:
        ap.error("--corpus-only needs --keep DIR")
    tm = os.path.join(args.build, "torchmt")
    de, en = lines(f"{args.data}/train.de.gz"), lines(f"{args.data}/train.en.gz")
    rng = random.Random(76)
    n = len(de)
    bad = sorted(rng.sample(range(n), n // 5))
    shuffled = bad[1:] + bad[:1]  # a derangement: every chosen pair gets another's target
    noisy_en = list(en)
    for i, j in zip(bad, shuffled):
        noisy_en[i] = en[j]
    kinds = {i: "shuffled" for i in bad}
    for k, i in enumerate(rng.sample(bad, len(bad) // 2)):
        if k % 2 == 0:
            words = noisy_en[i].split()
            noisy_en[i] = " ".join(words[: max(1, len(words) // 2)])
            kinds[i] = "shuffled+truncated"
        else:
            noisy_en[i] = de[i]
            kinds[i] = "source copy"
    work = args.keep or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    write(f"{work}/noisy.de", de)
    write(f"{work}/noisy.en", noisy_en)
    write(f"{work}/noisy.labels", ["clean" if i not in kinds else kinds[i] for i in range(n)])
    if args.corpus_only:
        print(f"files: {work}")
        return 0
    if args.clean:
        return clean_run(args, tm, work, de, en, noisy_en, kinds)
    common = [tm, "filter", "-m", args.deen, "--backward-model", args.ende, "-q", "--dtype", "fp32"]
    if args.contrast:
        common.append("--contrast")

    # The threshold from clean held-out pairs: the 99th percentile of the validation set's scores.
    vde, ven = f"{work}/val.de", f"{work}/val.en"
    write(vde, lines(f"{args.data}/val.de.gz"))
    write(ven, lines(f"{args.data}/val.en.gz"))
    subprocess.run(common + ["--src", vde, "--tgt", ven, "--kept-src", f"{work}/v.kept.de", "--kept-tgt",
                             f"{work}/v.kept.en", "--keep-fraction", "1", "--scores", f"{work}/val.scores"],
                   check=True)
    val_scores = sorted(float(r.split("\t")[0]) for r in open(f"{work}/val.scores") if r.split("\t")[0])
    threshold = val_scores[int(0.99 * (len(val_scores) - 1))]

    # One run of the command with the validation set as its reference (--max-score: the default 0.95
    # quantile of its pairs' scores): its kept files and every pair's scores; the val p99 and the
    # oracle's cuts from the same scores.
    proc = subprocess.run(common + ["--src", f"{work}/noisy.de", "--tgt", f"{work}/noisy.en", "--kept-src",
                                    f"{work}/kept.de", "--kept-tgt", f"{work}/kept.en", "--scores", f"{work}/noisy.scores",
                                    "--dropped", f"{work}/dropped.tsv",
                                    "--reference-src", vde, "--reference-tgt", ven, "--realign", "--realigned",
                                    f"{work}/realigned.tsv"], check=True, capture_output=True, text=True)
    said = [line for line in proc.stderr.strip().splitlines() if line.startswith("filter: ")]
    print("\n".join(said))
    reference = float(said[0].split("--max-score ")[1].split(",")[0])
    scores = [r.rstrip("\n").split("\t")[0] for r in open(f"{work}/noisy.scores")]
    ordered = sorted(float(x) for x in scores if x)
    oracle = ordered[int(0.8 * len(ordered)) - 1]
    print(f"--reference-src val (the 0.95 quantile, {reference}; the command's --dropped):")
    removed_by_kind(kinds, n, kept_by_command(work, n))
    for name, cut in ((f"--max-score {threshold:.6f} (val p99, the scores alone)", float(f"{threshold:.6f}")),
                      (f"--keep-fraction 0.8 (oracle: score <= {oracle:.4f}, the scores alone)", oracle)):
        kept = [x != "" and float(x) <= cut for x in scores]
        print(f"{name}:")
        removed_by_kind(kinds, n, kept)
    print_realigned(work, de, en, noisy_en, kinds)
    print(f"files: {work}")


def kept_by_command(work, n):
    """Whether each line stayed at its own target: the lines the command's dropped TSV does not list."""
    kept = [True] * n
    for row in open(f"{work}/dropped.tsv", encoding="utf-8"):
        kept[int(row.split("\t")[0]) - 1] = False
    return kept


def removed_by_kind(kinds, n, kept):
    """The corrupted pairs removed and the clean ones dropped, as the goals count them."""
    removed = {}
    for i in range(n):
        kind = kinds.get(i, "clean")
        total, gone = removed.get(kind, (0, 0))
        removed[kind] = (total + 1, gone + (0 if kept[i] else 1))
    corrupt_total = sum(t for k, (t, g) in removed.items() if k != "clean")
    corrupt_gone = sum(g for k, (t, g) in removed.items() if k != "clean")
    clean_total, clean_gone = removed["clean"]
    print(f"  corrupted removed {corrupt_gone}/{corrupt_total} = {100 * corrupt_gone / corrupt_total:.1f}%"
          f" (goal >= 90%); clean dropped {clean_gone}/{clean_total} = {100 * clean_gone / clean_total:.2f}%"
          f" (goal <= 5%)")
    for kind in ("shuffled", "shuffled+truncated", "source copy"):
        t, g = removed[kind]
        print(f"  {kind}: removed {g}/{t} = {100 * g / t:.1f}%")


def clean_run(args, tm, work, de, en, noisy_en, kinds):
    """`torchmt clean` on the corrupted corpus: the pairs it kept are those its dropped TSV does not list."""
    vde, ven = f"{args.data}/val.de.gz", f"{args.data}/val.en.gz"
    proc = subprocess.run([tm, "clean", "--src", f"{work}/noisy.de", "--tgt", f"{work}/noisy.en", "--kept-src",
                           f"{work}/kept.de", "--kept-tgt", f"{work}/kept.en", "--dropped", f"{work}/dropped.tsv",
                           "--scores", f"{work}/noisy.scores", "--valid-src", vde, "--valid-tgt", ven, "--realign",
                           "--realigned", f"{work}/realigned.tsv", "--out", f"{work}/clean"] + args.clean.split(),
                          capture_output=True, text=True)
    said = [line for line in proc.stderr.strip().splitlines() if line.startswith("clean: ")]
    if proc.returncode != 0:
        sys.exit(proc.stderr.strip().splitlines()[-1])
    print("\n".join(line for line in said if "fold" not in line or "quantile" in line or "kept" in line))
    print("torchmt clean (each part's own models; the pairs its --dropped does not list):")
    removed_by_kind(kinds, len(de), kept_by_command(work, len(de)))
    print_realigned(work, de, en, noisy_en, kinds)
    print(f"files: {work}")
    return 0


def print_realigned(work, de, en, noisy_en, kinds):
    own = half = other = 0
    for row in open(f"{work}/realigned.tsv"):
        i, j = (int(x) - 1 for x in row.split("\t")[:2])
        if noisy_en[j] == en[i]:
            own += 1
        elif kinds.get(j) == "shuffled+truncated" and en[i].startswith(noisy_en[j]):
            half += 1
        else:
            other += 1
    print(f"--realign: {own + half + other} dropped sources re-paired: {own} with their own target, {half} with its "
          f"first half, {other} with another; kept.de/kept.en hold "
          f"{sum(1 for _ in open(f'{work}/kept.de'))} pairs")


if __name__ == "__main__":
    sys.exit(main())
