"""The loader's configs and tensor lists against transformers: tiny random
Llama (llama3 rope), Qwen2, Mamba2 and Bamba checkpoints written with
save_pretrained (sharded once), opened by tests/model/dump_config.c, and
refused once a tensor is dropped or mis-shaped. With
SF_SMOLLM2_GGUF, the SmolLM2 GGUF's un-permuted q/k rows, dequantised, equal
transformers' own reversal of llama.cpp's permutation. Exit 77 (skipped) without torch /
transformers / safetensors.

    python3 test_config_hf.py DUMP_CONFIG_BINARY
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, BambaConfig, LlamaConfig, Mamba2Config, Qwen2Config
    import safetensors  # noqa: F401  (save_pretrained's format)
except Exception as e:  # noqa: BLE001
    print(f"SKIPPED: needs torch, transformers and safetensors ({e})")
    sys.exit(77)

DUMP = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def dump(path):
    r = subprocess.run([DUMP, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"dump_config {path}: {r.stdout}{r.stderr}")
    lines = r.stdout.splitlines()
    tensors = {}
    for ln in lines[1:]:
        name, ty, shape = ln.split(" ")
        tensors[name] = (ty, tuple(int(x) for x in shape.split(",")) if shape else ())
    return json.loads(lines[0]), tensors


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0) or (math.isinf(b) and a >= 1e308)


def attn_fields(cfg, cc, name):
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    check(cc["num_heads"] == cfg.num_attention_heads, f"{name}: heads")
    check(cc["num_kv_heads"] == cfg.num_key_value_heads, f"{name}: kv heads")
    check(cc["head_dim"] == hd, f"{name}: head_dim {cc['head_dim']} != {hd}")
    check(cc["intermediate_size"] == cfg.intermediate_size, f"{name}: intermediate")
    check(close(cc["norm_eps"], cfg.rms_norm_eps), f"{name}: eps")
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    check(close(cc["rope_theta"], theta), f"{name}: rope theta")
    check(cc["rope_dim"] == int(hd * rp.get("partial_rotary_factor", 1.0)), f"{name}: rope dim {cc['rope_dim']}")
    check(cc["max_position"] == cfg.max_position_embeddings, f"{name}: max position")


def mamba_fields(cfg, cc, name, bamba):
    g = (lambda k: getattr(cfg, "mamba_" + k)) if bamba else None
    heads = g("n_heads") if bamba else cfg.num_heads
    hd = g("d_head") if bamba else cfg.head_dim
    check(cc["ssm_heads"] == heads and cc["ssm_head_dim"] == hd, f"{name}: ssm heads")
    check(cc["ssm_state"] == (g("d_state") if bamba else cfg.state_size), f"{name}: state")
    check(cc["ssm_groups"] == (g("n_groups") if bamba else cfg.n_groups), f"{name}: groups")
    check(cc["ssm_conv_kernel"] == (g("d_conv") if bamba else cfg.conv_kernel), f"{name}: conv")
    check(cc["ssm_chunk"] == (g("chunk_size") if bamba else cfg.chunk_size), f"{name}: chunk")
    check(cc["ssm_inner"] == heads * hd, f"{name}: inner")
    lo, hi = cfg.time_step_limit
    check(close(cc["ssm_time_step_limit_lo"], lo) and close(cc["ssm_time_step_limit_hi"], hi), f"{name}: dt limit")


def refused(d, name, drop, reshape):
    """The checkpoint in d rewritten without tensor `drop`, then with tensor
    `reshape` flattened: each is refused with a message naming it."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    for key, edit, msg in [(drop, lambda t: None, "is missing"), (reshape, lambda t: t.reshape(-1), "has shape")]:
        sd2 = dict(sd)
        new = edit(sd2.pop(key))
        if new is not None:
            sd2[key] = new.contiguous()
        save_file(sd2, path, metadata={"format": "pt"})
        r = subprocess.run([DUMP, d], capture_output=True, text=True)
        check(r.returncode == 1 and f"tensor {key} {msg}" in r.stdout, f"{name}: {key} {msg}: {r.stdout.strip()}")


def check_model(name, cfg, shard=False, corrupt=None):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, max_shard_size="20KB" if shard else "5GB")
        if shard:
            check(os.path.exists(os.path.join(d, "model.safetensors.index.json")), f"{name}: sharded")
        cc, tensors = dump(d)
        if corrupt:
            refused(d, name, *corrupt)
    check(cc["vocab_size"] == cfg.vocab_size and cc["hidden_size"] == cfg.hidden_size, f"{name}: sizes")
    check(cc["num_layers"] == cfg.num_hidden_layers, f"{name}: layers")
    check(cc["tie_embeddings"] == int(bool(cfg.tie_word_embeddings)), f"{name}: tie")
    eos = cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
    check(cc["eos_token_id"] == (-1 if eos is None else eos), f"{name}: eos")
    sd = model.state_dict()
    for k, v in sd.items():
        if cfg.tie_word_embeddings and k == "lm_head.weight":
            continue
        check(k in tensors and tensors[k] == ("F32", tuple(v.shape)), f"{name}: tensor {k} {tensors.get(k)}")
    if name.startswith("mamba2"):
        check(cc["arch"] == "mamba2", f"{name}: arch")
        check(close(cc["norm_eps"], cfg.layer_norm_epsilon), f"{name}: eps")
        check(close(cc["ssm_time_step_min"], cfg.time_step_min), f"{name}: dt min")
        mamba_fields(cfg, cc, name, False)
    elif name.startswith("bamba"):
        check(cc["arch"] == "bamba", f"{name}: arch")
        attn_fields(cfg, cc, name)
        mamba_fields(cfg, cc, name, True)
        want = [int(t == "full_attention") for t in cfg.layers_block_type]
        check(cc["layer_is_attn"] == want, f"{name}: attention layers {cc['layer_is_attn']} != {want}")
    else:
        check(cc["arch"] == ("qwen2" if name.startswith("qwen2") else "llama"), f"{name}: arch")
        attn_fields(cfg, cc, name)
        check(cc["attn_bias"] == int(name.startswith("qwen2")), f"{name}: bias")
        rp = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rp.get("rope_type") == "llama3":
            check(cc["rope_scaling"] == 1 and close(cc["rope_factor"], rp["factor"]), f"{name}: llama3 factor")
            check(close(cc["rope_low_freq_factor"], rp["low_freq_factor"]), f"{name}: low freq")
            check(close(cc["rope_high_freq_factor"], rp["high_freq_factor"]), f"{name}: high freq")
            check(cc["rope_original_max_position"] == rp["original_max_position_embeddings"], f"{name}: orig pos")


small = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
check_model("llama", LlamaConfig(**small, num_key_value_heads=2, max_position_embeddings=512,
                                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))
check_model("llama_tied_sharded", LlamaConfig(**small, num_key_value_heads=4, head_dim=16, tie_word_embeddings=True),
            shard=True)
check_model("qwen2", Qwen2Config(**small, num_key_value_heads=2, rope_theta=1e6),
            corrupt=("model.layers.1.self_attn.k_proj.bias", "model.layers.0.self_attn.q_proj.weight"))
check_model("mamba2", Mamba2Config(vocab_size=96, hidden_size=32, num_heads=8, head_dim=8, state_size=16, n_groups=2,
                                   num_hidden_layers=2, chunk_size=16, time_step_limit=(0.0, 10.0)),
            corrupt=("backbone.layers.1.mixer.A_log", "backbone.layers.0.mixer.conv1d.weight"))
check_model("mamba2_defaults", Mamba2Config(vocab_size=96, hidden_size=64, num_heads=8, head_dim=16,
                                            num_hidden_layers=1))
check_model("bamba", BambaConfig(**{**small, "num_hidden_layers": 4}, num_key_value_heads=2, attn_layer_indices=[1, 3],
                                 mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=2, mamba_chunk_size=16),
            corrupt=("model.layers.2.mamba.D", "model.layers.3.self_attn.o_proj.weight"))

gguf_path = os.environ.get("SF_SMOLLM2_GGUF")
if gguf_path and os.path.exists(gguf_path):
    # our un-permuted q/k bytes, dequantised by gguf-py, against transformers'
    # own reversal of llama.cpp's permutation applied to the file's rows
    try:
        import gguf
        from gguf.quants import dequantize
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
    except Exception as e:  # noqa: BLE001
        print(f"SmolLM2 check skipped: gguf-py or transformers' GGUF support missing ({e})")
    else:
        cc, tensors = dump(gguf_path)
        check(tensors["model.layers.3.self_attn.q_proj.weight"] == ("Q4_1", (576, 576)), "SmolLM2 q shape")
        raw = {t.name: t for t in gguf.GGUFReader(gguf_path).tensors}
        proc = LlamaTensorProcessor(config={"num_attention_heads": 9, "num_key_value_heads": 3})
        with tempfile.TemporaryDirectory() as d:
            for layer, proj in [(3, "q"), (17, "k")]:
                gname = f"blk.{layer}.attn_{proj}.weight"
                t = raw[gname]
                ref = proc.process(dequantize(t.data, t.tensor_type).reshape(-1, 576), gname).weights
                out = os.path.join(d, "t.bin")
                r = subprocess.run([DUMP, gguf_path, f"model.layers.{layer}.self_attn.{proj}_proj.weight", out],
                                   capture_output=True, text=True)
                check(r.returncode == 0, f"dump {gname}: {r.stderr}")
                ours = dequantize(np.fromfile(out, dtype=np.uint8).reshape(ref.shape[0], -1), t.tensor_type)
                check(np.array_equal(ours, ref), f"SmolLM2 {proj}_proj of layer {layer} vs transformers")
                check(not np.array_equal(ours, dequantize(t.data, t.tensor_type).reshape(-1, 576)),
                      f"SmolLM2 {proj}_proj: the file's order differs from HF's")
        print("SmolLM2: un-permuted q/k rows match transformers' GGUF reversal")
else:
    print("SmolLM2 check skipped: set SF_SMOLLM2_GGUF")

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("configs match transformers", transformers.__version__)
