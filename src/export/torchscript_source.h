#pragma once
// TorchScript source of the exported Transformer, one block per module type. Each block
// mirrors the native C++ module op for op (same ops, same order, same shapes), so the
// exported model computes the native model's function (the native CPU inference kernels
// round differently in the last bits) and kSearch picks tokens as src/decoding/search.cpp.
//
// Written for Module::define() with LibTorch's native resolver: `torch.` means aten, and
// dtypes are ScalarType integers (4 = int64, 6 = float32, 11 = bool) because `torch.bool`
// and friends are Python objects the C++ frontend does not know; so are exception classes,
// hence `assert` for errors.
#include <string>

#include "../kernels/int8_rule.h"

namespace torchmt::ts_source {

// Attributes: weight [out, in], bias [out].
inline const char* kLinear = R"TS(
def forward(self, x: Tensor) -> Tensor:
    return torch.linear(x, self.weight, self.bias)
)TS";

// Attributes: weight, bias [D]; eps 1e-5 as torch::nn::LayerNorm.
inline const char* kLayerNorm = R"TS(
def forward(self, x: Tensor) -> Tensor:
    return torch.layer_norm(x, [self.weight.size(0)], self.weight, self.bias, 1e-05)
)TS";

// `export --dtype int8`. Buffers: weight [out, in] int8, weight_scale [out] (127 / max|w| of
// the row: w ~ weight / weight_scale), bias [out] float. Each input row is quantized as the
// native int8 kernel does, by the one rule (src/kernels/int8_rule.h); the integer products are
// summed in float (exact while 127 * 127 * in < 2^24, in <= 1040).
inline const std::string kInt8Linear = "\ndef forward(self, x: Tensor) -> Tensor:\n" +
                                       kernels::int8_rule::torchscript_input_rule() + R"TS(    acc = torch.matmul(torch.round(xf * inverse), self.weight.float().t())
    return acc * (x_scale / self.weight_scale) + self.bias
)TS";

// `export --dtype int8`. Buffers: weight [V, D] int8, weight_scale [V] as kInt8Linear.
inline const char* kInt8Embedding = R"TS(
def forward(self, x: Tensor) -> Tensor:
    return torch.embedding(self.weight, x).float() / torch.embedding(self.weight_scale.unsqueeze(1), x)
)TS";

// Attribute: weight [V, D].
inline const char* kEmbedding = R"TS(
def forward(self, x: Tensor) -> Tensor:
    return torch.embedding(self.weight, x)
)TS";

// Buffer (sinusoidal) or parameter (learned): pe [1, max_positions, D]. `offset`: position of
// x's first row. rotary(): no tables (the layers get None).
inline const char* kPositionalEncoding = R"TS(
def forward(self, x: Tensor, offset: int) -> Tensor:
    length = x.size(1)
    assert offset + length <= self.pe.size(1), "sequence of " + str(offset + length) + " positions exceeds the model's max_positions " + str(self.pe.size(1))
    return x + self.pe.narrow(1, offset, length).to(x.dtype)

def rotary(self, offset: int, length: int) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    return (None, None)
)TS";

// positions: rope. Buffers cos, sin [max_positions, d_k]; nothing is added to x, rotary()
// hands the self-attention the tables of positions offset..offset+length-1.
inline const char* kRotaryPositionalEncoding = R"TS(
def forward(self, x: Tensor, offset: int) -> Tensor:
    length = x.size(1)
    assert offset + length <= self.cos.size(0), "sequence of " + str(offset + length) + " positions exceeds the model's max_positions " + str(self.cos.size(0))
    return x

def rotary(self, offset: int, length: int) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    return (self.cos.narrow(0, offset, length), self.sin.narrow(0, offset, length))
)TS";

// Submodules W_q W_k W_v W_o (q_proj k_proj v_proj o_proj for grouped-query attention: the
// exporter renames them in this source); attributes num_heads, head_dim, embed_dim, scale
// (= sqrt(head_dim)). K/V have n = outputs / head_dim heads; each serves num_heads / n query
// heads. attend(): the fused kernel where the native module uses it (CUDA, or fp32 in eval),
// the explicit softmax(QK^T / sqrt(d_k)) V otherwise; a query whose keys are all masked
// attends to all of them. cos/sin: rotary tables for query and key positions (self-attention).
inline const char* kMultiHeadAttention = R"TS(
def split_heads(self, y: Tensor) -> Tensor:
    return y.view([y.size(0), -1, y.size(-1) // self.head_dim, self.head_dim]).transpose(1, 2)

def merge_heads(self, x: Tensor) -> Tensor:
    return x.transpose(1, 2).contiguous().view([x.size(0), -1, self.embed_dim])

def queries(self, x: Tensor) -> Tensor:
    return self.split_heads(self.W_q.forward(x))

def keys(self, x: Tensor) -> Tensor:
    return self.split_heads(self.W_k.forward(x))

def values(self, x: Tensor) -> Tensor:
    return self.split_heads(self.W_v.forward(x))

def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.size(-1) // 2
    rotated = torch.cat([torch.neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)], -1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)

def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
    if k.size(1) != q.size(1):
        k = k.repeat_interleave(q.size(1) // k.size(1), 1)
        v = v.repeat_interleave(q.size(1) // v.size(1), 1)
    if q.is_cuda or q.element_size() == 4:
        if mask is None:
            out = torch.scaled_dot_product_attention(q, k, v, None, 0.0)
        else:
            full = torch.logical_or(mask, torch.logical_not(mask).all(-1, True))
            out = torch.scaled_dot_product_attention(q, k, v, full, 0.0)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.scale
        if mask is not None:
            full = torch.logical_or(mask, torch.logical_not(mask).all(-1, True))
            scores = scores.masked_fill(torch.logical_not(full), float("-inf"))
        out = torch.matmul(torch.softmax(scores, -1), v)
    return self.W_o.forward(self.merge_heads(out))

def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:
    q = self.queries(query)
    k = self.keys(key)
    if cos is not None and sin is not None:
        q = self.rotate(q, cos, sin)
        k = self.rotate(k, cos, sin)
    return self.attend(q, k, self.values(value), mask)
)TS";

// Submodules linear1, linear2; attribute activation: 0 relu, 1 gelu, 2 swish.
inline const char* kFeedForward = R"TS(
def forward(self, x: Tensor) -> Tensor:
    h = self.linear1.forward(x)
    if self.activation == 1:
        h = torch.gelu(h)
    elif self.activation == 2:
        h = torch.silu(h)
    else:
        h = torch.relu(h)
    return self.linear2.forward(h)
)TS";

// Attribute pre_norm: Pre-LN (x + sublayer(norm(x))) or the paper's post-norm.
// Mixture of experts (native: torchmt/model/moe_layer.h): softmax gate, each token's top_k
// experts, every expert run on its own tokens only, outputs weighted by the gate probability.
inline const char* kMoELayer = R"TS(
def forward(self, x: Tensor) -> Tensor:
    flat = x.reshape([-1, x.size(-1)])
    probs = torch.softmax(self.gate.forward(flat).float(), -1)
    top = probs.topk(self.top_k, -1)
    return self.experts.dispatch(flat, top[0], top[1]).view(x.shape)
)TS";

inline const char* kEncoderLayer = R"TS(
def forward(self, x: Tensor, mask: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:
    if self.pre_norm:
        n = self.norm1.forward(x)
        h = x + self.self_attn.forward(n, n, n, mask, cos, sin)
        return h + self.ffn.forward(self.norm2.forward(h))
    h = self.norm1.forward(x + self.self_attn.forward(x, x, x, mask, cos, sin))
    return self.norm2.forward(h + self.ffn.forward(h))
)TS";

// step(): x [B, 1, D] is the newest target position t; self_k/self_v hold positions < t
// ([B, G, t, d_k], empty at t = 0) and come back extended by position t (its key rotated at
// t when cos/sin are given). Attribute pre_norm as the encoder layer.
inline const char* kDecoderLayer = R"TS(
def forward(self, x: Tensor, memory: Tensor, src_mask: Optional[Tensor], tgt_mask: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:
    if self.pre_norm:
        n = self.norm1.forward(x)
        h = x + self.self_attn.forward(n, n, n, tgt_mask, cos, sin)
        h = h + self.cross_attn.forward(self.norm2.forward(h), memory, memory, src_mask, None, None)
        return h + self.ffn.forward(self.norm3.forward(h))
    h = self.norm1.forward(x + self.self_attn.forward(x, x, x, tgt_mask, cos, sin))
    h = self.norm2.forward(h + self.cross_attn.forward(h, memory, memory, src_mask, None, None))
    return self.norm3.forward(h + self.ffn.forward(h))

def cross_kv(self, memory: Tensor) -> Tuple[Tensor, Tensor]:
    return (self.cross_attn.keys(memory), self.cross_attn.values(memory))

def step(self, x: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor, cross_v: Tensor, src_mask: Tensor, cos: Optional[Tensor], sin: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    n = x
    if self.pre_norm:
        n = self.norm1.forward(x)
    q = self.self_attn.queries(n)
    new_k = self.self_attn.keys(n)
    if cos is not None and sin is not None:
        q = self.self_attn.rotate(q, cos, sin)
        new_k = self.self_attn.rotate(new_k, cos, sin)
    k = torch.cat([self_k, new_k], 2)
    v = torch.cat([self_v, self.self_attn.values(n)], 2)
    if self.pre_norm:
        h = x + self.self_attn.attend(q, k, v, None)
        h = h + self.cross_attn.attend(self.cross_attn.queries(self.norm2.forward(h)), cross_k, cross_v, src_mask)
        return (h + self.ffn.forward(self.norm3.forward(h)), k, v)
    h = self.norm1.forward(x + self.self_attn.attend(q, k, v, None))
    h = self.norm2.forward(h + self.cross_attn.attend(self.cross_attn.queries(h), cross_k, cross_v, src_mask))
    return (self.norm3.forward(h + self.ffn.forward(h)), k, v)
)TS";

// The top-level module: submodules src_embedding, tgt_embedding, pos_encoding,
// encoder_layers, decoder_layers (containers whose methods are generated per layer count,
// see torchscript_exporter.cpp), fc_out, and for Pre-LN encoder_norm and decoder_norm (the
// exporter adds encoder_out / decoder_out: the final LayerNorm, or nothing); attributes
// embed_scale, pad_id, bos_id, eos_id, max_positions.
//
// Incremental decoding is the decoder interface of torchmt::IncrementalDecoder, with the
// state held by the caller as one list of tensors (L = decoder layers):
//   state = [src_mask, self_k[0..L), self_v[0..L), cross_k[0..L), cross_v[0..L)]
//   start(src) -> state        encode; self K/V empty ([B, G, 0, d_k], G = kv_heads)
//   step(last, t, state) -> log-probabilities [N, V] (fp32); extends self K/V in place
//   select(index, state)       rows kept / reordered / duplicated (beams, finished rows)
//   reorder(index, state)      a select within sentences: only the self-attention K/V move
// torchmt's native search (src/decoding/search.cpp) drives these methods for `torchmt
// translate -m model.ts`; kSearch below is the same search in TorchScript for Python users.
inline const char* kTransformer = R"TS(
def padding_mask(self, tokens: Tensor) -> Tensor:
    return tokens.ne(self.pad_id).unsqueeze(1).unsqueeze(2)

def target_mask(self, tgt: Tensor) -> Tensor:
    n = tgt.size(1)
    causal = torch.tril(torch.ones([n, n], dtype=11, device=tgt.device)).view([1, 1, n, n])
    keys = self.padding_mask(tgt)
    if n > 0:
        keys.select(3, 0).fill_(True)  # the start token, which may be pad_id (Marian)
    return keys & causal

def encode_masked(self, src: Tensor, src_mask: Tensor) -> Tensor:
    x = self.pos_encoding.forward(self.src_embedding.forward(src) * self.embed_scale, 0)
    rotary = self.pos_encoding.rotary(0, x.size(1))
    return self.encoder_out(self.encoder_layers.forward(x, src_mask, rotary[0], rotary[1]))

def encode(self, src: Tensor) -> Tensor:
    src = src.to(self.fc_out.weight.device)
    return self.encode_masked(src, self.padding_mask(src))

def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
    src = src.to(self.fc_out.weight.device)
    tgt_in = tgt_in.to(self.fc_out.weight.device)
    src_mask = self.padding_mask(src)
    tgt_mask = self.target_mask(tgt_in)
    memory = self.encode_masked(src, src_mask)
    x = self.pos_encoding.forward(self.tgt_embedding.forward(tgt_in) * self.embed_scale, 0)
    rotary = self.pos_encoding.rotary(0, x.size(1))
    x = self.decoder_layers.forward(x, memory, src_mask, tgt_mask, rotary[0], rotary[1])
    return self.fc_out.forward(self.decoder_out(x))

def start(self, src: Tensor) -> List[Tensor]:
    src = src.to(self.fc_out.weight.device)
    src_mask = self.padding_mask(src)
    memory = self.encode_masked(src, src_mask)
    cross = self.decoder_layers.start(memory)
    state: List[Tensor] = [src_mask]
    for k in cross[0]:
        state.append(k.narrow(2, 0, 0))
    for v in cross[1]:
        state.append(v.narrow(2, 0, 0))
    for k in cross[0]:
        state.append(k)
    for v in cross[1]:
        state.append(v)
    return state

def step(self, last: Tensor, t: int, state: List[Tensor]) -> Tensor:
    x = self.pos_encoding.forward(self.tgt_embedding.forward(last.unsqueeze(1)) * self.embed_scale, t)
    rotary = self.pos_encoding.rotary(t, 1)
    x = self.decoder_out(self.decoder_layers.step(x, state, rotary[0], rotary[1]))
    return torch.log_softmax(self.fc_out.forward(x.squeeze(1)).to(6), -1)

def select(self, index: Tensor, state: List[Tensor]) -> None:
    for i in range(len(state)):
        state[i] = state[i].index_select(0, index)

def reorder(self, index: Tensor, state: List[Tensor]) -> None:
    layers = (len(state) - 1) // 4
    for i in range(1, 1 + 2 * layers):
        state[i] = state[i].index_select(0, index)
)TS";

// Greedy and beam search over the decoder interface above (start / step / select /
// reorder and the attributes pad_id, bos_id, eos_id, max_positions), step for step what
// torchmt::greedy_search and torchmt::beam_search (src/decoding/search.cpp) do: the same
// length limits, forced eos, per-row top-k merged with ties in (beam, token) order, eos
// accepted only among the k best candidates, the best prefix when every continuation is
// impossible, and the first of equally scored hypotheses. tests/export_test.cpp compares
// the two on real data and on scripted decoders.
inline const char* kSearch = R"TS(
def length_penalty(self, length: int, alpha: float) -> float:
    if alpha == 0.0:
        return 1.0
    return ((5.0 + float(length)) / 6.0) ** alpha

def length_limits(self, src: Tensor, cap: int, max_len_a: float, max_len_b: int) -> List[int]:
    lengths: List[int] = src.ne(self.pad_id).sum(1).cpu().tolist()
    out: List[int] = []
    for n in lengths:
        limit = int(max_len_a * float(n) + float(max_len_b))
        out.append(max(1, min(limit, cap)))
    return out

def greedy(self, src: Tensor, cap: int, lenpen: float, max_len_a: float, max_len_b: int) -> Tuple[List[List[int]], List[float]]:
    batch = src.size(0)
    limits = self.length_limits(src, cap, max_len_a, max_len_b)
    tokens: List[List[int]] = []
    log_probs: List[float] = []
    scores: List[float] = []
    live: List[int] = []
    for i in range(batch):
        empty: List[int] = []
        tokens.append(empty)
        log_probs.append(0.0)
        scores.append(0.0)
        live.append(i)
    if batch == 0:
        return (tokens, scores)
    state = self.start(src)
    device = state[0].device
    last = torch.full([batch], self.bos_id, dtype=4, device=device)
    t = 0
    while len(live) > 0:
        lprobs = self.step(last, t, state)
        best = lprobs.max(-1)
        best_lp: List[float] = best[0].cpu().tolist()
        best_tok: List[int] = best[1].cpu().tolist()
        eos_lp: List[float] = lprobs.select(1, self.eos_id).cpu().tolist()
        keep_rows: List[int] = []
        keep_live: List[int] = []
        next_tokens: List[int] = []
        for r in range(len(live)):
            s = live[r]
            tok = best_tok[r]
            if t + 1 >= limits[s]:
                tok = self.eos_id
                log_probs[s] = log_probs[s] + eos_lp[r]
            else:
                log_probs[s] = log_probs[s] + best_lp[r]
            if tok == self.eos_id:
                scores[s] = log_probs[s] / self.length_penalty(len(tokens[s]) + 1, lenpen)
            else:
                tokens[s].append(tok)
                keep_rows.append(r)
                keep_live.append(s)
                next_tokens.append(tok)
        if len(keep_rows) == 0:
            break
        if len(keep_rows) < len(live):
            self.select(torch.tensor(keep_rows, dtype=4, device=device), state)
        live = keep_live
        last = torch.tensor(next_tokens, dtype=4, device=device)
        t += 1
    return (tokens, scores)

# Per sentence, the `width` best of its k rows' candidates [N, V] (each row's best from
# topk), best first, equal scores in order of flat index beam * V + token; NaN counts as -inf.
def merge_candidates(self, cand: Tensor, k: int, width: int) -> Tuple[List[List[float]], List[List[int]]]:
    vocab = cand.size(1)
    n_live = cand.size(0) // k
    row_width = min(width, vocab)
    top = cand.topk(row_width, -1)
    row_scores = top[0].cpu()
    row_scores = row_scores.masked_fill(torch.isnan(row_scores), float("-inf")).view([n_live, k * row_width])
    beams = torch.arange(k, dtype=4).view([1, k, 1]) * vocab
    flat = (top[1].cpu().view([n_live, k, row_width]) + beams).view([n_live, k * row_width])
    by_index = flat.sort(-1)
    by_score = torch.sort(row_scores.gather(1, by_index[1]), dim=-1, descending=True, stable=True)
    merged_index = by_index[0].gather(1, by_score[1])
    top_scores: List[List[float]] = by_score[0].narrow(1, 0, width).tolist()
    top_index: List[List[int]] = merged_index.narrow(1, 0, width).tolist()
    return (top_scores, top_index)

def beam_search(self, src: Tensor, k: int, cap: int, lenpen: float, max_len_a: float, max_len_b: int) -> Tuple[List[List[int]], List[float]]:
    batch = src.size(0)
    limits = self.length_limits(src, cap, max_len_a, max_len_b)
    neg_inf = float("-inf")
    best_tokens: List[List[int]] = []
    best_scores: List[float] = []
    done: List[int] = []
    live: List[int] = []
    for i in range(batch):
        empty: List[int] = []
        best_tokens.append(empty)
        best_scores.append(neg_inf)
        done.append(0)
        live.append(i)
    if batch == 0:
        return (best_tokens, best_scores)
    state = self.start(src)
    device = state[0].device
    # k copies of every sentence; only the first may expand at step 0 (the others score -inf).
    self.select(torch.arange(batch, dtype=4, device=device).repeat_interleave(k), state)
    prefixes: List[List[int]] = []
    scores: List[float] = []
    for i in range(batch * k):
        no_tokens: List[int] = []
        prefixes.append(no_tokens)
        if i % k == 0:
            scores.append(0.0)
        else:
            scores.append(neg_inf)
    last = torch.full([batch * k], self.bos_id, dtype=4, device=device)
    t = 0
    while len(live) > 0:
        n_live = len(live)
        lprobs = self.step(last, t, state)
        vocab = lprobs.size(1)
        # Sentences at their length limit may only end.
        forced_rows: List[int] = []
        for s in range(n_live):
            if t + 1 >= limits[live[s]]:
                for j in range(k):
                    forced_rows.append(s * k + j)
        if len(forced_rows) > 0:
            rows_t = torch.tensor(forced_rows, dtype=4, device=device)
            eos_col = lprobs.index_select(0, rows_t).select(1, self.eos_id).clone()
            lprobs.index_fill_(0, rows_t, neg_inf)
            indices: List[Optional[Tensor]] = [rows_t, torch.full_like(rows_t, self.eos_id)]
            lprobs.index_put_(indices, eos_col)
        cand = lprobs + torch.tensor(scores, dtype=6, device=device).unsqueeze(1)
        width = min(2 * k, k * vocab)
        merged = self.merge_candidates(cand, k, width)
        top_scores = merged[0]
        top_index = merged[1]
        next_rows: List[int] = []
        next_live: List[int] = []
        next_tokens: List[int] = []
        next_scores: List[float] = []
        next_prefixes: List[List[int]] = []
        for s in range(n_live):
            sentence = live[s]
            rows: List[int] = []
            toks: List[int] = []
            kept: List[float] = []
            for c in range(width):
                if len(rows) >= k:
                    break
                score = top_scores[s][c]
                if score != score or score == neg_inf or score == -neg_inf:
                    break
                beam = top_index[s][c] // vocab
                token = top_index[s][c] % vocab
                row = s * k + beam
                if token == self.eos_id:
                    # Only an eos among the k best candidates ends a hypothesis (as fairseq).
                    if c < k and done[sentence] < k:
                        normalised = score / self.length_penalty(len(prefixes[row]) + 1, lenpen)
                        if done[sentence] == 0 or normalised > best_scores[sentence]:
                            best_scores[sentence] = normalised
                            best_tokens[sentence] = prefixes[row]
                        done[sentence] = done[sentence] + 1
                else:
                    rows.append(row)
                    toks.append(token)
                    kept.append(score)
            # A sentence is finished once it holds k complete hypotheses (fairseq's criterion).
            if done[sentence] >= k:
                continue
            if len(rows) == 0:
                # Every continuation is impossible: the best prefix rather than nothing.
                if done[sentence] == 0:
                    done[sentence] = 1
                    best_tokens[sentence] = prefixes[s * k]
                    best_scores[sentence] = scores[s * k] / self.length_penalty(len(prefixes[s * k]) + 1, lenpen)
                continue
            while len(rows) < k:
                rows.append(rows[-1])
                toks.append(toks[-1])
                kept.append(neg_inf)
            for j in range(k):
                next_rows.append(rows[j])
                next_tokens.append(toks[j])
                next_scores.append(kept[j])
                prefix = prefixes[rows[j]].copy()
                prefix.append(toks[j])
                next_prefixes.append(prefix)
            next_live.append(sentence)
        if len(next_live) == 0:
            break
        index = torch.tensor(next_rows, dtype=4, device=device)
        if len(next_live) == len(live):
            self.reorder(index, state)
        else:
            self.select(index, state)
        live = next_live
        prefixes = next_prefixes
        scores = next_scores
        last = torch.tensor(next_tokens, dtype=4, device=device)
        t += 1
    return (best_tokens, best_scores)

def translate_with_scores(self, src: Tensor, max_len: int = 1024, beam: int = 1, lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: int = 10) -> Tuple[List[List[int]], List[float]]:
    assert beam >= 1, "beam size must be at least 1, got " + str(beam)
    assert src.dim() == 2, "src must be [batch, length] token ids"
    cap = self.max_positions
    if max_len > 0 and max_len < cap:
        cap = max_len
    if beam == 1:
        return self.greedy(src, cap, lenpen, max_len_a, max_len_b)
    return self.beam_search(src, beam, cap, lenpen, max_len_a, max_len_b)

def translate(self, src: Tensor, max_len: int = 1024, beam: int = 1, lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: int = 10) -> List[List[int]]:
    return self.translate_with_scores(src, max_len, beam, lenpen, max_len_a, max_len_b)[0]
)TS";

}  // namespace torchmt::ts_source
