"""Oracle side of the C++/Python parity tests (tests/model_parity_test.cpp).

  parity.py model IN.pt OUT.pt   IN holds config_json, state.<key> tensors, src, tgt
  parity.py mha IN.pt OUT.pt     IN holds config_json, state.<key>, query, key, mask
  parity.py self_attention IN.pt OUT.pt   IN holds config_json, state.<key> of SelfAttention, x, mask
  parity.py moe IN.pt OUT.pt     IN holds config_json, state.<key> of one MoELayer, x
  parity.py count CONFIG_JSON    prints the reference parameter count
  parity.py checkpoint CKPT      loads a torchmt checkpoint into the reference model, prints its
                                 SentencePiece model size

Exits 1 with a message when the state dict keys or shapes differ from the reference's.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_reference as ref  # noqa: E402


def load_state(model, blob):
    theirs = {k[len("state."):]: v for k, v in blob.items() if k.startswith("state.")}
    ours = model.state_dict()
    if set(ours) != set(theirs):
        print("state dict keys differ; only in C++: %s; only in Python: %s"
              % (sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))))
        sys.exit(1)
    bad = [k for k in ours if tuple(ours[k].shape) != tuple(theirs[k].shape)]
    if bad:
        print("shape mismatch: " + ", ".join("%s C++ %s Python %s" % (k, tuple(theirs[k].shape), tuple(ours[k].shape)) for k in bad))
        sys.exit(1)
    model.load_state_dict(theirs, strict=True)


def main():
    mode = sys.argv[1]
    torch.set_grad_enabled(False)
    if mode == "count":
        model = ref.from_config(json.loads(sys.argv[2]))
        print(sum(p.numel() for p in model.parameters()))
        return
    # Written by the C++ test (torch::pickle_save tags its dict types): trusted, not weights-only.
    if mode == "checkpoint":
        ck = torch.load(sys.argv[2], weights_only=False)
        model = ref.from_config(json.loads(ck["model_config"]))
        missing, unexpected = model.load_state_dict(ck["model"], strict=False)
        buffers = {"pos_encoding.pe", "pos_encoding.cos", "pos_encoding.sin"}  # recomputed, not saved
        if unexpected or [k for k in missing if k not in buffers]:
            print("checkpoint does not fit the reference: missing %s unexpected %s" % (missing, unexpected))
            sys.exit(1)
        print(ck["format"], ck["position"]["step"], int(ck["src_spm_model"].numel()))
        return
    blob = torch.load(sys.argv[2], weights_only=False)
    cfg = json.loads(blob["config_json"])
    if mode == "model":
        model = ref.from_config(cfg).eval()
        load_state(model, blob)
        src_mask, tgt_mask = ref.masks(blob["src"], blob["tgt"], cfg["pad_id"])
        logits = model(blob["src"], blob["tgt"], src_mask, tgt_mask)
        torch.save({"logits": logits}, sys.argv[3])
    elif mode == "mha":
        mha = ref.MultiHeadAttention(cfg["d_model"], cfg["num_heads"], 0.0).eval()
        load_state(mha, blob)
        out, weights = mha(blob["query"], blob["key"], blob["key"], blob["mask"], return_weights=True)
        torch.save({"output": out, "weights": weights}, sys.argv[3])
    elif mode == "self_attention":
        sa = ref.SelfAttention(cfg["d_model"]).eval()
        load_state(sa, blob)
        out, weights = sa(blob["x"], blob["mask"])
        torch.save({"output": out, "weights": weights}, sys.argv[3])
    elif mode == "moe":
        moe = ref.MoELayer(cfg["d_model"], cfg["experts"], cfg["top_k"], cfg["d_ff"], 0.0, cfg["activation"]).eval()
        load_state(moe, blob)
        torch.save({"output": moe(blob["x"]), "aux_loss": moe.aux_loss(blob["x"])}, sys.argv[3])
    else:
        print("unknown mode " + mode)
        sys.exit(2)


if __name__ == "__main__":
    main()
