"""The binding as a drop-in for flash_attn and mamba_ssm users: the peers'
signatures, every argument checked (ints, flags, odd objects), and which
library `import seqfuse` loads.

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python
"""
import os
import subprocess
import sys

import numpy as np

import seqfuse
from seqfuse import SeqfuseError
from seqfuse import _lib
from sf_testutil import _REPO, _raises, rnd
from test_binding import ssd_inputs


def test_odd_objects_raise_seqfuse_error():
    """Every argument of every function, given a string, a list, a dict, a
    bare object, a float, a negative or huge int or NaN: SeqfuseError (or
    success where the value happens to be valid), never another exception."""
    import inspect
    rng = np.random.default_rng(35)
    q = rnd(rng, (1, 6, 2, 8))
    a = ssd_inputs(rng, "float32", b=1, L=10)
    H, P, N = 4, 16, 8
    state = rnd(rng, (2, H, P, N))
    calls = [
        (seqfuse.flash_attn_func, dict(q=q, k=q, v=q)),
        (seqfuse.flash_attn_varlen_func, dict(q=q[0], k=q[0], v=q[0], cu_seqlens_q=[0, 6], cu_seqlens_k=[0, 6])),
        (seqfuse.mamba_chunk_scan_combined, dict(chunk_size=64, **a)),
        (seqfuse.selective_state_update, dict(state=state, x=rnd(rng, (2, H, P)), dt=rnd(rng, (2, H)),
                                              A=-np.ones(H, np.float32), B=rnd(rng, (2, 1, N)),
                                              C=rnd(rng, (2, 1, N)))),
        (seqfuse.rmsnorm_fn, dict(x=q.reshape(6, 16), weight=np.ones(16, np.float32))),
        (seqfuse.causal_conv1d_fn, dict(x=rnd(rng, (1, 8, 12)), weight=np.ones((8, 4), np.float32))),
        (seqfuse.causal_conv1d_update, dict(x=rnd(rng, (2, 8)), conv_state=rnd(rng, (2, 8, 3)),
                                            weight=np.ones((8, 4), np.float32))),
    ]
    odd = ["abc", [1, 2], {}, object(), 1.5, -3, 2 ** 70, float("nan")]
    for fn, kw in calls:
        fn(**{k: (v.copy() if hasattr(v, "copy") else v) for k, v in kw.items()})
        for p in inspect.signature(fn).parameters:
            for o in odd:
                k2 = {k: (v.copy() if hasattr(v, "copy") else v) for k, v in kw.items()}
                k2[p] = o
                try:
                    fn(**k2)
                except SeqfuseError:
                    pass
                except Exception as e:  # noqa: BLE001 - the point of the test
                    raise AssertionError("%s(%s=%r): %s: %s" % (fn.__name__, p, o, type(e).__name__, e))


def test_int_and_flag_arguments_are_checked():
    """Python ints wider than the C int, floats where ints are meant and
    flags other than True/False/0/1 are refused, never wrapped or truncated."""
    rng = np.random.default_rng(33)
    q = rnd(rng, (1, 6, 2, 8))
    E = seqfuse.SF_ERR_INVALID_ARG
    _raises(E, seqfuse.flash_attn_func, q, q, q, window_size=(2 ** 40, 0))
    _raises(E, seqfuse.flash_attn_func, q, q, q, window_size=(-1, 2.5))
    _raises(E, seqfuse.flash_attn_func, q, q, q, window_size="ab")
    _raises(E, seqfuse.flash_attn_func, q, q, q, causal=7)
    _raises(E, seqfuse.flash_attn_func, q, q, q, causal="yes")
    a = ssd_inputs(rng, "float32", b=1, L=10)
    for bad in (2 ** 32 + 64, 64.7, 64.0, "64", True):
        _raises(E, seqfuse.mamba_chunk_scan_combined, chunk_size=bad, **a)
    _raises(E, seqfuse.mamba_chunk_scan_combined, chunk_size=64, dt_softplus=7, **a)
    x = rnd(rng, (4, 8))
    _raises(E, seqfuse.rmsnorm_fn, x, np.ones(8, np.float32), group_size=2 ** 33)
    _raises(E, seqfuse.rmsnorm_fn, x, np.ones(8, np.float32), group_size=4.0)
    # numpy integers and booleans are ints and flags
    out = seqfuse.flash_attn_func(q, q, q, causal=np.bool_(True), window_size=(np.int64(-1), np.int32(0)))
    assert out.shape == q.shape


def test_flash_attn_signature_is_the_peers():
    """flash_attn's positional order: (q, k, v, dropout_p, softmax_scale, causal,
    window_size, softcap, alibi_slopes, deterministic, return_attn_probs)."""
    rng = np.random.default_rng(34)
    q, k, v = (rnd(rng, (1, 9, 2, 8)) for _ in range(3))
    want = seqfuse.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    got = seqfuse.flash_attn_func(q, k, v, 0.0, 0.3, True)
    np.testing.assert_array_equal(got, want)
    # a dropout given positionally is refused, not read as the scale
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_func, q, k, v, 0.1)
    # softcap and alibi_slopes in their positional places (8th and 9th)
    sl = np.array([0.3, 0.1], np.float32)
    np.testing.assert_array_equal(seqfuse.flash_attn_func(q, k, v, 0.0, 0.3, True, (-1, -1), 2.0, sl),
                                  seqfuse.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True,
                                                          softcap=2.0, alibi_slopes=sl))
    out, lse, probs = seqfuse.flash_attn_func(q, k, v, 0.0, 0.3, True, (-1, -1), 0.0, None, True, True)
    np.testing.assert_array_equal(out, want)
    assert probs is None and lse.shape == (1, 2, 9)
    _, lse2 = seqfuse.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, return_lse=True)
    np.testing.assert_array_equal(lse, lse2)
    cu = [0, 4, 9]
    qv, kv, vv = (t[0] for t in (q, k, v))
    o1 = seqfuse.flash_attn_varlen_func(qv, kv, vv, cu, cu, 5, 5, 0.0, 0.3, True)
    o2 = seqfuse.flash_attn_varlen_func(qv, kv, vv, cu, cu, softmax_scale=0.3, causal=True)
    np.testing.assert_array_equal(o1, o2)
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_varlen_func, qv, kv, vv, cu, cu, 5, 5, 0.1)
    o3, l3, p3 = seqfuse.flash_attn_varlen_func(qv, kv, vv, cu, cu, 5, 5, return_attn_probs=True)
    assert p3 is None and l3.shape == (2, 9)


def test_library_search_skips_other_build_folders(tmp_path):
    """Without SEQFUSE_LIB the binding loads build/ beside python/, never a
    newer build-asan/ or build-noomp/ (an ASan library aborts the interpreter)."""
    import shutil
    shutil.copytree(os.path.join(_REPO, "python", "seqfuse"), tmp_path / "python" / "seqfuse")
    for d in ("build", "build-asan", "build-noomp"):
        (tmp_path / d).mkdir()
        shutil.copy(_lib.lib_path, tmp_path / d / "libseqfuse.so")
    later = os.path.getmtime(tmp_path / "build" / "libseqfuse.so") + 100
    for d in ("build-asan", "build-noomp"):
        os.utime(tmp_path / d / "libseqfuse.so", (later, later))
    env = {k: v for k, v in os.environ.items() if k != "SEQFUSE_LIB"}
    env["PYTHONPATH"] = str(tmp_path / "python")
    r = subprocess.run([sys.executable, "-c", "import seqfuse._lib as l; print(l.lib_path)"], env=env,
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "build" / "libseqfuse.so")
