#!/usr/bin/python3
# Tiny Hugging Face checkpoints of the three families `skew import` reads (docs/huggingface.md), in each
# family's published layout: config.json with its field names, safetensors files written by hand (an
# 8-byte little-endian header length, the JSON header, the raw bytes), per-expert tensor names; and
# reference logits of a fixed token batch from a float64 forward written here from the published
# equations over the Hugging Face names (not from skew's names or code). RMSNorm and rotate-half RoPE
# are imported from tests/reference/model/make_golden_llama.py, whose equations are those of all three.
#   mixtral  MixtralForCausalLM: GQA 4/2, top-2 of 4 renormalized, block_sparse_moe.experts.{e}.w1 (gate),
#            w2 (down), w3 (up); bf16 tensors in one model.safetensors; Mixtral's tokenizer layout: a
#            SentencePiece tokenizer.model (tests/fixtures/data/sentencepiece_302, 302 pieces) and the
#            tokenizer.json transformers makes of it (../tokenizer/sentencepiece_to_json.py, byte_fallback),
#            tokenizer_config.json, generation_config.json.
#   olmoe    OlmoeForCausalLM: MHA, RMSNorm over the full q and k widths, top-4 of 8 not renormalized,
#            mlp.experts.{e}.gate_proj / up_proj / down_proj; fp32 tensors (skew rounds the matrices to
#            bf16 on import) in two shards with model.safetensors.index.json.
#   qwen3    Qwen3MoeForCausalLM: GQA 4/2, head_dim 16 > hidden_size / heads = 8, RMSNorm per head of q
#            and k, top-4 of 8 renormalized, rms_norm_eps 1e-6, block 1 a dense SwiGLU (mlp_only_layers [1]);
#            bf16 tensors, one file, plus tokenizer_config.json, special_tokens_map.json and
#            generation_config.json (an end-of-text list, as Qwen3's).
# OLMoE and Qwen3-MoE hold the tiny byte-level tokenizer.json of tests/fixtures/data/hf_tiny (302 ids);
# 302 is every config's vocabulary size, so skew pads the embeddings to 320 rows. Each config.json has
# the family's bos_token_id, eos_token_id and pad_token_id fields. Writes <family>/ and
# <family>_reference.bin (SKEWGOLD records: tokens (B, T), logits (B*T, vocab_size)) next to this script.
#
# Run with Debian's python3 (torch, numpy):  /usr/bin/python3 tests/reference/hf/make_tiny_hf.py
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
sys.path.insert(0, os.path.join(HERE, "..", "tokenizer"))
from make_golden_llama import rmsnorm, rope, round_bf16, write_records  # noqa: E402
import sentencepiece_to_json  # noqa: E402

VOCAB = 302  # tests/fixtures/data/hf_tiny/tokenizer.json and sentencepiece_302/tokenizer.model: ids 0..301
FIXTURES = os.path.join(HERE, "..", "..", "fixtures", "data")
B, T = 2, 16
MIN_GAP = 0.02  # no token's k-th and (k+1)-th router logits closer than this (no near-tie in the top-k)

COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
              hidden_act="silu", initializer_range=0.02, tie_word_embeddings=False, rope_scaling=None,
              attention_dropout=0.0)
FAMILIES = {
    "mixtral": dict(COMMON, architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=16,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, rope_theta=1e6,
                    rms_norm_eps=1e-5, sliding_window=None, router_aux_loss_coef=0.02, torch_dtype="bfloat16",
                    bos_token_id=1, eos_token_id=2),
    "olmoe": dict(COMMON, architectures=["OlmoeForCausalLM"], model_type="olmoe", intermediate_size=16,
                  num_key_value_heads=4, num_experts=8, num_experts_per_tok=4, norm_topk_prob=False,
                  rope_theta=10000.0, rms_norm_eps=1e-5, attention_bias=False, clip_qkv=None,
                  router_aux_loss_coef=0.01, torch_dtype="float32", bos_token_id=None, eos_token_id=300,
                  pad_token_id=1),
    "qwen3": dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", intermediate_size=24,
                  moe_intermediate_size=16, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=4,
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], rope_theta=1e6, rms_norm_eps=1e-6,
                  use_sliding_window=False, sliding_window=None, max_window_layers=2, attention_bias=False,
                  router_aux_loss_coef=0.001, torch_dtype="bfloat16", bos_token_id=300, eos_token_id=300),
}
# generation_config.json as the published checkpoints ship it (OLMoE's fixture has none)
GENERATION = {
    "mixtral": {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.36.0.dev0"},
    "qwen3": {"bos_token_id": 300, "do_sample": True, "eos_token_id": [300], "pad_token_id": 300, "temperature": 0.6,
              "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"},
}
SEEDS = {"mixtral": 20280101, "olmoe": 20280201, "qwen3": 20280301}
SHARDED = {"olmoe"}


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def n_experts(c):
    return c.get("num_local_experts", c.get("num_experts"))


def is_moe_layer(c, layer):
    if c["model_type"] != "qwen3_moe":
        return True
    return layer not in c["mlp_only_layers"] and (layer + 1) % c["decoder_sparse_step"] == 0


def tensors(c):
    """(name, shape) of every tensor the family's checkpoint holds, in module order."""
    d, hd, V = c["hidden_size"], head_dim(c), c["vocab_size"]
    q, kv, E = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, n_experts(c)
    mixtral = c["model_type"] == "mixtral"
    I = c["moe_intermediate_size"] if c["model_type"] == "qwen3_moe" else c["intermediate_size"]
    t = [("model.embed_tokens.weight", (V, d))]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        t += [(p + "input_layernorm.weight", (d,)), (p + "self_attn.q_proj.weight", (q, d)),
              (p + "self_attn.k_proj.weight", (kv, d)), (p + "self_attn.v_proj.weight", (kv, d)),
              (p + "self_attn.o_proj.weight", (d, q))]
        if c["model_type"] == "olmoe":
            t += [(p + "self_attn.q_norm.weight", (q,)), (p + "self_attn.k_norm.weight", (kv,))]
        elif c["model_type"] == "qwen3_moe":
            t += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        t += [(p + "post_attention_layernorm.weight", (d,))]
        if not is_moe_layer(c, layer):
            Id = c["intermediate_size"]
            t += [(p + "mlp.gate_proj.weight", (Id, d)), (p + "mlp.up_proj.weight", (Id, d)),
                  (p + "mlp.down_proj.weight", (d, Id))]
        elif mixtral:
            m = p + "block_sparse_moe."
            t += [(m + "gate.weight", (E, d))]
            for e in range(E):  # w1 gate, w2 down, w3 up
                t += [(m + f"experts.{e}.w1.weight", (I, d)), (m + f"experts.{e}.w2.weight", (d, I)),
                      (m + f"experts.{e}.w3.weight", (I, d))]
        else:
            m = p + "mlp."
            t += [(m + "gate.weight", (E, d))]
            for e in range(E):
                t += [(m + f"experts.{e}.gate_proj.weight", (I, d)), (m + f"experts.{e}.up_proj.weight", (I, d)),
                      (m + f"experts.{e}.down_proj.weight", (d, I))]
    return t + [("model.norm.weight", (d,)), ("lm_head.weight", (V, d))]


def make_weights(c, rng):
    bf16 = c["torch_dtype"] == "bfloat16"
    w = {}
    for name, shape in tensors(c):
        if name.endswith("norm.weight"):
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            v = 0.3 * rng.standard_normal(shape)
        elif name.endswith("gate.weight"):  # the router; std 0.3 as make_golden_llama.py's
            v = 0.3 * rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) / math.sqrt(shape[-1])
        v = v.astype(np.float32)
        w[name] = round_bf16(v) if bf16 else v
    return w


# ---- the forward, over the Hugging Face names (Mixtral/OLMoE/Qwen3-MoE modeling code's equations)

def attention(x, p, pre, c):
    Bx, Tx, _ = x.shape
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    eps = c["rms_norm_eps"]
    a = pre + "self_attn."
    q, k, v = x @ p[a + "q_proj.weight"].T, x @ p[a + "k_proj.weight"].T, x @ p[a + "v_proj.weight"].T
    if c["model_type"] == "olmoe":  # OlmoeAttention: q_norm / k_norm over the whole projection
        q, k = rmsnorm(q, p[a + "q_norm.weight"], eps), rmsnorm(k, p[a + "k_norm.weight"], eps)
    q, k, v = q.view(Bx, Tx, H, hd), k.view(Bx, Tx, KV, hd), v.view(Bx, Tx, KV, hd)
    if c["model_type"] == "qwen3_moe":  # Qwen3MoeAttention: q_norm / k_norm over each head's head_dim lanes
        q, k = rmsnorm(q, p[a + "q_norm.weight"], eps), rmsnorm(k, p[a + "k_norm.weight"], eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)  # repeat_kv
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(Tx, Tx, dtype=torch.bool), diagonal=1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(1, 2).reshape(Bx, Tx, H * hd) @ p[a + "o_proj.weight"].T


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def moe(x, p, pre, c, gaps):
    """softmax over all experts, top-k, renormalized (Mixtral always; else norm_topk_prob), sum of experts."""
    d, K = x.shape[-1], c["num_experts_per_tok"]
    xf = x.reshape(-1, d)
    mixtral = c["model_type"] == "mixtral"
    m = pre + ("block_sparse_moe." if mixtral else "mlp.")
    logits = xf @ p[m + "gate.weight"].T
    srt = np.sort(logits.numpy(), axis=-1)[:, ::-1]
    gaps.append(float((srt[:, K - 1] - srt[:, K]).min()))
    probs = torch.softmax(logits, dim=-1)
    w, idx = torch.topk(probs, K, dim=-1)
    if mixtral or c["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(xf)
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")  # gate, up, down
    for n in range(xf.shape[0]):
        for j in range(K):
            e = m + f"experts.{int(idx[n, j])}."
            g, u, dn = (p[e + s + ".weight"] for s in names)
            out[n] += w[n, j] * swiglu(xf[n:n + 1], g, u, dn)[0]
    return out.view(x.shape)


def forward(p, tokens, c, gaps):
    eps = c["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    for layer in range(c["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        x = x + attention(rmsnorm(x, p[pre + "input_layernorm.weight"], eps), p, pre, c)
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], eps)
        if is_moe_layer(c, layer):
            x = x + moe(h, p, pre, c, gaps)
        else:
            x = x + swiglu(h, p[pre + "mlp.gate_proj.weight"], p[pre + "mlp.up_proj.weight"],
                           p[pre + "mlp.down_proj.weight"])
    h = rmsnorm(x, p["model.norm.weight"], eps)
    return (h @ p["lm_head.weight"].T).reshape(-1, c["vocab_size"])


# ---- safetensors by hand

def bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # exact for values already bf16


def write_safetensors(path, named, bf16):
    header, blobs, offset = {}, [], 0
    for name, a in named:
        raw = bf16_bits(a).tobytes() if bf16 else np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    return offset


def write_checkpoint(name, c, w):
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    bf16 = c["torch_dtype"] == "bfloat16"
    order = [n for n, _ in tensors(c)]
    if name in SHARDED:  # the layers in one shard, embeddings, final norm and head in the other
        parts = [[n for n in order if n.startswith("model.layers.")], [n for n in order if not n.startswith("model.layers.")]]
        files = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
        total = sum(write_safetensors(os.path.join(out, fn), [(n, w[n]) for n in part], bf16)
                    for fn, part in zip(files, parts))
        index = {"metadata": {"total_size": total},
                 "weight_map": {n: fn for fn, part in zip(files, parts) for n in sorted(part)}}
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    else:
        write_safetensors(os.path.join(out, "model.safetensors"), [(n, w[n]) for n in order], bf16)
    if name == "mixtral":  # SentencePiece's model and the tokenizer.json transformers converts it to
        model = os.path.join(FIXTURES, "sentencepiece_302", "tokenizer.model")
        shutil.copy(model, out)
        pieces, _ = sentencepiece_to_json.read_model(model)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(sentencepiece_to_json.convert(pieces), f, ensure_ascii=False, indent=1)
            f.write("\n")
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                       "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": True}, f)
    else:
        shutil.copy(os.path.join(FIXTURES, "hf_tiny", "tokenizer.json"), out)
    if name in GENERATION:
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump(GENERATION[name], f, indent=2)
            f.write("\n")
    if name == "qwen3":
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|endoftext|>", "bos_token": None}, f)
        with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
            json.dump({"eos_token": "<|endoftext|>"}, f)


def main():
    for name, c in FAMILIES.items():
        for attempt in range(500):
            rng = np.random.default_rng(SEEDS[name] + attempt)
            w = make_weights(c, rng)
            tokens = rng.integers(0, VOCAB, size=(B, T))
            gaps = []
            with torch.no_grad():
                logits = forward({n: torch.tensor(v, dtype=torch.float64) for n, v in w.items()},
                                 torch.from_numpy(tokens), c, gaps)
            if min(gaps) > MIN_GAP:
                break
        write_checkpoint(name, c, w)
        write_records(os.path.join(HERE, f"{name}_reference.bin"), [("tokens", tokens), ("logits", logits.numpy())])
        print(f"{name}: seed {SEEDS[name]} + {attempt}, smallest top-k logit gap {min(gaps):.3f}, "
              f"|logits| max {float(logits.abs().max()):.3f}")


if __name__ == "__main__":
    main()
