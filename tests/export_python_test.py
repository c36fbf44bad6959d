#!/usr/bin/env python3
"""Loads a torchmt TorchScript export with plain torch (no torchmt code) and checks it
against what the C++ test computed with the native model.

    export_python_test.py MODEL.ts EXPECTED.json LOGITS.pt

EXPECTED.json: {"src": ids, "sentences": [...], "greedy": ids, "beam5": ids, "keys": [...]}
LOGITS.pt: {"src", "tgt_in", "logits"} written by the C++ test (torch.save format).
Exit 0 when everything matches; prints the first mismatch otherwise.
"""
import json
import sys

import sentencepiece as spm
import torch


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    model_path, expected_path, logits_path = sys.argv[1:4]
    expected = json.load(open(expected_path))
    files = {"torchmt.json": "", "config.json": "", "spm.model": ""}
    model = torch.jit.load(model_path, map_location="cpu", _extra_files=files)
    model.eval()

    marker = json.loads(files["torchmt.json"])
    check(marker["format"] == "torchmt-torchscript", f"marker {marker}")
    check(marker["format_version"] == 2, f"marker {marker}")
    config = json.loads(files["config.json"])
    check(config["d_model"] > 0 and config["num_heads"] > 0, f"config {config}")

    # The embedded SentencePiece model reproduces the C++ tokenizer's ids.
    sp = spm.SentencePieceProcessor(model_proto=files["spm.model"])
    check(sp.pad_id() == 0 and sp.unk_id() == 1 and sp.bos_id() == 2 and sp.eos_id() == 3, "special ids")
    src_ids = [sp.encode(s) + [3] for s in expected["sentences"]]
    check(src_ids == expected["src"], f"tokenization {src_ids} != {expected['src']}")

    # State-dict names are the native model's.
    keys = sorted(model.state_dict().keys())
    check(keys == sorted(expected["keys"]), f"state dict keys {keys}")
    check(config["tie_embeddings"] or len(keys) == len(set(keys)), "keys")

    tensors = torch.load(logits_path, weights_only=False)
    with torch.no_grad():
        logits = model(tensors["src"], tensors["tgt_in"])
        diff = (logits - tensors["logits"]).abs().max().item()
        check(diff < 1e-5, f"forward logits differ by {diff}")
        memory = model.encode(tensors["src"])
        check(list(memory.shape) == list(tensors["src"].shape) + [config["d_model"]], "encode shape")

        src = torch.zeros(len(src_ids), max(map(len, src_ids)), dtype=torch.long)
        for i, ids in enumerate(src_ids):
            src[i, : len(ids)] = torch.tensor(ids)
        greedy = model.translate(src, 1024, 1)
        check(greedy == expected["greedy"], f"greedy {greedy} != {expected['greedy']}")
        beam5 = model.translate(src, 1024, 5, 0.6, 1.2, 10)
        check(beam5 == expected["beam5"], f"beam5 {beam5} != {expected['beam5']}")
        ids, scores = model.translate_with_scores(src, beam=5)
        check(ids == beam5 and len(scores) == len(ids), "translate_with_scores")
    print("ok:", len(keys), "state-dict keys,", len(greedy), "sentences, greedy and beam-5 ids equal")


if __name__ == "__main__":
    main()
