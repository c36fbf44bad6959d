"""Python side of bench_train: the reference model trained on the batches bench_train wrote.

Same initial weights, batches, recipe (label smoothing 0.1, sum loss / target tokens,
clip 1.0, Adam 0.9/0.98/1e-9 fused, the paper's schedule with factor 1 and warmup 4000) and
bf16 autocast as torchmt, on the same device. Prints one JSON line: tokens_per_sec, valid_loss.
usage: train_reference.py BLOB --dtype fp32|bf16 --warmup N --threads N --device cpu|cuda
                          --attention explicit|sdpa
--attention sdpa swaps the documents' explicit softmax(QK^T)V for F.scaled_dot_product_attention
(PyTorch's fused kernels) in the same module: the fastest plain-PyTorch peer.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import transformer_reference as ref  # noqa: E402


def sdpa_forward(self, query, key, value, mask=None, return_weights=False):
    """ref.MultiHeadAttention.forward with PyTorch's fused attention kernel."""
    assert not return_weights
    b = query.size(0)
    q = self.W_q(query).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, d_k]
    k = self.W_k(key).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
    v = self.W_v(value).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0)
    return self.W_o(out.transpose(1, 2).contiguous().view(b, -1, self.embed_dim))  # [B, T, D]


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("blob")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit")
    args = p.parse_args()
    blob = torch.load(args.blob, weights_only=False)
    dtype, warmup, device = args.dtype, args.warmup, torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.attention == "sdpa":
        ref.MultiHeadAttention.forward = sdpa_forward
    cfg = json.loads(blob["config_json"])
    model = ref.from_config(cfg)
    model.load_state_dict({**model.state_dict(), **blob["state"]})
    model.to(device)
    # Token counts from the CPU copies, batches on the device before any timing (as bench_train).
    counts = [int((t != 0).sum()) for t in blob["tgt_out"]]
    train = [[x.to(device) for x in triple] for triple in zip(blob["src"], blob["tgt_in"], blob["tgt_out"])]
    valid = [[x.to(device) for x in triple]
             for triple in zip(blob["valid_src"], blob["valid_tgt_in"], blob["valid_tgt_out"])]
    params = list(model.parameters())  # tied tensors appear once
    opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    d = cfg["d_model"]
    use_bf16 = dtype == "bf16"
    tokens, t0 = 0, None
    model.train()
    for i, (src, tgt_in, tgt_out) in enumerate(train):
        if i == warmup:
            synchronize(device)
            t0 = time.perf_counter()
        step = i + 1
        for g in opt.param_groups:
            g["lr"] = d ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
        src_mask, tgt_mask = ref.masks(src, tgt_in, 0)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(src, tgt_in, src_mask, tgt_mask)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt_out.view(-1), ignore_index=0,
                               reduction="sum", label_smoothing=0.1)
        loss.backward()
        n = counts[i]
        torch._foreach_mul_([p.grad for p in params if p.grad is not None], 1.0 / n)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        if i >= warmup:
            tokens += n
    synchronize(device)
    seconds = time.perf_counter() - t0
    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        for src, tgt_in, tgt_out in valid:
            src_mask, tgt_mask = ref.masks(src, tgt_in, 0)
            logits = model(src, tgt_in, src_mask, tgt_mask)
            nll += float(F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt_out.view(-1), ignore_index=0,
                                         reduction="sum"))
            count += int((tgt_out != 0).sum())
    print(json.dumps({"tokens_per_sec": tokens / seconds, "valid_loss": nll / count}))


if __name__ == "__main__":
    main()
