"""Python side of bench_train: the reference model trained on the batches bench_train wrote.

Same initial weights, batches, recipe (label smoothing 0.1, sum loss / target tokens,
clip 1.0, Adam 0.9/0.98/1e-9 fused, the paper's schedule with factor 1 and warmup 4000) and
bf16 autocast as torchmt. Prints one JSON line: tokens_per_sec, valid_loss.
usage: train_reference.py BLOB fp32|bf16 WARMUP_STEPS THREADS
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import transformer_reference as ref  # noqa: E402


def main():
    blob = torch.load(sys.argv[1], weights_only=False)
    dtype = sys.argv[2]
    warmup = int(sys.argv[3])
    if int(sys.argv[4]) > 0:
        torch.set_num_threads(int(sys.argv[4]))
    cfg = json.loads(blob["config_json"])
    model = ref.from_config(cfg)
    model.load_state_dict({**model.state_dict(), **blob["state"]})
    params = list(model.parameters())  # tied tensors appear once
    opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    d = cfg["d_model"]
    use_bf16 = dtype == "bf16"
    tokens, seconds = 0, 0.0
    model.train()
    for i, (src, tgt_in, tgt_out) in enumerate(zip(blob["src"], blob["tgt_in"], blob["tgt_out"])):
        t0 = time.perf_counter()
        step = i + 1
        for g in opt.param_groups:
            g["lr"] = d ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
        src_mask, tgt_mask = ref.masks(src, tgt_in, 0)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(src, tgt_in, src_mask, tgt_mask)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt_out.view(-1), ignore_index=0,
                               reduction="sum", label_smoothing=0.1)
        loss.backward()
        n = int((tgt_out != 0).sum())
        for p in params:
            if p.grad is not None:
                p.grad.mul_(1.0 / n)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        if i >= warmup:
            seconds += time.perf_counter() - t0
            tokens += n
    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
        for src, tgt_in, tgt_out in zip(blob["valid_src"], blob["valid_tgt_in"], blob["valid_tgt_out"]):
            src_mask, tgt_mask = ref.masks(src, tgt_in, 0)
            logits = model(src, tgt_in, src_mask, tgt_mask)
            nll += float(F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt_out.view(-1), ignore_index=0,
                                         reduction="sum"))
            count += int((tgt_out != 0).sum())
    print(json.dumps({"tokens_per_sec": tokens / seconds, "valid_loss": nll / count}))


if __name__ == "__main__":
    main()
