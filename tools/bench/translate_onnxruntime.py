#!/usr/bin/env python3
"""The ONNX Runtime side of bench_translate: decodes the given SentencePiece pieces with
tools/onnx_translate.py's Translator (ONNX Runtime for the graphs, its search in numpy) on
directories written by `torchmt export --format onnx`, for each search x batch x precision.

    translate_onnxruntime.py --pieces FILE --out FILE --beams 1,5 --batch-sizes 1,64
        --model fp32=DIR [--model int8=DIR] --threads N

Output, as read by bench_translate (the same lines as translate_ctranslate2.py):
    load DTYPE SECONDS
    config BEAM BATCH DTYPE SECONDS SENTENCES TOKENS 1xTHREADS
    hyp INDEX piece piece ...
Timings exclude loading and a warm-up on four sentences.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onnx_translate  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pieces", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--beams", default="1,5")
    p.add_argument("--batch-sizes", default="1,64")
    p.add_argument("--model", action="append", required=True, help="DTYPE=DIR")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lenpen", type=float, default=0.6)
    a = p.parse_args()
    lines = [line.split() for line in open(a.pieces, encoding="utf-8").read().split("\n")[:-1]]
    todo = [i for i, s in enumerate(lines) if s]
    out = open(a.out, "w", encoding="utf-8")
    for spec in a.model:
        dtype, directory = spec.split("=", 1)
        start = time.perf_counter()
        t = onnx_translate.Translator(directory, threads=a.threads)
        out.write(f"load {dtype} {time.perf_counter() - start:.4f}\n")
        sp = t.source_sp
        rows = {i: [sp.piece_to_id(piece) for piece in lines[i]][: t.max_positions - 1] + [t.eos] for i in todo}
        for beam in map(int, a.beams.split(",")):
            for batch in map(int, a.batch_sizes.split(",")):
                order = sorted(todo, key=lambda i: -len(rows[i]))  # longest first, as torchmt batches

                def run(ids):
                    hyps = {}
                    for begin in range(0, len(ids), batch):
                        chunk = ids[begin:begin + batch]
                        found = t.greedy([rows[i] for i in chunk], 1.2, 10) if beam == 1 else \
                            t.beam([rows[i] for i in chunk], beam, a.lenpen, 1.2, 10)
                        hyps.update(zip(chunk, found))
                    return hyps

                run(order[:4])  # warm-up
                start = time.perf_counter()
                hyps = run(order)
                seconds = time.perf_counter() - start
                print(f"  onnxruntime beam {beam} batch {batch} {dtype}: {seconds:.2f} s", flush=True)
                tokens = sum(len(h) + 1 for h in hyps.values())
                out.write(f"config {beam} {batch} {dtype} {seconds:.4f} {len(hyps)} {tokens} 1x{a.threads}\n")
                target = t.target_sp
                for i in range(len(lines)):
                    pieces = [target.id_to_piece(x) for x in hyps.get(i, [])]
                    out.write(f"hyp {i} {' '.join(pieces)}\n")
    out.close()


if __name__ == "__main__":
    main()
