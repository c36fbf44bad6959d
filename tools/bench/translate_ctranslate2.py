#!/usr/bin/env python3
"""The CTranslate2 side of bench_translate: decodes the given SentencePiece pieces with
ctranslate2.Translator (PyPI) on model directories written by `torchmt export --format
ctranslate2`, for each search x batch x precision at every worker setting asked for, and
reports the fastest setting (CTranslate2 gets its best inter_threads x intra_threads).

    translate_ctranslate2.py --pieces FILE --out FILE --beams 1,5 --batch-sizes 1,64
        --model fp32=DIR [--model int8=DIR] --settings 2x1,1x2

Output, as read by bench_translate:
    load DTYPE SECONDS                                  (model directory to Translator, 1 x 1)
    config BEAM BATCH DTYPE SECONDS SENTENCES TOKENS WORKERSxTHREADS
    hyp INDEX piece piece ...                           (one per input line, best setting's run)
Timings exclude loading and a warm-up on four sentences, as bench_translate's own runs do.
"""
import argparse
import time

import ctranslate2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pieces", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--beams", default="1,5")
    p.add_argument("--batch-sizes", default="1,64")
    p.add_argument("--model", action="append", required=True, help="DTYPE=DIR")
    p.add_argument("--settings", default="2x1,1x2", help="WORKERSxTHREADS,...")
    p.add_argument("--lenpen", type=float, default=0.6)
    p.add_argument("--max-decoding-length", type=int, default=256)
    a = p.parse_args()
    lines = [line.split() for line in open(a.pieces, encoding="utf-8").read().split("\n")[:-1]]
    todo = [i for i, s in enumerate(lines) if s]
    batch_input = [lines[i] for i in todo]
    settings = [tuple(int(x) for x in s.split("x")) for s in a.settings.split(",")]
    compute = {"fp32": "float32", "int8": "int8_float32", "bf16": "bfloat16"}
    out = open(a.out, "w", encoding="utf-8")
    for spec in a.model:
        dtype, directory = spec.split("=", 1)
        start = time.perf_counter()
        ctranslate2.Translator(directory, device="cpu", compute_type=compute[dtype], inter_threads=1, intra_threads=1)
        out.write(f"load {dtype} {time.perf_counter() - start:.4f}\n")
        translators = {s: ctranslate2.Translator(directory, device="cpu", compute_type=compute[dtype],
                                                 inter_threads=s[0], intra_threads=s[1]) for s in settings}
        for beam in map(int, a.beams.split(",")):
            for batch in map(int, a.batch_sizes.split(",")):
                best = None
                for setting, translator in translators.items():
                    options = dict(beam_size=beam, max_batch_size=batch, batch_type="examples",
                                   length_penalty=a.lenpen, max_decoding_length=a.max_decoding_length)
                    translator.translate_batch(batch_input[:4], **options)  # warm-up
                    start = time.perf_counter()
                    results = translator.translate_batch(batch_input, **options)
                    seconds = time.perf_counter() - start
                    if best is None or seconds < best[0]:
                        best = (seconds, setting, results)
                    print(f"  ctranslate2 beam {beam} batch {batch} {dtype} {setting[0]}x{setting[1]}: "
                          f"{seconds:.2f} s", flush=True)
                seconds, setting, results = best
                tokens = sum(len(r.hypotheses[0]) + 1 for r in results)
                out.write(f"config {beam} {batch} {dtype} {seconds:.4f} {len(results)} {tokens} "
                          f"{setting[0]}x{setting[1]}\n")
                hyps = {i: r.hypotheses[0] for i, r in zip(todo, results)}
                for i in range(len(lines)):
                    out.write(f"hyp {i} {' '.join(hyps.get(i, []))}\n")
    out.close()


if __name__ == "__main__":
    main()
