"""The host side of bench/gpu_engine.py (the engine against transformers; the
bench itself runs on a GPU): its checkpoint maker on tiny configs of every
architecture it benchmarks, the list of the prefill's products it times
(against the Linear layers transformers builds for the same config), the
weight bytes of the floor (against the parameters), the argument parsing,
the bench-model JSON reader, and the RESULTS.md section and plot from a
result.  Skipped without torch or transformers."""
import json
import os
import shutil
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
import gpu_engine as ge  # noqa: E402

TINY = {
    "llama-tied": dict(cls="LlamaForCausalLM", config_cls="LlamaConfig",
                       config=dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)),
    "llama-untied": dict(cls="LlamaForCausalLM", config_cls="LlamaConfig",
                         config=dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                     tie_word_embeddings=False)),
    "mamba2": dict(cls="Mamba2ForCausalLM", config_cls="Mamba2Config",
                   config=dict(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16,
                               expand=2, n_groups=2, state_size=16, tie_word_embeddings=True)),
    "bamba": dict(cls="BambaForCausalLM", config_cls="BambaConfig",
                  config=dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=8,
                              mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_expand=2,
                              tie_word_embeddings=True)),
}


@pytest.mark.parametrize("name", list(TINY))
def test_checkpoint_products_and_bytes(name, tmp_path):
    spec = TINY[name]
    path, made = ge.make_checkpoint(torch, transformers, name, str(tmp_path), spec)
    assert made and os.path.isfile(os.path.join(path, "config.json"))
    mtime = os.path.getmtime(os.path.join(path, "config.json"))
    assert ge.make_checkpoint(torch, transformers, name, str(tmp_path), spec) == (path, False)
    assert os.path.getmtime(os.path.join(path, "config.json")) == mtime  # reused, not rewritten
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    idx = ge.safetensors_index(path)
    assert {d for d, _, _ in idx.values()} == {"BF16"}
    model = getattr(transformers, spec["cls"]).from_pretrained(path)
    # the products the bench times: the model's Linear layers, one each (tied head included)
    lin = sorted(tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sorted((N, K) for _, N, K in ge.linear_shapes(cfg)) == lin
    assert ge.linear_shapes(cfg)[-1][0] == "lm_head"
    params = {n: p for n, p in model.named_parameters()}  # tied: one entry
    total = sum(p.numel() * 2 for p in params.values())
    emb = next(p for n, p in params.items() if "embed" in n or "embeddings" in n)
    want = total if spec["config"]["tie_word_embeddings"] else total - emb.numel() * 2
    assert ge.streamed_bytes(idx) == want
    m = 7
    assert ge.gemm_flops(ge.linear_shapes(cfg), m) == sum(
        2 * (1 if n == "lm_head" else m) * N * K for n, N, K in ge.linear_shapes(cfg))


def test_args():
    a = ge.parse_args(["--quick", "--models", "smollm2-135m,llama-1b"])
    assert a.batches == [1, 32] and a.new_tokens == 32 and a.models == ["smollm2-135m", "llama-1b"]
    a = ge.parse_args(["--quick", "--batches", "128"])
    assert a.batches == [128] and a.new_tokens == 32
    a = ge.parse_args([])
    assert a.batches == [1, 32, 128] and a.new_tokens == 64 and a.prefill_lens == [512, 4096]
    assert a.models == list(ge.MODELS)
    for bad in (["--models", "gpt2"], ["--batches", "1,x"], ["--batches", "0"], ["--peers", "vllm"],
                ["--new-tokens", "2"]):
        with pytest.raises(SystemExit):
            ge.parse_args(bad)


def test_bench_model_json_and_cmd():
    out = 'note\n{"model": "llama", "points": [{"batch": 1, "prompt_len": 128, "new_tokens": 8, ' \
          '"prefill_tok_s": 10.0, "decode_tok_s": 5.0, "ms_per_step": 2.5}]}\n'
    assert ge.parse_bench_json(out)["points"][0]["ms_per_step"] == 2.5
    with pytest.raises(ValueError):
        ge.parse_bench_json("no json here")
    cmd = ge.bench_model_cmd("b", "m", [1, 32], [128], 16, no_graphs=True)
    assert cmd[:2] == [os.path.join("b", "seqfuse"), "bench-model"] and cmd[-1] == "--no-graphs"
    assert cmd[cmd.index("--batch") + 1] == "1,32" and cmd[cmd.index("--new-tokens") + 1] == "16"


def _result():
    meta = dict(date="2026-12-04", gpu="GPU", commit="abc", torch="t", transformers="tf", prompt_len=128,
                new_tokens=32, has_no_graphs=True, copy_tbs=4.0, gemm_impl="seqfuse.gemm")
    m = dict(weight_bytes=4e9, floor_ms=1.0, errors=["static decode b32: RuntimeError: boom"],
             decode=[dict(batch=1, ours=2.0, ours_nog=3.0, eager=10.0, static=4.0),
                     dict(batch=32, ours=5.0, eager=20.0, static=None)],
             prefill=[dict(prompt_len=512, ours_tok_s=51200.0, eager_tok_s=25600.0, gemms_ms=8.0, gemm_flops=8e9)])
    return dict(meta=meta, models={"llama-1b": m})


def test_section_and_plot(tmp_path):
    res = _result()
    rows = ge.decode_rows("llama-1b", res["models"]["llama-1b"])
    assert rows[0][2:] == ["2.000", "500", "3.000", "10.000", "4.000", "5.00x", "2.00x", "1.000", "2.00x"]
    assert rows[1][3] == "6400"  # 32 tokens a 5 ms step
    assert rows[1][6] == "" and rows[1][8] == "" and rows[1][9] == ""  # a failed peer: empty, not a number
    pre = ge.prefill_rows("llama-1b", res["models"]["llama-1b"])[0]
    assert pre[4] == "2.00x" and pre[5] == "10.000" and pre[8] == "1.25x"  # 512 / 51200 s = 10 ms vs 8 ms
    copy = tmp_path / "RESULTS.md"
    shutil.copy(os.path.join(REPO, "bench", "RESULTS.md"), copy)
    before = copy.read_text()
    ge.write_results(str(copy), res)
    text = copy.read_text()
    assert text.count("<!-- BEGIN engine -->") == 1 and "static decode b32: RuntimeError: boom" in text
    ge.write_results(str(copy), res)  # a second run replaces its section
    assert copy.read_text() == text and text.startswith(before.split("<!-- BEGIN engine -->")[0][:200])
    js = tmp_path / "r.json"
    js.write_text(json.dumps(res))
    png = tmp_path / "p.png"
    pytest.importorskip("matplotlib")
    assert ge.main(["--from-json", str(js), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_merge_pieces(tmp_path):
    a, b = _result(), _result()
    b["meta"]["commit"] = "def"
    mb = b["models"]["llama-1b"]
    mb["errors"] = ["eager decode b128: OutOfMemoryError"]
    mb["decode"] = [dict(batch=128, ours=9.0, eager=None), dict(batch=32, ours=None, static=6.0)]
    mb["prefill"] = []
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    res = ge.merge_json([str(pa), str(pb)])
    assert res["meta"]["commit"] == "abc, def" and res["meta"]["gpu"] == "GPU"
    m = res["models"]["llama-1b"]
    dec = {d["batch"]: d for d in m["decode"]}
    assert sorted(dec) == [1, 32, 128]
    assert dec[32]["ours"] == 5.0 and dec[32]["static"] == 6.0  # a later None keeps the measured value
    assert dec[128]["ours"] == 9.0 and dec[1]["static"] == 4.0
    assert len(m["prefill"]) == 1 and len(m["errors"]) == 2


@pytest.mark.parametrize("name", list(ge.MODELS))
def test_benchmark_configs(name):
    """The benchmark's own configs build (on the meta device: no memory), at
    the sizes they claim, with the products the GEMM timing lists."""
    spec = ge.MODELS[name]
    cfg = getattr(transformers, spec["config_cls"])(**spec["config"])
    with torch.device("meta"):
        model = getattr(transformers, spec["cls"])(cfg)
    lin = sorted(tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear))
    shapes = ge.linear_shapes(dict(cfg.to_dict(), architectures=[spec["cls"]]))
    assert sorted((N, K) for _, N, K in shapes) == lin
    billions = sum(p.numel() for p in model.parameters()) / 1e9
    want = {"smollm2-135m": 0.135, "llama-1b": 1.236, "mamba2-1.3b": 1.344, "mamba2-2.7b": 2.703, "bamba-1b": 1.033}
    assert abs(billions - want[name]) < 0.005, billions
