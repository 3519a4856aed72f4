#!/usr/bin/env bash
# Copy the peers' test files and the reference modules they need into .peers/ (ignored by
# git: their code is theirs and never committed here), laid out as run_peer_suites.sh
# expects, plus einops (the tests import it) into .peers/site/.  Run from the repository
# root on a machine that has the peers' git checkouts; then carry .peers/ to the GPU machine.
#
#   FA_GIT     a flash-attention git directory   (default: the fetch mirror)
#   MAMBA_GIT  a mamba git directory             (default: the fetch mirror)
#   EINOPS_DIR an einops package folder          (default: .peer/einops, the main checkout's
#              .peer/einops, or the einops that python3 imports)
#   REV        the revision taken from both      (default: HEAD)
set -euo pipefail
FA_GIT=${FA_GIT:-/work/.mirror/Dao-AILab+flash-attention/repo}
MAMBA_GIT=${MAMBA_GIT:-/work/.mirror/state-spaces+mamba/repo}
REV=${REV:-HEAD}
P=.peers

take() {  # take GITDIR PATH DEST: PATH at $REV of the repository GITDIR, written to DEST
    mkdir -p "$(dirname "$3")"
    git --git-dir="$1" show "$REV:$2" > "$3"
}

rm -rf "$P"
take "$FA_GIT" tests/test_flash_attn.py "$P/flash-attention/tests/test_flash_attn.py"
for f in tests/ops/triton/test_selective_state_update.py tests/ops/triton/test_layernorm_gated.py \
         mamba_ssm/ops/triton/selective_state_update.py mamba_ssm/ops/triton/layernorm_gated.py; do
    take "$MAMBA_GIT" "$f" "$P/mamba/$f"
done

if [ -z "${EINOPS_DIR:-}" ]; then
    for d in .peer/einops ../main/.peer/einops /work/main/.peer/einops; do
        [ -f "$d/__init__.py" ] && EINOPS_DIR=$d && break
    done
fi
if [ -z "${EINOPS_DIR:-}" ]; then
    EINOPS_DIR=$(python3 -c "import einops, os; print(os.path.dirname(einops.__file__))" \
                 2>/dev/null || true)
fi
[ -f "${EINOPS_DIR:-}/__init__.py" ] || {
    echo "prepare.sh: no einops found; set EINOPS_DIR" >&2; exit 1; }
mkdir -p "$P/site"
cp -r "$EINOPS_DIR" "$P/site/einops"
find "$P/site" -name __pycache__ -prune -exec rm -rf {} +

{
    echo "flash-attention $(git --git-dir="$FA_GIT" rev-parse --short=12 "$REV")"
    echo "mamba $(git --git-dir="$MAMBA_GIT" rev-parse --short=12 "$REV")"
    echo "einops $(PYTHONPATH=$P/site python3 -c "import einops; print(einops.__version__)")"
} > "$P/SOURCES.txt"
cat "$P/SOURCES.txt"
du -sh "$P"
