#!/usr/bin/env python3
"""Checks `torchmt export --format ctranslate2` against CTranslate2 itself (the PyPI package as
the oracle; no torchmt code).

    ctranslate2_export_test.py MODEL.ts CT2_FP32_DIR CT2_INT8_DIR EXPECTED.json

MODEL.ts: the TorchScript export of the same checkpoint (its state dict, config.json and
spm.model give the weights independently of the CTranslate2 exporter).
EXPECTED.json: {"sentences": [...], "greedy": [...]} (torchmt's fp32 greedy translations).

1. CTranslate2's own spec code, given the same weights (mapped here from the native names),
   writes the same variables: names, shapes, types and values, int8 quantization included.
2. ctranslate2.Translator loads both directories; its greedy output on the fp32 one equals
   torchmt's, and the int8 one translates as CTranslate2's own int8 conversion does.
Exit 0 when everything matches; prints the first mismatch otherwise.
"""
import json
import os
import struct
import sys
import tempfile

import ctranslate2
import numpy as np
import sentencepiece as spm
import torch
from ctranslate2.specs import common_spec, transformer_spec


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def read_model_bin(path):
    """name -> (shape, type id, bytes), aliases resolved."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        value = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string():
        nonlocal pos
        n = take("H")
        s = data[pos : pos + n - 1].decode("utf-8")
        pos += n
        return s

    version, name, revision = take("I"), string(), take("I")
    variables = {}
    for _ in range(take("I")):
        var = string()
        shape = tuple(take("I") for _ in range(take("B")))
        type_id, size = take("B"), take("I")
        variables[var] = (shape, type_id, data[pos : pos + size])
        pos += size
    for _ in range(take("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    check(pos == len(data), f"{path}: {len(data) - pos} trailing bytes")
    return (version, name, revision), variables


def reference_spec(state, config, pieces):
    """The CTranslate2 spec of the model, filled by its own Python API."""
    act = {"gelu": common_spec.Activation.GELU, "swish": common_spec.Activation.SWISH}.get(
        config["activation"], common_spec.Activation.RELU)
    # The model switches CTranslate2 can express: Pre-LN (with final LayerNorms), rotary
    # embeddings (rotate_half's layout: not interleaved) and grouped-query K/V heads.
    heads = config["num_heads"]
    kv_heads = config.get("kv_heads", 0) or heads
    pre_norm = config.get("norm", "post") == "pre"
    rope = config.get("positions", "sinusoidal") == "rope"
    settings = dict(pre_norm=pre_norm, activation=act, num_heads_kv=kv_heads if kv_heads != heads else None,
                    rotary_dim=0 if rope else None, rotary_interleave=False)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config["num_encoder_layers"], heads, **settings),
        transformer_spec.TransformerDecoderSpec(config["num_decoder_layers"], heads, **settings))
    f = lambda name: state[name].float().numpy()
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = config.get("scale_embeddings", True)

    def linear(target, *names):
        target.weight = np.concatenate([f(n + ".weight") for n in names])
        target.bias = np.concatenate([f(n + ".bias") for n in names])

    def norm(target, name):
        target.gamma, target.beta = f(name + ".weight"), f(name + ".bias")

    # Grouped-query attention's projections carry the document's names (q_proj, ...).
    q, k, v, o = ("q_proj", "k_proj", "v_proj", "o_proj") if kv_heads != heads else ("W_q", "W_k", "W_v", "W_o")

    def self_attention_and_ffn(layer, p, ffn_norm):  # the same in encoder and decoder layers
        linear(layer.self_attention.linear[0], p + "self_attn." + q, p + "self_attn." + k, p + "self_attn." + v)
        linear(layer.self_attention.linear[1], p + "self_attn." + o)
        norm(layer.self_attention.layer_norm, p + "norm1")
        linear(layer.ffn.linear_0, p + "ffn.linear1")
        linear(layer.ffn.linear_1, p + "ffn.linear2")
        norm(layer.ffn.layer_norm, p + ffn_norm)

    # Rotary: no table in the decoder; the encoder always adds one (zeros then).
    pe = np.zeros((config["max_positions"], config["d_model"]), np.float32) if rope else f("pos_encoding.pe")[0]
    spec.encoder.embeddings[0].weight = f("src_embedding.weight")
    spec.encoder.position_encodings.encodings = pe
    for i, layer in enumerate(spec.encoder.layer):
        self_attention_and_ffn(layer, f"encoder_layers.{i}.", "norm2")
    if pre_norm:
        norm(spec.encoder.layer_norm, "encoder_norm")
    spec.decoder.embeddings.weight = f("tgt_embedding.weight")
    if not rope:
        spec.decoder.position_encodings.encodings = pe
    if pre_norm:
        norm(spec.decoder.layer_norm, "decoder_norm")
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder_layers.{i}."
        self_attention_and_ffn(layer, p, "norm3")
        linear(layer.attention.linear[0], p + "cross_attn." + q)
        linear(layer.attention.linear[1], p + "cross_attn." + k, p + "cross_attn." + v)
        linear(layer.attention.linear[2], p + "cross_attn." + o)
        norm(layer.attention.layer_norm, p + "norm2")
    linear(spec.decoder.projection, "fc_out")
    spec.config.add_source_eos = True
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = pieces[2], pieces[3], pieces[1]
    spec.config.decoder_start_token = pieces[2]
    spec.config.layer_norm_epsilon = 1e-5
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def greedy(directory, sp, sentences):
    translator = ctranslate2.Translator(directory, device="cpu", intra_threads=1)
    results = translator.translate_batch([sp.encode(s, out_type=str) for s in sentences], beam_size=1,
                                         max_decoding_length=255)
    return [sp.decode(r.hypotheses[0]) for r in results]


def main():
    model_path, ours_fp32, ours_int8, expected_path = sys.argv[1:5]
    expected = json.load(open(expected_path))
    files = {"config.json": "", "spm.model": ""}
    model = torch.jit.load(model_path, map_location="cpu", _extra_files=files)
    config = json.loads(files["config.json"])
    sp = spm.SentencePieceProcessor(model_proto=files["spm.model"])
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    state = model.state_dict()

    for ours, quantization in ((ours_fp32, None), (ours_int8, "int8")):
        with tempfile.TemporaryDirectory() as ref:
            spec = reference_spec(state, config, pieces)
            spec.validate()
            spec.optimize(quantization=quantization)
            spec.save(ref)
            header, reference = read_model_bin(os.path.join(ref, "model.bin"))
            our_header, variables = read_model_bin(os.path.join(ours, "model.bin"))
            check(our_header == header, f"header {our_header} != {header}")
            check(sorted(variables) == sorted(reference),
                  f"variables differ: only ours {sorted(set(variables) - set(reference))}, "
                  f"only CTranslate2's {sorted(set(reference) - set(variables))}")
            for name, (shape, type_id, data) in reference.items():
                check(variables[name][:2] == (shape, type_id),
                      f"{name}: shape/type {variables[name][:2]} != {(shape, type_id)}")
                check(variables[name][2] == data, f"{name}: values differ ({quantization or 'fp32'})")
            our_config = json.load(open(os.path.join(ours, "config.json")))
            ref_config = json.load(open(os.path.join(ref, "config.json")))
            check(our_config == ref_config, f"config.json differs: {our_config} != {ref_config}")
            check(json.load(open(os.path.join(ours, "shared_vocabulary.json"))) == pieces, "vocabulary differs")
            if quantization:
                check(greedy(ours, sp, expected["sentences"]) == greedy(ref, sp, expected["sentences"]),
                      "int8 translations differ from CTranslate2's own int8 conversion")
    translations = greedy(ours_fp32, sp, expected["sentences"])
    for got, want in zip(translations, expected["greedy"]):
        check(got == want, f"greedy: CTranslate2 {got!r} != torchmt {want!r}")
    print("ok:", len(reference), "variables equal to CTranslate2's own conversion (fp32 and int8);",
          len(translations), "greedy translations equal torchmt's")


if __name__ == "__main__":
    main()
