#!/usr/bin/env python3
"""Python side of bench_translate: the reference model decoding the way torchmt does.

Loads a torchmt checkpoint into tests/reference/transformer_reference.py (same state-dict keys),
reads the encoded source ids written by bench_translate (one sentence per line, eos included, an
empty line for an empty source), and decodes them with greedy and batched beam search following
src/decoding/search.cpp: sentences sorted longest first into batches, GNMT length penalty, max
length 1.2 * source length + 10, finished rows leave the batch, fairseq's stopping rule. With
--cache kv (the default) a step runs the newest token only, over per-layer self-attention keys /
values kept from earlier steps and cross-attention keys / values computed once per batch (the
reference model's own modules and attention); --cache recompute runs the whole prefix every step.

Writes, for every configuration:
    config BEAM BATCH DTYPE SECONDS SENTENCES TOKENS CACHE
    hyp INDEX id id ...           (best hypothesis per input sentence, no bos / eos)
TOKENS = hypothesis tokens + eos. Progress goes to stderr.
"""
import argparse
import contextlib
import json
import math
import os
import pickle
import struct
import sys
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import transformer_reference as ref  # noqa: E402

PAD, BOS, EOS = 0, 2, 3
NEG_INF = float("-inf")


class _LenientUnpickler(pickle._Unpickler):
    """torch.save'd by LibTorch, a checkpoint stores the SentencePiece proto (arbitrary bytes) as a
    pickle str, which Python's unpickler rejects as invalid UTF-8: decode strings leniently."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def _string(self, size_format):
        (n,) = struct.unpack(size_format, self.read(struct.calcsize(size_format)))
        self.append(str(self.read(n), "utf-8", "surrogateescape"))

    dispatch[pickle.BINUNICODE[0]] = lambda self: self._string("<I")
    dispatch[pickle.SHORT_BINUNICODE[0]] = lambda self: self._string("<B")
    dispatch[pickle.BINUNICODE8[0]] = lambda self: self._string("<Q")


_lenient_pickle = types.ModuleType("lenient_pickle")
_lenient_pickle.__dict__.update({k: getattr(pickle, k) for k in ("load", "loads", "dump", "dumps", "Pickler")})
_lenient_pickle.Unpickler = _LenientUnpickler


def load_model(path, device):
    ckpt = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_lenient_pickle)
    cfg = ckpt["model_config"]
    if isinstance(cfg, bytes):
        cfg = cfg.decode()
    cfg = json.loads(cfg) if isinstance(cfg, str) else dict(cfg)
    model = ref.from_config(cfg)
    # position tables (sinusoidal, rotary) are computed from the configuration, not stored
    derived = ("pos_encoding.pe", "pos_encoding.cos", "pos_encoding.sin")
    state = {k: v for k, v in ckpt["model"].items() if k not in derived}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in derived]
    if cfg.get("tie_embeddings"):  # tied copies may be stored once
        missing = [k for k in missing if k not in ("tgt_embedding.weight", "fc_out.weight")]
    if missing or unexpected:
        raise SystemExit(f"{path}: state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model.to(device).eval(), cfg


class Decoder:
    """IncrementalDecoder without a cache: start / step / select, recomputing the prefix."""

    def __init__(self, model, pad_id):
        self.model = model
        self.pad_id = pad_id

    def start(self, src):
        self.src_mask = (src != self.pad_id).unsqueeze(1).unsqueeze(2)  # [B, 1, 1, S]
        self.memory = self.model.encode(src, self.src_mask)
        self.prefix = torch.empty(src.size(0), 0, dtype=torch.long, device=src.device)

    def step(self, last):
        self.prefix = torch.cat([self.prefix, last.unsqueeze(1)], 1)  # [N, t]
        t = self.prefix.size(1)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=last.device)).view(1, 1, t, t)
        hidden = self.model.decode(self.prefix, self.memory, self.src_mask, causal)
        logits = self.model.fc_out(hidden[:, -1])
        return torch.log_softmax(logits.float(), -1)

    def select(self, index):
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        self.prefix = self.prefix.index_select(0, index)


def projections(attn):
    """(q, k, v, out projections, query heads, key/value heads) of either attention class."""
    if isinstance(attn, ref.GroupedQueryAttention):
        return attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, attn.num_heads, attn.num_groups
    return attn.W_q, attn.W_k, attn.W_v, attn.W_o, attn.num_heads, attn.num_heads


def split_heads(x, heads):
    b, t, width = x.shape
    return x.view(b, t, heads, width // heads).transpose(1, 2)  # [B, heads, T, d]


class CachedDecoder:
    """IncrementalDecoder with a KV cache: each step runs the newest token through the reference
    model's layers, attending to the keys / values of the earlier steps (kept per layer) and to
    the encoder output's keys / values (computed once in start)."""

    def __init__(self, model, pad_id):
        self.model = model
        self.pad_id = pad_id

    def start(self, src):
        model = self.model
        self.src_mask = (src != self.pad_id).unsqueeze(1).unsqueeze(2)  # [B, 1, 1, S]
        memory = model.encode(src, self.src_mask)  # [B, S, D]
        self.cross = []
        for layer in model.decoder_layers:
            _, wk, wv, _, _, groups = projections(layer.cross_attn)
            self.cross.append((split_heads(wk(memory), groups), split_heads(wv(memory), groups)))  # [B, G, S, d]
        self.keys = [None] * len(model.decoder_layers)
        self.values = [None] * len(model.decoder_layers)
        self.t = 0

    def attend(self, attn, q, keys, values, mask):
        """q [N, H, 1, d] (projected) over keys / values [N, G, T, d] -> the output projection's [N, 1, D]."""
        out, _ = ref.attention(q, keys, values, mask, attn.dropout)  # [N, H, 1, d]
        return projections(attn)[3](out.transpose(1, 2).reshape(q.size(0), 1, -1))  # [N, 1, D]

    def cross_attend(self, i, attn, h):
        keys, values = self.cross[i]
        q = split_heads(projections(attn)[0](h), attn.num_heads)  # [N, H, 1, d]
        return self.attend(attn, q, keys, values, self.src_mask)

    def self_attend(self, i, attn, h, rotary):
        wq, wk, wv, _, heads, groups = projections(attn)
        q = split_heads(wq(h), heads)  # [N, H, 1, d]
        k, v = split_heads(wk(h), groups), split_heads(wv(h), groups)  # [N, G, 1, d]
        if rotary is not None:  # as the reference model rotates its queries and keys
            q, k = ref.apply_rotary_pos_emb(q, k, rotary[1], rotary[0])
        self.keys[i] = k if self.keys[i] is None else torch.cat([self.keys[i], k], 2)  # [N, G, t+1, d]
        self.values[i] = v if self.values[i] is None else torch.cat([self.values[i], v], 2)
        return self.attend(attn, q, self.keys[i], self.values[i], None)

    def step(self, last):
        model, t = self.model, self.t
        pos = model.pos_encoding
        x = model.tgt_embedding(last.unsqueeze(1)) * math.sqrt(model.embed_dim)  # [N, 1, D]
        rotary = None
        if pos.kind == "rope":
            rotary = (pos.cos[t:t + 1], pos.sin[t:t + 1])
        else:
            x = x + pos.pe[:, t:t + 1, :]
        for i, layer in enumerate(model.decoder_layers):
            if layer.pre_norm:
                x = x + self.self_attend(i, layer.self_attn, layer.norm1(x), rotary)
                x = x + self.cross_attend(i, layer.cross_attn, layer.norm2(x))
                x = x + layer.ffn(layer.norm3(x))
            else:
                x = layer.norm1(x + self.self_attend(i, layer.self_attn, x, rotary))
                x = layer.norm2(x + self.cross_attend(i, layer.cross_attn, x))
                x = layer.norm3(x + layer.ffn(x))
        if model.pre_norm:
            x = model.decoder_norm(x)
        self.t += 1
        return torch.log_softmax(model.fc_out(x[:, -1]).float(), -1)

    def select(self, index):
        self.src_mask = self.src_mask.index_select(0, index)
        self.cross = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.cross]
        self.keys = [k if k is None else k.index_select(0, index) for k in self.keys]
        self.values = [v if v is None else v.index_select(0, index) for v in self.values]


def max_lengths(src, opt):
    lengths = src.ne(PAD).sum(1).tolist()
    return [max(1, min(int(opt["a"] * n + float(opt["b"])), opt["cap"])) for n in lengths]


def length_penalty(length, alpha):
    return 1.0 if alpha == 0.0 else ((5.0 + length) / 6.0) ** alpha


def greedy_search(dec, src, opt):
    batch = src.size(0)
    limits = max_lengths(src, opt)
    result = [[] for _ in range(batch)]
    dec.start(src)
    live = list(range(batch))
    last = torch.full((batch,), BOS, dtype=torch.long, device=src.device)
    t = 0
    while live:
        lprobs = dec.step(last)
        best_tok = lprobs.max(-1)[1].tolist()
        keep_rows, keep_live, next_tokens = [], [], []
        for r, sentence in enumerate(live):
            tok = EOS if t + 1 >= limits[sentence] else best_tok[r]
            if tok != EOS:
                result[sentence].append(tok)
                keep_rows.append(r)
                keep_live.append(sentence)
                next_tokens.append(tok)
        if not keep_rows:
            break
        if len(keep_rows) < len(live):
            dec.select(torch.tensor(keep_rows, dtype=torch.long, device=src.device))
        live = keep_live
        last = torch.tensor(next_tokens, dtype=torch.long, device=src.device)
        t += 1
    return result


def beam_search(dec, src, opt, k):
    batch = src.size(0)
    device = src.device
    limits = max_lengths(src, opt)
    finished = [[] for _ in range(batch)]  # (score, tokens)
    dec.start(src)
    dec.select(torch.arange(batch, device=device).repeat_interleave(k))
    live = list(range(batch))
    prefixes = [[] for _ in range(batch * k)]
    scores = [NEG_INF] * (batch * k)
    for i in range(batch):
        scores[i * k] = 0.0
    last = torch.full((batch * k,), BOS, dtype=torch.long, device=device)
    t = 0
    while live:
        n_live = len(live)
        lprobs = dec.step(last)  # [N, V]
        vocab = lprobs.size(1)
        forced = [s * k + j for s in range(n_live) if t + 1 >= limits[live[s]] for j in range(k)]
        if forced:
            rows = torch.tensor(forced, dtype=torch.long, device=device)
            eos_col = lprobs.index_select(0, rows)[:, EOS].clone()
            lprobs.index_fill_(0, rows, NEG_INF)
            lprobs.index_put_((rows, torch.full_like(rows, EOS)), eos_col)
        cand = lprobs + torch.tensor(scores, dtype=torch.float32, device=device).unsqueeze(1)
        top_scores, top_index = cand.view(n_live, k * vocab).topk(min(2 * k, k * vocab), -1)
        top_scores, top_index = top_scores.cpu().tolist(), top_index.cpu().tolist()
        next_rows, next_live, next_tokens, next_scores, next_prefixes = [], [], [], [], []
        for s in range(n_live):
            sentence = live[s]
            done = finished[sentence]
            rows, tokens, kept = [], [], []
            for score, index in zip(top_scores[s], top_index[s]):
                if len(rows) >= k:
                    break
                if not math.isfinite(score):
                    break
                beam, token = divmod(index, vocab)
                row = s * k + beam
                if token == EOS:
                    if len(done) < k:
                        hyp = prefixes[row]
                        done.append((score / length_penalty(len(hyp) + 1, opt["alpha"]), hyp))
                else:
                    rows.append(row)
                    tokens.append(token)
                    kept.append(score)
            if len(done) >= k or not rows:
                continue
            while len(rows) < k:  # pad the beam with a dead copy
                rows.append(rows[-1])
                tokens.append(tokens[-1])
                kept.append(NEG_INF)
            for j in range(k):
                next_rows.append(rows[j])
                next_tokens.append(tokens[j])
                next_scores.append(kept[j])
                next_prefixes.append(prefixes[rows[j]] + [tokens[j]])
            next_live.append(sentence)
        if not next_live:
            break
        dec.select(torch.tensor(next_rows, dtype=torch.long, device=device))
        live, prefixes, scores = next_live, next_prefixes, next_scores
        last = torch.tensor(next_tokens, dtype=torch.long, device=device)
        t += 1
    out = []
    for hyps in finished:
        hyps = sorted(hyps, key=lambda h: -h[0])  # stable, like std::stable_sort
        out.append(hyps[0][1] if hyps else [])
    return out


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def translate(model, sources, beam, batch_size, dtype, opt, device, cache):
    """Best hypothesis per source (None for an empty source), batching as Translator does."""
    order = [i for i, s in enumerate(sources) if s]
    order.sort(key=lambda i: -len(sources[i]))  # stable: longest first
    out = [None] * len(sources)
    dec = CachedDecoder(model, PAD) if cache == "kv" else Decoder(model, PAD)
    autocast = (torch.autocast(device_type=device.type, dtype=AUTOCAST[dtype]) if dtype in AUTOCAST
                else contextlib.nullcontext())
    with torch.inference_mode(), autocast:
        for begin in range(0, len(order), batch_size):
            rows = order[begin:begin + batch_size]
            longest = len(sources[rows[0]])
            src = torch.full((len(rows), longest), PAD, dtype=torch.long)
            for r, i in enumerate(rows):
                src[r, : len(sources[i])] = torch.tensor(sources[i])
            src = src.to(device)
            hyps = greedy_search(dec, src, opt) if beam == 1 else beam_search(dec, src, opt, beam)
            for r, i in enumerate(rows):
                out[i] = hyps[r]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True, help="encoded sources, one line of ids per sentence")
    p.add_argument("--out", required=True)
    p.add_argument("--beams", default="1,5")
    p.add_argument("--batch-sizes", default="1,64")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu")
    p.add_argument("--cache", choices=("kv", "recompute"), default="kv")
    p.add_argument("--lenpen", type=float, default=0.6)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, cfg = load_model(args.model, device)
    with open(args.ids) as f:
        sources = [[int(x) for x in line.split()] for line in f]
    opt = {"a": args.max_len_a, "b": args.max_len_b, "cap": min(1024, cfg.get("max_positions", cfg.get("max_len"))), "alpha": args.lenpen}
    warm = [s for s in sources if s][:4]

    with open(args.out, "w") as out:
        for dtype in args.dtypes.split(","):
            for beam in [int(b) for b in args.beams.split(",")]:
                for batch in [int(b) for b in args.batch_sizes.split(",")]:
                    print(f"python {'greedy' if beam == 1 else f'beam {beam}'}, batch {batch}, {dtype}, "
                          f"{args.cache} ...",
                          end="", file=sys.stderr, flush=True)
                    translate(model, warm, beam, batch, dtype, opt, device, args.cache)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    hyps = translate(model, sources, beam, batch, dtype, opt, device, args.cache)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    seconds = time.perf_counter() - start
                    print(f" {seconds:.2f} s", file=sys.stderr, flush=True)
                    done = [h for h in hyps if h is not None]
                    tokens = sum(len(h) + 1 for h in done)
                    out.write(f"config {beam} {batch} {dtype} {seconds:.6f} {len(done)} {tokens} {args.cache}\n")
                    for i, h in enumerate(hyps):
                        out.write(f"hyp {i} {' '.join(map(str, h or []))}\n")
                    out.flush()


if __name__ == "__main__":
    main()
