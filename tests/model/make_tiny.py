"""Tiny random-weight checkpoints written by transformers, for the engine's
tests: LlamaForCausalLM (GQA, untied head; optionally llama3 rope scaling)
and Qwen2ForCausalLM (q/k/v biases, tied embeddings), f32 safetensors.

Weights are redrawn with a spread wide enough that the logits of
neighbouring tokens differ well beyond f32 rounding (transformers' default
init, std 0.02, makes nearly flat logits: greedy decoding would be decided
by rounding).

usage: python make_tiny.py OUT_DIR [llama|llama3|qwen2] [SEED]
"""
import math
import sys


def make(out_dir, arch="llama", seed=0):
    import torch
    import transformers

    torch.manual_seed(seed)
    common = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    if arch in ("llama", "llama3"):
        extra = {}
        if arch == "llama3":
            extra["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        cfg = transformers.LlamaConfig(rope_theta=10000.0, tie_word_embeddings=False, **common, **extra)
        model = transformers.LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=True, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        raise ValueError("arch must be llama, llama3 or qwen2")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            elif p.dim() == 2 and "embed" not in name and "lm_head" not in name:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn_like(p))
    model = model.float().eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "llama", int(sys.argv[3]) if len(sys.argv) > 3 else 0)
