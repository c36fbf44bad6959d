"""Python reference Transformer for parity tests.

Written for torchmt from the reference document (../shared/seeds, section 8 of the complete
model): the same classes, submodule names and computation, so that a state dict moves between
this model and torchmt's C++ modules unchanged. Additions: an `activation` switch (the paper's ReLU
or the reference code's GELU), and the documents' modern variants (002, 004) as switches of the
same model: Pre-LN layers with a final LayerNorm per stack, rotary positions
(`apply_rotary_pos_emb` / `rotate_half` on self-attention), learned positions, and
`GroupedQueryAttention` (q_proj / k_proj / v_proj over `num_groups` K/V heads, o_proj out), and
`MoELayer` (experts / gate / top_k) in place of a layer's FeedForward.
Test oracle only, never used by the product.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary_pos_emb(q, k, sin, cos):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def attention(q, k, v, mask, dropout):
    """q [B, H, Tq, d], k/v [B, G, Tk, d]: each K/V head serves H / G query heads."""
    if k.size(1) != q.size(1):
        k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
        v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(dropout(weights), v), weights


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_groups, dropout=0.1):
        super().__init__()
        self.num_heads = num_heads
        self.num_groups = num_groups
        self.head_dim = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, self.head_dim * num_groups)
        self.v_proj = nn.Linear(d_model, self.head_dim * num_groups)
        self.o_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None, return_weights=False, rotary=None):
        b = q.size(0)
        q = self.q_proj(q).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(k).view(b, -1, self.num_groups, self.head_dim).transpose(1, 2)
        v = self.v_proj(v).view(b, -1, self.num_groups, self.head_dim).transpose(1, 2)
        if rotary is not None:
            q, k = apply_rotary_pos_emb(q, k, rotary[1], rotary[0])
        out, weights = attention(q, k, v, mask, self.dropout)
        out = self.o_proj(out.transpose(1, 2).contiguous().view(b, -1, self.num_heads * self.head_dim))
        return (out, weights) if return_weights else out


class SelfAttention(nn.Module):
    """Reference 000 section 2.4: one head of width embed_dim, no output projection."""

    def __init__(self, embed_dim):
        super().__init__()
        self.embed_dim = embed_dim
        self.W_q = nn.Linear(embed_dim, embed_dim)
        self.W_k = nn.Linear(embed_dim, embed_dim)
        self.W_v = nn.Linear(embed_dim, embed_dim)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.embed_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return torch.matmul(weights, v), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.1):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.W_q = nn.Linear(embed_dim, embed_dim)
        self.W_k = nn.Linear(embed_dim, embed_dim)
        self.W_v = nn.Linear(embed_dim, embed_dim)
        self.W_o = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None, return_weights=False, rotary=None):
        b = query.size(0)
        q = self.W_q(query).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_k(key).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_v(value).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        if rotary is not None:
            q, k = apply_rotary_pos_emb(q, k, rotary[1], rotary[0])
        out, weights = attention(q, k, v, mask, self.dropout)
        out = out.transpose(1, 2).contiguous().view(b, -1, self.embed_dim)
        out = self.W_o(out)
        return (out, weights) if return_weights else out


class FeedForward(nn.Module):
    def __init__(self, embed_dim, ff_dim, dropout=0.1, activation="gelu"):
        super().__init__()
        self.linear1 = nn.Linear(embed_dim, ff_dim)
        self.linear2 = nn.Linear(ff_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.activation = nn.GELU() if activation == "gelu" else nn.ReLU()

    def forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class MoELayer(nn.Module):
    """Reference 002's MoELayer (experts, gate, top_k) with this model's FeedForward experts;
    computed as the document does, every expert on every token, masked by the routing."""

    def __init__(self, d_model, num_experts, top_k=2, ff_dim=2048, dropout=0.1, activation="gelu"):
        super().__init__()
        self.experts = nn.ModuleList([FeedForward(d_model, ff_dim, dropout, activation) for _ in range(num_experts)])
        self.gate = nn.Linear(d_model, num_experts)
        self.top_k = top_k

    def forward(self, x):
        gates = F.softmax(self.gate(x), dim=-1)
        topk_values, topk_indices = torch.topk(gates, self.top_k, dim=-1)
        output = torch.zeros_like(x)
        expert_output = torch.stack([e(x) for e in self.experts], dim=-2)
        for i in range(self.top_k):
            expert_mask = F.one_hot(topk_indices[..., i], num_classes=len(self.experts))
            output += (expert_output * expert_mask.unsqueeze(-1)).sum(dim=-2) * topk_values[..., i:i + 1]
        return output

    def aux_loss(self, x):
        """Switch / GShard load balancing: experts * sum_e f_e * P_e over the N x top_k choices."""
        gates = F.softmax(self.gate(x.reshape(-1, x.size(-1))), dim=-1)
        chosen = torch.topk(gates, self.top_k, dim=-1).indices.reshape(-1)
        share = torch.bincount(chosen, minlength=len(self.experts)).float() / chosen.numel()
        return len(self.experts) * (share * gates.mean(0)).sum()


def make_ffn(embed_dim, ff_dim, dropout, activation, moe):
    if moe:
        return MoELayer(embed_dim, moe[0], moe[1], ff_dim, dropout, activation)
    return FeedForward(embed_dim, ff_dim, dropout, activation)


def make_attention(embed_dim, num_heads, dropout, kv_heads):
    if kv_heads and kv_heads != num_heads:
        return GroupedQueryAttention(embed_dim, num_heads, kv_heads, dropout)
    return MultiHeadAttention(embed_dim, num_heads, dropout)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout=0.1, activation="gelu", norm="post", kv_heads=0,
                 moe=None):
        super().__init__()
        self.self_attn = make_attention(embed_dim, num_heads, dropout, kv_heads)
        self.ffn = make_ffn(embed_dim, ff_dim, dropout, activation, moe)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"

    def forward(self, x, mask=None, rotary=None):
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask, rotary=rotary))
            return x + self.dropout(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask, rotary=rotary)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout=0.1, activation="gelu", norm="post", kv_heads=0,
                 moe=None):
        super().__init__()
        self.self_attn = make_attention(embed_dim, num_heads, dropout, kv_heads)
        self.cross_attn = make_attention(embed_dim, num_heads, dropout, kv_heads)
        self.ffn = make_ffn(embed_dim, ff_dim, dropout, activation, moe)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.norm3 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"

    def forward(self, x, encoder_output, src_mask=None, tgt_mask=None, rotary=None):
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, tgt_mask, rotary=rotary))
            h = self.norm2(x)
            x = x + self.dropout(self.cross_attn(h, encoder_output, encoder_output, src_mask))
            return x + self.dropout(self.ffn(self.norm3(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask, rotary=rotary)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, encoder_output, encoder_output, src_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class PositionalEncoding(nn.Module):
    """kind: sinusoidal (the paper's table, buffer pe), learned (parameter pe), or rope (nothing
    added; buffers cos / sin [max_len, head_dim] for the self-attention's rotation)."""

    def __init__(self, embed_dim, max_len=5000, dropout=0.1, kind="sinusoidal", head_dim=0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.kind = kind
        if kind == "rope":
            inv_freq = torch.exp(torch.arange(0, head_dim, 2, dtype=torch.float64) * (-math.log(10000.0) / head_dim))
            angles = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1) * inv_freq
            angles = torch.cat([angles, angles], dim=1)
            self.register_buffer("cos", torch.cos(angles).float())
            self.register_buffer("sin", torch.sin(angles).float())
            return
        if kind == "learned":
            self.pe = nn.Parameter(torch.randn(1, max_len, embed_dim) * embed_dim ** -0.5)
            return
        pe = torch.zeros(max_len, embed_dim)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, embed_dim, 2).float() * (-math.log(10000.0) / embed_dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        if self.kind == "rope":
            return self.dropout(x)
        return self.dropout(x + self.pe[:, : x.size(1), :])

    def rotary(self, length):
        if self.kind != "rope":
            return None
        return self.cos[:length], self.sin[:length]


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, embed_dim=512, num_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, ff_dim=2048, dropout=0.1, max_len=5000, activation="gelu", norm="post",
                 positions="sinusoidal", kv_heads=0, moe=None):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, embed_dim)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, embed_dim)
        self.pos_encoding = PositionalEncoding(embed_dim, max_len, dropout, positions, embed_dim // num_heads)
        self.encoder_layers = nn.ModuleList(
            [TransformerEncoderLayer(embed_dim, num_heads, ff_dim, dropout, activation, norm, kv_heads, moe)
             for _ in range(num_encoder_layers)])
        self.decoder_layers = nn.ModuleList(
            [TransformerDecoderLayer(embed_dim, num_heads, ff_dim, dropout, activation, norm, kv_heads, moe)
             for _ in range(num_decoder_layers)])
        self.fc_out = nn.Linear(embed_dim, tgt_vocab_size)
        if norm == "pre":
            self.encoder_norm = nn.LayerNorm(embed_dim)
            self.decoder_norm = nn.LayerNorm(embed_dim)
        self.pre_norm = norm == "pre"
        self.embed_dim = embed_dim

    def encode(self, src, src_mask=None):
        x = self.pos_encoding(self.src_embedding(src) * math.sqrt(self.embed_dim))
        rotary = self.pos_encoding.rotary(x.size(1))
        for layer in self.encoder_layers:
            x = layer(x, src_mask, rotary)
        return self.encoder_norm(x) if self.pre_norm else x

    def decode(self, tgt, encoder_output, src_mask=None, tgt_mask=None):
        x = self.pos_encoding(self.tgt_embedding(tgt) * math.sqrt(self.embed_dim))
        rotary = self.pos_encoding.rotary(x.size(1))
        for layer in self.decoder_layers:
            x = layer(x, encoder_output, src_mask, tgt_mask, rotary)
        return self.decoder_norm(x) if self.pre_norm else x

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.fc_out(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))


def from_config(cfg):
    """Builds the reference model from a torchmt ModelConfig JSON dict."""
    model = Transformer(cfg["src_vocab_size"], cfg["tgt_vocab_size"], cfg["d_model"], cfg["num_heads"],
                        cfg["num_encoder_layers"], cfg["num_decoder_layers"], cfg["d_ff"], cfg["dropout"],
                        cfg.get("max_positions", cfg.get("max_len")), cfg["activation"], cfg.get("norm", "post"),
                        cfg.get("positions", "sinusoidal"), cfg.get("kv_heads", 0),
                        (cfg["experts"], cfg["top_k"]) if cfg.get("ffn") == "moe" else None)
    if cfg.get("tie_embeddings"):
        model.tgt_embedding.weight = model.src_embedding.weight
        model.fc_out.weight = model.src_embedding.weight
    return model


def masks(src, tgt, pad_id):
    """Same convention as torchmt: bool, True = may attend."""
    src_mask = (src != pad_id).unsqueeze(1).unsqueeze(2)
    t = tgt.size(1)
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=tgt.device)).view(1, 1, t, t)
    return src_mask, (tgt != pad_id).unsqueeze(1).unsqueeze(2) & causal
