"""Python reference Transformer for parity tests.

Written for torchmt from the reference document (../shared/seeds, section 8 of the complete
model): the same classes, submodule names and computation, so that a state dict moves between
this model and torchmt's C++ modules unchanged. The only addition is an `activation` switch
(the paper's ReLU or the reference code's GELU). Test oracle only, never used by the product.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def forward(self, query, key, value, mask=None, return_weights=False):
        b = query.size(0)
        q = self.W_q(query).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_k(key).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_v(value).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        out = torch.matmul(self.dropout(weights), v)
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


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout=0.1, activation="gelu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout)
        self.ffn = FeedForward(embed_dim, ff_dim, dropout, activation)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout=0.1, activation="gelu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads, dropout)
        self.ffn = FeedForward(embed_dim, ff_dim, dropout, activation)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.norm3 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, encoder_output, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, encoder_output, encoder_output, src_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class PositionalEncoding(nn.Module):
    def __init__(self, embed_dim, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        pe = torch.zeros(max_len, embed_dim)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, embed_dim, 2).float() * (-math.log(10000.0) / embed_dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1), :])


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, embed_dim=512, num_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, ff_dim=2048, dropout=0.1, max_len=5000, activation="gelu"):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, embed_dim)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, embed_dim)
        self.pos_encoding = PositionalEncoding(embed_dim, max_len, dropout)
        self.encoder_layers = nn.ModuleList(
            [TransformerEncoderLayer(embed_dim, num_heads, ff_dim, dropout, activation) for _ in range(num_encoder_layers)])
        self.decoder_layers = nn.ModuleList(
            [TransformerDecoderLayer(embed_dim, num_heads, ff_dim, dropout, activation) for _ in range(num_decoder_layers)])
        self.fc_out = nn.Linear(embed_dim, tgt_vocab_size)
        self.embed_dim = embed_dim

    def encode(self, src, src_mask=None):
        x = self.pos_encoding(self.src_embedding(src) * math.sqrt(self.embed_dim))
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return x

    def decode(self, tgt, encoder_output, src_mask=None, tgt_mask=None):
        x = self.pos_encoding(self.tgt_embedding(tgt) * math.sqrt(self.embed_dim))
        for layer in self.decoder_layers:
            x = layer(x, encoder_output, src_mask, tgt_mask)
        return x

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.fc_out(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))


def from_config(cfg):
    """Builds the reference model from a torchmt ModelConfig JSON dict."""
    model = Transformer(cfg["src_vocab_size"], cfg["tgt_vocab_size"], cfg["d_model"], cfg["num_heads"],
                        cfg["num_encoder_layers"], cfg["num_decoder_layers"], cfg["d_ff"], cfg["dropout"],
                        cfg.get("max_positions", cfg.get("max_len")), cfg["activation"])
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
