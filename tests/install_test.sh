#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a program against it
# twice: through find_package(seqfuse) and through pkg-config (shared), and
# once more statically.  Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(dirname "$(find "$tmp/prefix" -name libseqfuse.so | head -1)")
# the installed command runs from the custom prefix without LD_LIBRARY_PATH
if [ -x "$tmp/prefix/bin/seqfuse" ]; then
  env -u LD_LIBRARY_PATH "$tmp/prefix/bin/seqfuse" info >/dev/null
fi
cmake -S "$src/tests/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cm/consumer"
if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  cc "$src/tests/consumer/main.c" $(pkg-config --cflags --libs seqfuse) -o "$tmp/pc"
  LD_LIBRARY_PATH="$libdir" "$tmp/pc"
  cc "$src/tests/consumer/main.c" $(pkg-config --cflags seqfuse) "$libdir/libseqfuse.a" \
    $(pkg-config --libs-only-other --libs-only-l --static seqfuse | sed 's/-lseqfuse//') -o "$tmp/st"
  "$tmp/st"
else
  echo "pkg-config not installed: the pkg-config file was not checked"
fi
