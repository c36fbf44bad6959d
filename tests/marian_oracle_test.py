#!/usr/bin/env python3
"""Checks `torchmt import --format marian` and `torchmt export --format marian` against Hugging
Face transformers (the PyPI package as the oracle; no torchmt code is imported here).

    marian_oracle_test.py TORCHMT WORKDIR TRAIN_DE TEST_DE LINES [PAPER_CHECKPOINT]

1. A MarianMTModel with OPUS-MT's configuration (swish, scaled embeddings, one vocab.json over
   two SentencePiece models trained here on Multi30k, pad last and starting the decoder, eos 0)
   and random weights (final_logits_bias and LayerNorms too) is saved with save_pretrained.
2. `torchmt import` reads it; the TorchScript export of the import gives the same logits as
   transformers on a padded batch (1e-4), and `torchmt translate` the same greedy and beam-5
   output as `generate` on LINES test sentences (length penalty 0 and a fixed length limit on
   both sides; generate's early_stopping=True is torchmt's rule of k finished hypotheses).
3. `torchmt export --format marian` of the import gives back the same tensors and files that
   transformers loads with the same logits.
4. With PAPER_CHECKPOINT (a torchmt paper-preset checkpoint): its Marian export loads in
   transformers and translates as `torchmt translate` does.
Exit 0 when everything matches; prints the first mismatch otherwise.
"""
import gzip
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file
from transformers import LogitsProcessor, LogitsProcessorList, MarianMTModel, MarianTokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "bench"))
from make_marian_model import make_marian_model  # noqa: E402

MAX_NEW = 40  # output tokens including the end


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def run(args, stdin=None):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True)
    check(p.returncode == 0, " ".join(args) + " exited " + str(p.returncode) + ": " + p.stderr[-2000:])
    return p.stdout


def hf_logits(model, tok, src_lines, tgt_lines):
    enc = tok(src_lines, return_tensors="pt", padding=True)
    pad = model.config.pad_token_id
    tgt = [[model.config.decoder_start_token_id] + tok(text_target=t)["input_ids"][:-1] for t in tgt_lines]
    width = max(len(t) for t in tgt)
    dec = torch.tensor([t + [pad] * (width - len(t)) for t in tgt])
    with torch.no_grad():
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=dec).logits
    return enc["input_ids"], dec, out, [len(t) for t in tgt]


class EndAtLimit(LogitsProcessor):
    """torchmt's (and fairseq's) rule at the length limit: only the end may follow, at its own
    log-probability. transformers' ForcedEOSTokenLogitsProcessor would score it 0 instead, so
    beams ending at the limit would rank differently."""

    def __init__(self, eos):
        self.eos = eos

    def __call__(self, input_ids, scores):
        if input_ids.shape[-1] == MAX_NEW:  # the start token + MAX_NEW - 1 generated
            keep = scores[:, self.eos].clone()
            scores[:] = -float("inf")
            scores[:, self.eos] = keep
        return scores


def generate(model, tok, lines, beams):
    out = []
    for i in range(0, len(lines), 50):
        enc = tok(lines[i : i + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            extra = {"length_penalty": 0.0, "early_stopping": True} if beams > 1 else {}
            ids = model.generate(**enc, num_beams=beams, do_sample=False, max_new_tokens=MAX_NEW, num_return_sequences=1,
                                 forced_eos_token_id=None,
                                 logits_processor=LogitsProcessorList([EndAtLimit(model.config.eos_token_id)]),
                                 **extra)
        out += tok.batch_decode(ids, skip_special_tokens=True)
    return out


def torchmt_translate(torchmt, model, lines, beams):
    text = run([torchmt, "translate", "-m", model, "--beam", str(beams), "--max-len-a", "0", "--max-len-b",
                str(MAX_NEW), "--lenpen", "0", "--dtype", "fp32"], "\n".join(lines) + "\n")
    return text.split("\n")[: len(lines)]


def agreement(a, b):
    return sum(x == y for x, y in zip(a, b))


def compare_outputs(torchmt, checkpoint, model, tok, lines, what, need_greedy, need_beam):
    for beams, need in ((1, need_greedy), (5, need_beam)):
        ours = torchmt_translate(torchmt, checkpoint, lines, beams)
        theirs = generate(model, tok, lines, beams)
        same = agreement(ours, theirs)
        print(f"{what}: beam {beams}: {same}/{len(lines)} outputs equal to transformers' generate")
        if same < need * len(lines):
            first = next(i for i in range(len(lines)) if ours[i] != theirs[i])
            check(False, f"{what} beam {beams}: line {first}: torchmt {ours[first]!r} vs transformers {theirs[first]!r}")


def main():
    torchmt, work, train_de, test_de, n = sys.argv[1:6]
    paper = sys.argv[6] if len(sys.argv) > 6 else None
    n = int(n)
    with (gzip.open if test_de.endswith(".gz") else open)(test_de, "rt", encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f][:n]
    # Small, and with an end that sentences reach on their own (most of them), not only at the limit.
    d = make_marian_model(os.path.join(work, "marian"), train_de, d_model=64, layers=2, heads=4, ffn=128,
                          spm_sizes=(900, 700), eos_bias=8.0)
    model = MarianMTModel.from_pretrained(d).eval()
    tok = MarianTokenizer.from_pretrained(d)

    imported = os.path.join(work, "imported.pt")
    run([torchmt, "import", "--format", "marian", d, "-o", imported])
    exported_ts = os.path.join(work, "imported.ts")
    run([torchmt, "export", "-m", imported, "-o", exported_ts])
    ts = torch.jit.load(exported_ts).eval()
    src, dec, theirs, lengths = hf_logits(model, tok, lines[:8], lines[8:16])
    with torch.no_grad():
        ours = ts.forward(src, dec)
    worst = max((ours[i, : lengths[i]] - theirs[i, : lengths[i]]).abs().max().item() for i in range(len(lengths)))
    print(f"imported: logits of a padded batch of 8 differ by at most {worst:.2e}")
    check(worst <= 1e-4, f"logits differ by {worst}")
    compare_outputs(torchmt, imported, model, tok, lines, "imported", 1.0, 0.98)

    # Export the import: the same tensors and a directory transformers loads.
    again = os.path.join(work, "exported_marian")
    run([torchmt, "export", "-m", imported, "--format", "marian", "-o", again])
    original, back = load_file(os.path.join(d, "model.safetensors")), load_file(os.path.join(again, "model.safetensors"))
    for name, tensor in original.items():
        check(name in back, f"the export lacks {name}")
        check(torch.equal(back[name], tensor), f"the export's {name} differs from the imported file's")
    check(set(back) == set(original), f"the export has other tensors: {sorted(set(back) ^ set(original))}")
    model_back = MarianMTModel.from_pretrained(again).eval()
    _, _, theirs_back, _ = hf_logits(model_back, MarianTokenizer.from_pretrained(again), lines[:8], lines[8:16])
    check(torch.equal(theirs_back, theirs), "transformers' logits of the re-exported model differ")
    print("export of the import: every tensor equal; transformers' logits identical")

    # The same model as pytorch_model.bin (torch.save of the state dict, as older OPUS-MT
    # snapshots ship it) imports to the same tensors.
    legacy = os.path.join(work, "marian_bin")
    shutil.copytree(d, legacy)
    os.remove(os.path.join(legacy, "model.safetensors"))
    torch.save(model.state_dict(), os.path.join(legacy, "pytorch_model.bin"))
    run([torchmt, "import", "--format", "marian", legacy, "-o", os.path.join(work, "imported_bin.pt")])
    run([torchmt, "export", "-m", os.path.join(work, "imported_bin.pt"), "--format", "marian", "-o",
         os.path.join(work, "exported_bin")])
    back_bin = load_file(os.path.join(work, "exported_bin", "model.safetensors"))
    check(set(back_bin) == set(back) and all(torch.equal(back_bin[k], back[k]) for k in back),
          "pytorch_model.bin imports to other tensors than model.safetensors")
    print("pytorch_model.bin: imports to the same tensors as model.safetensors")

    # Fine-tuning the import (its ids: eos 0, pad last and starting the decoder): torchmt
    # trains it on its own vocabulary, and the result still loads in transformers.
    train_en = train_de.replace(".de", ".en")
    if os.path.exists(train_en):
        ft = os.path.join(work, "finetuned")
        run([torchmt, "train", "--init-from", imported, "--train-src", train_de, "--train-tgt", train_en,
             "--max-steps", "4", "--out", ft, "--device", "cpu", "--dtype", "fp32", "--batch-tokens", "3000",
             "--log-every", "1"])
        tuned_dir = os.path.join(work, "finetuned_marian")
        run([torchmt, "export", "-m", os.path.join(ft, "checkpoint_last.pt"), "--format", "marian", "-o", tuned_dir])
        tuned = MarianMTModel.from_pretrained(tuned_dir).eval()
        moved = max((a - b).abs().max().item() for a, b in zip(tuned.parameters(), model.parameters()))
        check(0 < moved < 1, f"fine-tuning moved the weights by {moved}")
        compare_outputs(torchmt, os.path.join(ft, "checkpoint_last.pt"), tuned, MarianTokenizer.from_pretrained(tuned_dir),
                        lines[:100], "fine-tuned import", 1.0, 0.98)

    if paper:
        out = os.path.join(work, "paper_marian")
        run([torchmt, "export", "-m", paper, "--format", "marian", "-o", out])
        model_p = MarianMTModel.from_pretrained(out).eval()
        tok_p = MarianTokenizer.from_pretrained(out)
        compare_outputs(torchmt, paper, model_p, tok_p, lines, "paper-preset export", 0.99, 0.98)
    print("OK")


if __name__ == "__main__":
    main()
