"""Where the peers' files are, and their reference functions loaded from there.

The peers' test modules import their oracle from the module under test
(`from mamba_ssm.ops.triton.selective_state_update import selective_state_update,
selective_state_update_ref`).  The stand-in modules must therefore export the
peer's own reference, not one of ours: it is read at run time from the peer's
file in the ignored checkout folder (.peers/, filled by bench/peers/prepare.sh;
SF_PEERS_DIR to point elsewhere) and never copied into this repository.

Only the named function is taken from the file, with the file's top-level
imports except triton and mamba_ssm: importing the whole module would need
Triton and would resolve its `mamba_ssm` imports to this stand-in.  The code
object keeps the peer file's path and line numbers, so a traceback through a
reference points into the peer's file.
"""
import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# Skipped top-level imports: the GPU kernels' toolchain and the package the stand-in replaces.
_SKIP_IMPORTS = ("triton", "mamba_ssm", "flash_attn")


def peers_dir():
    """The folder holding the peers' files (.peers/ at the repository root by default)."""
    default = os.path.join(HERE, "..", "..", ".peers")
    return os.path.abspath(os.environ.get("SF_PEERS_DIR") or default)


def peer_file(relpath):
    path = os.path.join(peers_dir(), relpath)
    if not os.path.isfile(path):
        raise ImportError(f"peer file {path} is missing: run bench/peers/prepare.sh (it copies the "
                          f"peers' tests and reference modules into .peers/), or set SF_PEERS_DIR")
    return path


def _skipped(node):
    if isinstance(node, ast.Import):
        roots = [a.name.split(".")[0] for a in node.names]
    else:
        roots = [(node.module or "").split(".")[0]]
    return any(r in _SKIP_IMPORTS for r in roots)


def peer_function(relpath, name):
    """Function `name` of the peer file .peers/<relpath>, executed in a namespace of its own."""
    path = peer_file(relpath)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and not _skipped(n)]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        raise ImportError(f"{path} has no top-level function {name}")
    mod = ast.Module(body=body + defs, type_ignores=[])
    ns = {"__name__": "peer_ref." + os.path.splitext(os.path.basename(path))[0], "__file__": path}
    exec(compile(mod, path, "exec"), ns)  # noqa: S102 - the peer's own reference, by design
    fn = ns[name]
    fn.__peer_file__ = path
    return fn
