#!/usr/bin/env python3
"""Translate with a `torchmt export --format onnx` directory: onnxruntime, sentencepiece and numpy
only (no torch). Greedy or beam search, the same search as `torchmt translate` (fairseq's beam
criterion, GNMT length penalty, output length a * source tokens + b), one line out per line in.

    python3 tools/onnx_translate.py -m model_onnx [--beam 5] [--lenpen 0.6] < input.de > output.en

The few lines a user needs are `Translator(dir).translate(lines)`.
"""
import argparse
import json
import os
import sys

import numpy as np

try:
    import onnxruntime as ort
    import sentencepiece as spm
except ImportError as e:  # the two packages this tool needs
    sys.exit(f"onnx_translate: {e.name} is not installed (pip install onnxruntime sentencepiece)")


class ModelError(Exception):
    pass


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    shifted = x - m
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)


def length_penalty(length, alpha):
    return 1.0 if alpha == 0.0 else ((5.0 + length) / 6.0) ** alpha


class Translator:
    def __init__(self, model_dir, threads=0):
        try:
            with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
                self.config = json.load(f)
            if self.config.get("format") != "torchmt-onnx":
                raise ModelError(f"{model_dir}/config.json is not a torchmt ONNX export's")
            c = self.config
            options = ort.SessionOptions()
            if threads > 0:
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
            self.encoder = ort.InferenceSession(os.path.join(model_dir, c["encoder"]), options,
                                                providers=["CPUExecutionProvider"])
            self.decoder = ort.InferenceSession(os.path.join(model_dir, c["decoder"]), options,
                                                providers=["CPUExecutionProvider"])
            self.source_sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, c["source_spm"]))
            self.target_sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, c["target_spm"]))
            self.pieces = None
            if "vocabulary" in c:  # an explicit vocabulary (imported Marian models): ids by piece
                with open(os.path.join(model_dir, c["vocabulary"]), encoding="utf-8") as f:
                    self.pieces = json.load(f)
                self.piece_ids = {p: i for i, p in enumerate(self.pieces)}
            self.layers = int(c["num_decoder_layers"])
            self.kv_heads, self.head_dim = int(c["kv_heads"]), int(c["head_dim"])
            self.max_positions = int(c["max_positions"])
            self.pad, self.unk, self.bos, self.eos = (int(c[k]) for k in ("pad_id", "unk_id", "bos_id", "eos_id"))
        except ModelError:
            raise
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
            raise ModelError(f"cannot load the ONNX export {model_dir}: {str(e).splitlines()[0] if str(e) else e!r}")
        except Exception as e:  # onnxruntime's own exception types (a damaged graph)
            raise ModelError(f"cannot load the ONNX export {model_dir}: {str(e).splitlines()[0]}")

    # --- tokens ---------------------------------------------------------------------------------
    def encode(self, line):
        if self.pieces is not None:
            ids = [self.piece_ids.get(p, self.unk) for p in self.source_sp.encode(line, out_type=str)]
        else:
            ids = self.source_sp.encode(line)
        return ids[: self.max_positions - 1] + [self.eos]

    def decode(self, ids):
        ids = [i for i in ids if i not in (self.pad, self.bos, self.eos)]
        if self.pieces is None:
            return self.target_sp.decode([i if 0 <= i < self.target_sp.get_piece_size() else self.unk for i in ids])
        text = self.target_sp.decode_pieces([self.pieces[i] if 0 <= i < len(self.pieces) else self.pieces[self.unk]
                                             for i in ids])
        return text.replace("\u2581", " ").strip(" ")

    # --- the graphs -----------------------------------------------------------------------------
    def start(self, rows):
        longest = max(len(r) for r in rows)
        src = np.full((len(rows), longest), self.pad, dtype=np.int64)
        for i, r in enumerate(rows):
            src[i, : len(r)] = r
        outputs = self.encoder.run(None, {"source_ids": src})
        names = [o.name for o in self.encoder.get_outputs()]
        state = dict(zip(names, outputs))
        empty = np.zeros((len(rows), self.kv_heads, 0, self.head_dim), dtype=np.float32)
        for i in range(self.layers):
            state[f"past_key_{i}"] = empty
            state[f"past_value_{i}"] = empty
        return state

    def step(self, state, tokens):
        feed = dict(state)
        feed["tokens"] = np.asarray(tokens, dtype=np.int64)
        outputs = self.decoder.run(None, feed)
        names = [o.name for o in self.decoder.get_outputs()]
        result = dict(zip(names, outputs))
        for i in range(self.layers):
            state[f"past_key_{i}"] = result[f"present_key_{i}"]
            state[f"past_value_{i}"] = result[f"present_value_{i}"]
        return result["logits"]

    @staticmethod
    def select(state, rows):
        return {k: v[rows] for k, v in state.items()}

    def limits(self, rows, a, b):
        cap = min(1024, self.max_positions)
        return [max(1, min(int(a * len(r) + b), cap)) for r in rows]

    # --- search ---------------------------------------------------------------------------------
    def greedy(self, rows, a, b):
        limits = self.limits(rows, a, b)
        state = self.start(rows)
        live = list(range(len(rows)))
        out = [[] for _ in rows]
        last = [self.bos] * len(rows)
        for t in range(max(limits) + 1):
            if not live:
                break
            logits = self.step(state, last)
            keep, next_last = [], []
            for j, s in enumerate(live):
                tok = self.eos if t + 1 >= limits[s] else int(np.argmax(logits[j]))
                if tok == self.eos:
                    continue
                out[s].append(tok)
                keep.append(j)
                next_last.append(tok)
            if len(keep) != len(live):
                state = self.select(state, np.asarray(keep, dtype=np.int64))
                live = [live[j] for j in keep]
            last = next_last
        return out

    def beam(self, rows, k, alpha, a, b):
        limits = self.limits(rows, a, b)
        state = self.start(rows)
        live = list(range(len(rows)))
        beams = 1
        prefixes = [[] for _ in rows]
        scores = np.zeros(len(rows), dtype=np.float32)
        last = [self.bos] * len(rows)
        finished = [[] for _ in rows]
        t = 0
        while live:
            lprobs = log_softmax(self.step(state, last))  # [live * beams, V]
            vocab = lprobs.shape[1]
            next_rows, next_tokens, next_scores, next_prefixes, next_live = [], [], [], [], []
            for si, s in enumerate(live):
                block = lprobs[si * beams:(si + 1) * beams]
                if t + 1 >= limits[s]:  # out of room: only eos
                    forced = np.full_like(block, -np.inf)
                    forced[:, self.eos] = block[:, self.eos]
                    block = forced
                cand = (block + scores[si * beams:(si + 1) * beams, None]).astype(np.float32).reshape(-1)
                width = min(2 * k, cand.size)
                top = np.argpartition(-cand, width - 1)[:width]
                top = top[np.lexsort((top, -cand[top]))]  # best first; ties by beam, then token
                done = finished[s]
                kept = []
                for c, index in enumerate(top):
                    if len(kept) >= k:
                        break
                    score = cand[index]
                    if not np.isfinite(score):
                        break
                    beam, token = divmod(int(index), vocab)
                    row = si * beams + beam
                    if token == self.eos:
                        if c < k and len(done) < k:
                            tokens = prefixes[row]
                            done.append((float(score) / length_penalty(len(tokens) + 1, alpha), tokens))
                    else:
                        kept.append((row, token, score))
                if len(done) >= k:
                    continue
                if not kept:
                    if not done:
                        row = si * beams
                        done.append((float(scores[row]) / length_penalty(len(prefixes[row]) + 1, alpha),
                                     prefixes[row]))
                    continue
                while len(kept) < k:  # a dead copy fills the beam
                    kept.append((kept[-1][0], kept[-1][1], np.float32(-np.inf)))
                for row, token, score in kept:
                    next_rows.append(row)
                    next_tokens.append(token)
                    next_scores.append(score)
                    next_prefixes.append(prefixes[row] + [token])
                next_live.append(s)
            if not next_live:
                break
            state = self.select(state, np.asarray(next_rows, dtype=np.int64))
            beams = k
            live, prefixes, last = next_live, next_prefixes, next_tokens
            scores = np.asarray(next_scores, dtype=np.float32)
            t += 1
        best = []
        for done in finished:
            ranked = sorted(done, key=lambda h: -h[0])  # stable: equal scores keep their order
            best.append(ranked[0][1] if ranked else [])
        return best

    def translate(self, lines, beam=1, lenpen=0.6, max_len_a=1.2, max_len_b=10, batch_size=64):
        out = [""] * len(lines)
        order = [i for i, line in enumerate(lines) if line.strip(" \t\r")]
        sources = {i: self.encode(lines[i]) for i in order}
        order.sort(key=lambda i: -len(sources[i]))  # longest first, as torchmt batches
        for begin in range(0, len(order), batch_size):
            batch = order[begin:begin + batch_size]
            rows = [sources[i] for i in batch]
            hyps = self.greedy(rows, max_len_a, max_len_b) if beam == 1 else \
                self.beam(rows, beam, lenpen, max_len_a, max_len_b)
            for i, ids in zip(batch, hyps):
                out[i] = self.decode(ids)
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", required=True, help="directory written by torchmt export --format onnx")
    p.add_argument("-i", "--input", default="-", help="input file, one sentence per line (default: stdin)")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the export's, 1 = greedy)")
    p.add_argument("--lenpen", type=float, default=None, help="GNMT length penalty alpha")
    p.add_argument("--max-len-a", type=float, default=None)
    p.add_argument("--max-len-b", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
    args = p.parse_args()
    if args.beam is not None and args.beam < 1:
        sys.exit("onnx_translate: --beam must be at least 1")
    if args.batch_size < 1:
        sys.exit("onnx_translate: --batch-size must be at least 1")
    try:
        translator = Translator(args.model, args.threads)
    except ModelError as e:
        sys.exit(f"onnx_translate: {e}")
    search = translator.config.get("search", {})
    beam = args.beam if args.beam is not None else int(search.get("beam_size", 1))
    lenpen = args.lenpen if args.lenpen is not None else float(search.get("length_penalty", 0.6))
    a = args.max_len_a if args.max_len_a is not None else float(search.get("max_len_a", 1.2))
    b = args.max_len_b if args.max_len_b is not None else int(search.get("max_len_b", 10))
    try:
        if args.input == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.input, "rb") as f:
                data = f.read()
        text = data.decode("utf-8")
    except OSError as e:
        sys.exit(f"onnx_translate: cannot read {args.input}: {e.strerror}")
    except UnicodeDecodeError as e:
        sys.exit(f"onnx_translate: {args.input if args.input != '-' else 'stdin'} is not UTF-8 (byte {e.start})")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in translator.translate(lines, beam, lenpen, a, b, args.batch_size):
        sys.stdout.write(line + "\n")


if __name__ == "__main__":
    main()
