"""seqfuse.Engine: a checkpoint in, text out, over the public engine API
(seqfuse.h, "The engine"; ctypes declarations of its structs here, field
by field)."""
import ctypes

from . import _lib as L
from ._core import SeqfuseError

_c = ctypes
_P = ctypes.POINTER


class _Options(_c.Structure):
    _fields_ = [("device", _c.c_int), ("threads", _c.c_int), ("dequantize", _c.c_int),
                ("max_seqs", _c.c_int), ("max_seq_len", _c.c_int), ("page_size", _c.c_int),
                ("dtype", _c.c_int), ("use_graphs", _c.c_int)]


class _Sampling(_c.Structure):
    _fields_ = [("temperature", _c.c_float), ("top_k", _c.c_int), ("top_p", _c.c_float),
                ("min_p", _c.c_float), ("repetition_penalty", _c.c_float), ("seed", _c.c_uint64),
                ("max_new_tokens", _c.c_int), ("ignore_eos", _c.c_int),
                ("stop", _P(_c.c_char_p)), ("nstop", _c.c_int)]


class _Generation(_c.Structure):
    _fields_ = [("prompt", _P(_c.c_int32)), ("prompt_len", _c.c_int64), ("tokens", _P(_c.c_int32)),
                ("ntokens", _c.c_int64), ("finish", _c.c_int)]


class _Stats(_c.Structure):
    _fields_ = [("prompt_tokens", _c.c_int64), ("generated_tokens", _c.c_int64),
                ("prefill_steps", _c.c_int64), ("decode_steps", _c.c_int64),
                ("prefill_ms", _c.c_double), ("decode_ms", _c.c_double), ("max_live", _c.c_int)]


_TOKEN_FN = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_int, _c.c_int32, _P(_c.c_float), _c.c_int)

_d = L._decl
_create = _d("sf_engine_create", _c.c_int, _c.c_char_p, _P(_Options), _P(_c.c_void_p), _c.c_char_p, _c.c_size_t)
_destroy = _d("sf_engine_destroy", None, _c.c_void_p)
_last_error = _d("sf_engine_last_error", _c.c_char_p, _c.c_void_p)
_vocab = _d("sf_engine_vocab_size", _c.c_int, _c.c_void_p)
_bos = _d("sf_engine_bos", _c.c_int, _c.c_void_p)
_eos = _d("sf_engine_eos", _c.c_int, _c.c_void_p)
_describe = _d("sf_engine_describe", _c.c_char_p, _c.c_void_p)
_tokenize = _d("sf_engine_tokenize", _c.c_int64, _c.c_void_p, _c.c_char_p, _c.c_int, _c.c_int,
               _P(_c.c_int32), _c.c_int64)
_piece = _d("sf_engine_token_piece", _c.c_void_p, _c.c_void_p, _c.c_int, _P(_c.c_size_t))
_opts_init = _d("sf_engine_options_init", None, _P(_Options))
_samp_init = _d("sf_sampling_init", None, _P(_Sampling))
_generate = _d("sf_engine_generate", _c.c_int, _c.c_void_p, _P(_Generation), _c.c_int, _P(_Sampling),
               _TOKEN_FN, _c.c_void_p, _P(_Stats))

FINISH = {0: "length", 1: "eos", 2: "stop", 3: "callback"}


class Engine:
    """Engine(path, device=-1 (CPU), threads=0, dequantize=False, max_seqs=8,
    max_seq_len=0, page_size=0, dtype="float32", use_graphs=True): a
    checkpoint (HF directory or GGUF file) ready to generate; dtype is the
    activations' and KV cache's; use_graphs replays each decode step as a CUDA
    graph on a GPU (ignored on the CPU).  Close with .close() or a with block."""

    def __init__(self, path, device=-1, threads=0, dequantize=False, max_seqs=8, max_seq_len=0,
                 page_size=0, dtype="float32", use_graphs=True):
        o = _Options()
        _opts_init(_c.byref(o))
        o.device, o.threads, o.dequantize = int(device), int(threads), int(bool(dequantize))
        o.max_seqs, o.max_seq_len, o.page_size = int(max_seqs), int(max_seq_len), int(page_size)
        dts = {"float32": L.SF_F32, "float16": L.SF_F16, "bfloat16": L.SF_BF16}
        if dtype not in dts:
            raise SeqfuseError(L.SF_ERR_DTYPE, "Engine: dtype must be float32, float16 or bfloat16")
        o.dtype = dts[dtype]
        o.use_graphs = int(bool(use_graphs))
        h = _c.c_void_p()
        err = _c.create_string_buffer(512)
        st = _create(str(path).encode(), _c.byref(o), _c.byref(h), err, len(err))
        if st != 0:
            raise SeqfuseError(st, err.value.decode(errors="replace"))
        self._h = h

    def close(self):
        if getattr(self, "_h", None):
            _destroy(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    @property
    def vocab_size(self):
        return _vocab(self._h)

    @property
    def eos(self):
        return _eos(self._h)

    @property
    def bos(self):
        return _bos(self._h)

    def describe(self):
        return _describe(self._h).decode()

    def tokenize(self, text, chat=False, add_bos=False):
        """Token ids of text (chat=True: in the model's chat template)."""
        b = text.encode()
        n = _tokenize(self._h, b, int(chat), int(add_bos), None, 0)
        if n < 0:
            raise SeqfuseError(L.SF_ERR_INVALID_ARG, _last_error(self._h).decode())
        buf = (_c.c_int32 * max(n, 1))()
        _tokenize(self._h, b, int(chat), int(add_bos), buf, n)
        return list(buf[:n])

    def decode(self, ids):
        """The bytes of the ids joined, as text (invalid UTF-8 replaced)."""
        out = bytearray()
        ln = _c.c_size_t()
        for t in ids:
            p = _piece(self._h, int(t), _c.byref(ln))
            if p:
                out += _c.string_at(p, ln.value)
        return out.decode(errors="replace")

    def generate(self, prompts, max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
                 repetition_penalty=1.0, seed=0, stop=(), ignore_eos=False, chat=False,
                 return_logits=False, on_token=None):
        """Generates for each prompt (a string, tokenized with chat=chat, or a
        list of ids).  Returns one dict per prompt: "tokens", "text",
        "finish", and "logits" (a list of numpy float32 arrays, one per
        generated token: the logits it was sampled from) when return_logits.
        on_token(seq, token) is called as tokens come; a true return ends that
        sequence (finish "callback").  .stats holds the
        last call's timings."""
        ids = [self.tokenize(p, chat=chat, add_bos=not chat) if isinstance(p, str) else [int(t) for t in p]
               for p in prompts]
        n = len(ids)
        gens = (_Generation * max(n, 1))()
        keep = []
        for i, p in enumerate(ids):
            arr = (_c.c_int32 * max(len(p), 1))(*p)
            out = (_c.c_int32 * int(max_new_tokens))()
            keep += [arr, out]
            gens[i].prompt = _c.cast(arr, _P(_c.c_int32))
            gens[i].prompt_len = len(p)
            gens[i].tokens = _c.cast(out, _P(_c.c_int32))
        s = _Sampling()
        _samp_init(_c.byref(s))
        s.temperature, s.top_k, s.top_p, s.min_p = float(temperature), int(top_k), float(top_p), float(min_p)
        s.repetition_penalty, s.seed = float(repetition_penalty), int(seed)
        s.max_new_tokens, s.ignore_eos = int(max_new_tokens), int(bool(ignore_eos))
        stops = (_c.c_char_p * max(len(stop), 1))(*[x.encode() for x in stop])
        s.stop, s.nstop = _c.cast(stops, _P(_c.c_char_p)), len(stop)
        logits = [[] for _ in range(n)]
        errors = []

        def cb(user, seq, tok, lg, vocab):
            try:
                if return_logits:
                    import numpy as np
                    logits[seq].append(np.ctypeslib.as_array(lg, shape=(vocab,)).copy())
                if on_token is not None and on_token(seq, tok):
                    return 1
            except BaseException as e:  # noqa: BLE001 (re-raised after the call)
                errors.append(e)
                return 1
            return 0

        fn = _TOKEN_FN(cb)
        stats = _Stats()
        st = _generate(self._h, gens, n, _c.byref(s), fn, None, _c.byref(stats))
        if errors:
            raise errors[0]
        if st != 0:
            raise SeqfuseError(st, _last_error(self._h).decode())
        self.stats = {f: getattr(stats, f) for f, _ in _Stats._fields_}
        res = []
        for i in range(n):
            toks = list(gens[i].tokens[:gens[i].ntokens])
            r = {"tokens": toks, "text": self.decode([t for t in toks if t != self.eos]),
                 "finish": FINISH.get(gens[i].finish, "?"), "prompt_tokens": ids[i]}
            if return_logits:
                r["logits"] = logits[i]
            res.append(r)
        return res
