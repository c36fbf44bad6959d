#!/usr/bin/env python3
"""Checks `torchmt export --format onnx` with ONNX's own checker and ONNX Runtime as the oracles
(no torchmt code, no torch).

    onnx_export_test.py ONNX_DIR EXPECTED.json

EXPECTED.json (written by tests/export_test.cpp from the native model):
  src [B][S] ids (padded), tgt_in [B][T] bos + target ids (padded), logits_file: raw float32
  [B, T, V] teacher-forced logits of torchmt, tolerance;
  sentences, greedy, beam5: torchmt's translations, min_greedy / min_beam5: the share of lines
  whose ONNX Runtime translation (tools/onnx_translate.py) must be equal.
1. onnx.checker (full check with shape inference) accepts both graphs.
2. Step by step, the decoder graph's logits equal torchmt's to the tolerance on every real
   (non-padding) target position of the padded batch, the encoder run once.
3. tools/onnx_translate.py translates as torchmt does, greedy and beam 5.
Exit 0 when everything holds; prints the first failure otherwise.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import onnx_translate  # noqa: E402


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    onnx_dir, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    try:
        import onnx
        for name in ("encoder.onnx", "decoder.onnx"):
            onnx.checker.check_model(os.path.join(onnx_dir, name), full_check=True)
    except ImportError:
        print("note: the onnx package is not installed; checker skipped")

    t = onnx_translate.Translator(onnx_dir, threads=1)
    if "logits_file" in expected:
        src = np.asarray(expected["src"], dtype=np.int64)
        tgt = np.asarray(expected["tgt_in"], dtype=np.int64)
        shape = expected["logits_shape"]
        want = np.fromfile(expected["logits_file"], dtype=np.float32).reshape(shape)
        state = t.start([list(r) for r in src])  # already padded: the source mask hides the padding
        worst = 0.0
        compared = 0
        for step in range(tgt.shape[1]):
            logits = t.step(state, tgt[:, step])
            real = np.all(tgt[:, 1 : step + 1] != t.pad, axis=1)  # position 0: the start token
            if real.any():
                diff = np.abs(logits[real] - want[real, step]).max()
                worst = max(worst, float(diff))
                compared += int(real.sum())
        check(compared > 0, "no target position compared")
        check(worst <= expected["tolerance"], f"logits differ by {worst:.3g} (> {expected['tolerance']})")
        print(f"logits: {compared} positions, max |diff| {worst:.3g}")

    sentences = expected["sentences"]
    for name, beam in (("greedy", 1), ("beam5", 5)):
        if name not in expected:
            continue
        got = t.translate(sentences, beam=beam, lenpen=0.6, max_len_a=1.2, max_len_b=10)
        equal = sum(a == b for a, b in zip(got, expected[name]))
        share = equal / max(1, len(sentences))
        first = next((i for i, (a, b) in enumerate(zip(got, expected[name])) if a != b), None)
        print(f"{name}: {equal}/{len(sentences)} lines equal to torchmt's")
        check(share >= expected["min_" + name],
              f"{name}: {equal}/{len(sentences)} equal; first difference line {first}: "
              f"{got[first]!r} vs torchmt {expected[name][first]!r}" if first is not None else "")
    print("OK")


if __name__ == "__main__":
    main()
