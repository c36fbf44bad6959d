#!/usr/bin/env python3
"""Translate with a torchmt TorchScript export from plain Python: torch + sentencepiece only.

    python tools/ts_translate.py model.ts "Guten Morgen!" [more sentences...] [--beam 5]

The archive carries everything: the weights, spm.model (SentencePiece, special ids pad 0,
unk 1, bos 2, eos 3), config.json, and the search (`translate`) as TorchScript.
"""
import argparse
import json

import sentencepiece as spm
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="file written by `torchmt export`")
    parser.add_argument("sentences", nargs="+", help="source sentences")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    files = {"torchmt.json": "", "config.json": "", "spm.model": "", "tgt_spm.model": ""}
    model = torch.jit.load(args.model, map_location=args.device, _extra_files=files)
    model.eval()
    marker = json.loads(files["torchmt.json"])
    if marker.get("format") != "torchmt-torchscript":
        raise SystemExit(f"{args.model} is not a torchmt export")
    config = json.loads(files["config.json"])
    src_sp = spm.SentencePieceProcessor(model_proto=files["spm.model"])
    tgt_sp = spm.SentencePieceProcessor(model_proto=files["tgt_spm.model"]) if files["tgt_spm.model"] else src_sp

    eos, pad = int(marker["eos_id"]), int(marker["pad_id"])
    rows = [src_sp.encode(s)[: config.get("max_positions", config.get("max_len")) - 1] + [eos] for s in args.sentences]
    src = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, ids in enumerate(rows):
        src[i, : len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        hyps = model.translate(src, 1024, args.beam, args.lenpen)
    for ids in hyps:
        print(tgt_sp.decode(ids))


if __name__ == "__main__":
    main()
