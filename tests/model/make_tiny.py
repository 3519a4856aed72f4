"""Tiny random-weight checkpoints written by transformers, for the engine's
tests: LlamaForCausalLM (GQA, untied head; optionally llama3 rope scaling),
Qwen2ForCausalLM (q/k/v biases, tied embeddings), Mamba2ForCausalLM
(2 groups, chunk 64) and the hybrid BambaForCausalLM (attention in layer 1), f32 safetensors; and GGUF files of the first two.

Weights are redrawn with a spread wide enough that the logits of
neighbouring tokens differ well beyond f32 rounding (transformers' default
init, std 0.02, makes nearly flat logits: greedy decoding would be decided
by rounding).

usage: python make_tiny.py OUT_DIR [llama|llama3|qwen2|mamba2|bamba] [SEED]
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
    elif arch == "mamba2":
        cfg = transformers.Mamba2Config(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16,
                                        expand=2, n_groups=2, state_size=16, conv_kernel=4, chunk_size=64,
                                        layer_norm_epsilon=1e-5, tie_word_embeddings=False, bos_token_id=1,
                                        eos_token_id=2, pad_token_id=0)
        model = transformers.Mamba2ForCausalLM(cfg)
    elif arch == "bamba":
        cfg = transformers.BambaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                       num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1],
                                       mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16,
                                       mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64, rms_norm_eps=1e-5,
                                       max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1,
                                       eos_token_id=2, pad_token_id=0)
        model = transformers.BambaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=True, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        raise ValueError("arch must be llama, llama3, qwen2, mamba2 or bamba")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            elif name.endswith("conv1d.weight"):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.dim() == 2 and "embed" not in name and "lm_head" not in name:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn_like(p))
    model = model.float().eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "llama", int(sys.argv[3]) if len(sys.argv) > 3 else 0)


def _permute(w, n_head):
    """llama.cpp's converter's row order of a llama q / k projection."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# the GGUF block type of each projection: every type the engine reads
QTYPES = {"q_proj": "Q4_1", "k_proj": "Q4_1", "v_proj": "Q4_0", "o_proj": "Q8_0",
          "gate_proj": "Q4_1", "up_proj": "Q4_0", "down_proj": "Q8_0", "embed_tokens": "Q8_0", "lm_head": "Q4_1"}
GG_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
            "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def write_gguf(model, path, arch):
    """Writes `model` (make()'s llama or qwen2) as a GGUF file with the block
    types of QTYPES (norms and biases f32; llama q/k rows permuted as
    llama.cpp's converter does), and loads the dequantised values back into
    the model, so that it becomes the float reference of the file."""
    import gguf
    import numpy as np
    import torch
    from gguf import quants

    cfg = model.config
    a = "llama" if arch.startswith("llama") else "qwen2"
    w = gguf.GGUFWriter(path, a)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta if hasattr(cfg, "rope_theta") else cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    sd = model.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            arr = t.detach().float().numpy()
            parts = name.split(".")
            if name == "model.embed_tokens.weight":
                gname, key = "token_embd.weight", "embed_tokens"
            elif name == "lm_head.weight":
                if cfg.tie_word_embeddings:
                    continue
                gname, key = "output.weight", "lm_head"
            elif name == "model.norm.weight":
                gname, key = "output_norm.weight", None
            else:
                layer, kind = parts[2], (parts[4] if parts[3] in ("self_attn", "mlp") else parts[3])
                if kind in ("input_layernorm", "post_attention_layernorm"):
                    gname = f"blk.{layer}.{'attn_norm' if kind == 'input_layernorm' else 'ffn_norm'}.weight"
                    key = None
                else:
                    gname = f"blk.{layer}.{GG_NAMES[kind]}.{parts[-1]}"
                    key = kind if parts[-1] == "weight" else None
            if key is None:
                out = arr
                if a == "llama" and gname.endswith(("attn_q.bias", "attn_k.bias")):
                    raise ValueError("llama has no q/k biases")
                w.add_tensor(gname, np.ascontiguousarray(out.astype(np.float32)))
                continue
            qt = getattr(gguf.GGMLQuantizationType, QTYPES[key])
            blocks = quants.quantize(arr, qt)
            t.copy_(torch.from_numpy(quants.dequantize(blocks, qt).astype(np.float32)))
            if a == "llama" and key in ("q_proj", "k_proj"):
                nh = cfg.num_attention_heads if key == "q_proj" else cfg.num_key_value_heads
                blocks = _permute(blocks, nh)
            w.add_tensor(gname, np.ascontiguousarray(blocks), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
