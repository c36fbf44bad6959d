#!/usr/bin/env python3
"""Carry a torchmt checkpoint through a size-limited channel (the device tool returns at most
64 MiB in files of 16 MiB): `pack` stores each 2-D weight as int8 rows with one fp32 scale per
row (1-D tensors stay fp32, a tied weight is stored once) and splits the result into chunks; `unpack` joins the chunks and writes
a torchmt checkpoint of the dequantized fp32 weights (torchmt reads it as an unsealed checkpoint).
The weights come back within 1/254 of each row's largest value; say so where figures use them.

  weights_transfer.py pack CHECKPOINT OUT_DIR [--chunk-mib 15]
  weights_transfer.py unpack IN_DIR CHECKPOINT
"""
import argparse
import glob
import io
import os
import sys

import torch


def pack(checkpoint, out_dir, chunk_mib):
    d = torch.load(checkpoint, map_location="cpu", weights_only=False)
    d.pop("optimizer", None)
    d.pop("rng", None)
    packed, first = {}, {}
    for name, w in d["model"].items():
        # A tied weight is stored once: one storage, or (checkpoints written from a GPU before
        # torchmt wrote one host copy per tensor) equal copies.
        same = [n for n, t in first.items() if t.data_ptr() == w.data_ptr() or
                (t.shape == w.shape and "embedding" in n + name and torch.equal(t, w))]
        if same:
            packed[name] = ("alias", same[0], None)
            continue
        first[name] = w
        w = w.float()
        if w.dim() == 2:
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            packed[name] = ("int8", torch.round(w / scale).to(torch.int8), scale)
        else:
            packed[name] = ("fp32", w, None)
    d["model"] = packed
    buf = io.BytesIO()
    torch.save(d, buf)
    data = buf.getvalue()
    os.makedirs(out_dir, exist_ok=True)
    size = chunk_mib << 20
    for i in range(0, len(data), size):
        with open(os.path.join(out_dir, "weights.part%02d" % (i // size)), "wb") as f:
            f.write(data[i:i + size])
    print("packed %s: %d tensors, %.1f MiB in %d chunks" % (checkpoint, len(packed), len(data) / 2**20,
                                                           (len(data) + size - 1) // size))


def unpack(in_dir, checkpoint):
    parts = sorted(glob.glob(os.path.join(in_dir, "weights.part*")))
    if not parts:
        sys.exit("no weights.part* files in " + in_dir)
    data = b"".join(open(p, "rb").read() for p in parts)
    d = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    model = {}
    for name, (kind, w, scale) in d["model"].items():
        if kind != "alias":
            model[name] = (w.float() * scale) if kind == "int8" else w
    for name, (kind, w, _) in d["model"].items():
        if kind == "alias":
            model[name] = model[w]
    d["model"] = model
    torch.save(d, checkpoint)
    print("unpacked %d chunks into %s (%d tensors)" % (len(parts), checkpoint, len(model)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("checkpoint")
    p.add_argument("out_dir")
    p.add_argument("--chunk-mib", type=int, default=15)
    u = sub.add_parser("unpack")
    u.add_argument("in_dir")
    u.add_argument("checkpoint")
    a = ap.parse_args()
    if a.command == "pack":
        pack(a.checkpoint, a.out_dir, a.chunk_mib)
    else:
        unpack(a.in_dir, a.checkpoint)


if __name__ == "__main__":
    main()
