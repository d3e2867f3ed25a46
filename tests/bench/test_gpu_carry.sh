#!/usr/bin/env bash
# ctest `bench`: bench/gpu_carry.sh's check on hand-made carries: a binary whose library is carried
# passes; the same binary without it fails naming the binary and the library; a binary linking
# NCCL fails; a carry over the size limit fails. Uses /usr/bin/xz (it needs liblzma.so.5) as the
# binary; exit 0 when every check holds.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu_carry.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # expect WANT_RC PATTERN CARRY: carry_check's exit and a line of its output
    local want=$1 pattern=$2 carry=$3 out rc
    out=$(carry_check "$carry" 2>&1)
    rc=$?
    if [[ $rc != "$want" ]] || ! grep -q -- "$pattern" <<< "$out"; then
        echo "FAILED: $carry: exit $rc (want $want), no line matching '$pattern' in:"
        echo "$out" | sed 's/^/    /'
        fails=1
    fi
}
lzma=$(ldd /usr/bin/xz | awk '/liblzma/ {print $3}')
make_carry() {  # make_carry DIR WITH_LZMA
    mkdir -p "$1/p/bin" "$1/p/lib" "$1/p/ompi"
    cp /usr/bin/xz "$1/p/bin/skew"
    [[ $2 == yes ]] && cp -L "$lzma" "$1/p/lib/"
    mkdir -p "$1/c"
    tar -C "$1/p" -cf - bin lib ompi | xz -1 > "$1/c/payload.tar.xz"
    echo test > "$1/c/COMMIT"
}
make_carry "$tmp/good" yes
expect 0 "every library each carried file needs is carried" "$tmp/good/c"
make_carry "$tmp/bad" no
expect 1 "FAILED: bin/skew needs liblzma.so.5, which is neither carried nor in the GPU image" "$tmp/bad/c"
CARRY_MAX_MIB=0 expect 1 "over the 0 MiB" "$tmp/good/c"
# a binary that links NCCL: patchelf is not at hand, so a fake library named libnccl.so.2 is made
# with the compiler and linked into a tiny program
if command -v cc >/dev/null; then
    mkdir -p "$tmp/n/p/bin" "$tmp/n/p/lib" "$tmp/n/p/ompi" "$tmp/n/c" "$tmp/n/build"
    echo 'int ncclFake(void) { return 0; }' > "$tmp/n/build/n.c"
    echo 'int ncclFake(void); int main(void) { return ncclFake(); }' > "$tmp/n/build/m.c"
    cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$tmp/n/build/libnccl.so.2" "$tmp/n/build/n.c" &&
        cc -o "$tmp/n/p/bin/skew" "$tmp/n/build/m.c" "$tmp/n/build/libnccl.so.2"
    tar -C "$tmp/n/p" -cf - bin lib ompi | xz -1 > "$tmp/n/c/payload.tar.xz"
    expect 1 "FAILED: bin/skew links libnccl.so.2" "$tmp/n/c"
fi
(( fails == 0 )) && echo "gpu_carry check: all checks passed"
exit $fails
