#!/usr/bin/env python3
"""Writes a Hugging Face MarianMT directory shaped like an OPUS-MT model, with random weights:
config.json + model.safetensors (save_pretrained), vocab.json over two SentencePiece models
trained on a corpus (source.spm, target.spm; their own ids, unk 0 bos 1 eos 2, which vocab.json
replaces: eos 0, unk 1, pad last), swish, scaled embeddings, shared and tied embeddings.

    make_marian_model.py OUT_DIR TRAIN_FILE [--opus-size]

--opus-size: OPUS-MT's transformer (6+6 layers, d_model 512, 8 heads, FFN 2048) with vocab.json
filled to 58,101 pieces like opus-mt-de-en's (the pieces beyond the SentencePiece models' never
occur in input, but the output projection computes them all). Otherwise a 2+2-layer d_model 64
model (tests/marian_oracle_test.py imports make_marian_model).
"""
import argparse
import gzip
import json
import os

import sentencepiece as spm
import torch
from transformers import MarianConfig, MarianMTModel


def make_marian_model(out, train_file, d_model, layers, heads, ffn, spm_sizes, eos_bias, vocab_size=0, seed=7):
    opener = gzip.open if train_file.endswith(".gz") else open
    with opener(train_file, "rt", encoding="utf-8") as f:
        sentences = [line.strip() for _, line in zip(range(8000), f)]
    os.makedirs(out, exist_ok=True)
    for name, size in zip(("source", "target"), spm_sizes):
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_prefix=os.path.join(out, name),
                                       vocab_size=size, model_type="unigram", minloglevel=2)
        os.replace(os.path.join(out, name + ".model"), os.path.join(out, name + ".spm"))
        os.remove(os.path.join(out, name + ".vocab"))
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(out, name + ".spm"))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not sp.is_control(i) and not sp.is_unknown(i) and piece not in vocab:
                vocab[piece] = len(vocab)
    while len(vocab) < vocab_size - 1:
        vocab[f"<filler_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    size = len(vocab)
    config = MarianConfig(vocab_size=size, decoder_vocab_size=size, d_model=d_model, encoder_layers=layers,
                          decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                          encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, activation_function="swish", scale_embedding=True,
                          max_position_embeddings=512, pad_token_id=size - 1, eos_token_id=0,
                          decoder_start_token_id=size - 1, forced_eos_token_id=0,
                          share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        # Weights wide enough that the argmax is decided well beyond rounding differences.
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, (0.25 if "shared" in name or "embed" in name else 0.15) * (64 / d_model) ** 0.5)
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] = eos_bias  # sentences that end on their own
    model.save_pretrained(out)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"separate_vocabs": False, "tokenizer_class": "MarianTokenizer"}, f)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("train_file")
    ap.add_argument("--opus-size", action="store_true")
    ap.add_argument("--eos-bias", type=float, default=8.0)
    a = ap.parse_args()
    if a.opus_size:
        make_marian_model(a.out, a.train_file, 512, 6, 8, 2048, (6000, 6000), a.eos_bias, vocab_size=58101)
    else:
        make_marian_model(a.out, a.train_file, 64, 2, 4, 128, (900, 700), a.eos_bias)


if __name__ == "__main__":
    main()
