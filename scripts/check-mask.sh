#!/bin/sh
# check-mask.sh GUARDIAN: the caller's signal mask reaches the provider whole through the given
# (shipped) binary, the C library's reserved 32-34 included. musl unblocks its 33 and 34 when a
# handler is installed through its sigaction; guardian's entry point installs none (README,
# Limitations; docs/design.md, start-up step 3). The unit and integration tests run the debug
# glibc build, so this is the check of the musl binary. Needs gcc.
set -eu
bin=${1:?usage: check-mask.sh GUARDIAN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/block.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
/* Blocks 32, 33 and 34 with the raw system call (the C libraries' wrappers refuse their own
   reserved signals), then execs argv[1..]. */
int main(int argc, char **argv) {
    uint64_t set = (1ULL << 31) | (1ULL << 32) | (1ULL << 33);
    if (argc < 2 || syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, 0, 8) != 0) return 2;
    execv(argv[1], argv + 1);
    return 127;
}
C
gcc -O -o "$tmp/block" "$tmp/block.c"
got=$("$tmp/block" "$bin" -- /bin/grep SigBlk /proc/self/status | tr -d ' \t')
if [ "$got" = "SigBlk:0000000380000000" ]; then
    echo "check-mask: $bin hands the provider the caller's block of 32-34 ($got)"
else
    echo "check-mask: $bin changed the caller's mask: the provider has $got, expected SigBlk:0000000380000000" >&2
    exit 1
fi
