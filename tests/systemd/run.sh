#!/usr/bin/env bash
# The systemd lane (`make systemd-test`, run by .ci/run): boots a Debian 12 root with systemd
# as init under qemu (software emulation, `-accel tcg`: nested KVM hangs on the CI hosts) on
# Debian's own cloud kernel, and runs the README's systemd lines there (tests/systemd/inside.sh).
# The root image is built once by build-image.sh and cached under target/systemd/ (delete it
# to rebuild); the static guardian (target/dist/guardian, `make release`) and the test script
# reach the VM on a second disk made per run. Results come back as marker lines on the second
# serial port. Closing line: `systemd: N passed, N failed`; non-zero on any failure. Skips
# visibly (`SKIPPED: systemd-test: <reason>`) only when qemu cannot run at all, and fails
# then too under CI=true.
#   GUARDIAN_SYSTEMD_BEFORE=path/to/an/older/guardian  also runs the service units with it
#   (evidence of what changed; not counted).
set -uo pipefail
cd "$(dirname "$0")/../.."
CACHE=${GUARDIAN_SYSTEMD_CACHE:-target/systemd}
BIN=${GUARDIAN_BIN:-target/dist/guardian}
VM_TIMEOUT=${GUARDIAN_SYSTEMD_VM_TIMEOUT:-420}

# A skip is visible; under CI=true (.ci/run) it is a failure: CI hosts can run qemu.
skip() {
    echo "SKIPPED: systemd-test: $1"
    echo "systemd: 0 passed, 0 failed (skipped)"
    [ "${CI:-}" = true ] && exit 1
    exit 0
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v debootstrap >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null || true
        apt_install qemu-system-x86 debootstrap e2fsprogs || true
    fi
fi
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed and cannot be (apt-get install qemu-system-x86)"
[ "$(uname -m)" = x86_64 ] || skip "the lane boots an amd64 Debian; this host is $(uname -m)"
[ -x "$BIN" ] || { echo "systemd-test: $BIN is missing: run make release first" >&2; exit 2; }

if [ ! -s "$CACHE/rootfs.img" ] || [ ! -s "$CACHE/vmlinuz" ] || [ ! -s "$CACHE/initrd.img" ]; then
    [ "$(id -u)" = 0 ] || skip "building the Debian root needs root (debootstrap, chroot); no cached image in $CACHE"
    echo "systemd-test: building the Debian 12 root with systemd (cached in $CACHE)"
    start=$(date +%s)
    tests/systemd/build-image.sh "$CACHE" >"$CACHE.build.log" 2>&1 ||
        { tail -30 "$CACHE.build.log"; echo "systemd: 0 passed, 1 failed (image build)"; exit 1; }
    tail -n1 "$CACHE.build.log"
    echo "systemd-test: image built in $(($(date +%s) - start)) s"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/payload"
install -m 0755 "$BIN" "$work/payload/guardian"
[ -n "${GUARDIAN_SYSTEMD_BEFORE:-}" ] && install -m 0755 "$GUARDIAN_SYSTEMD_BEFORE" "$work/payload/guardian-before"
install -m 0644 tests/systemd/inside.sh "$work/payload/inside.sh"
mkfs.ext4 -q -F -d "$work/payload" "$work/payload.img" 16M

echo "systemd-test: booting $(tr '\n' ';' <"$CACHE/versions.txt") under qemu TCG (at most $VM_TIMEOUT s)"
start=$(date +%s)
# snapshot=on: the cached root is never written. ttyS0 is the console, ttyS1 the results.
timeout --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 -accel tcg -m 1024 -smp 2 -nodefaults -nographic \
    -no-reboot \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 panic=-1 systemd.show_status=0 loglevel=4" \
    -drive "file=$CACHE/rootfs.img,if=virtio,format=raw,snapshot=on" \
    -drive "file=$work/payload.img,if=virtio,format=raw,readonly=on" \
    -serial "file:$work/console.log" -serial "file:$work/results.log" \
    -monitor none </dev/null
qemu_status=$?
echo "systemd-test: the VM ran $(($(date +%s) - start)) s (qemu status $qemu_status)"
cp "$work/console.log" "$CACHE.console.log" 2>/dev/null || true

tr -d '\r' <"$work/results.log" | grep '^GL-' | sed 's/^/  /'
passed=$(tr -d '\r' <"$work/results.log" | grep -c '^GL-PASS ')
failed=$(tr -d '\r' <"$work/results.log" | grep -c '^GL-FAIL ')
if ! tr -d '\r' <"$work/results.log" | grep -q '^GL-DONE'; then
    echo "systemd-test: the VM never finished the lane (qemu status $qemu_status); console tail:"
    tail -n 40 "$work/console.log"
    failed=$((failed + 1))
fi
echo "systemd: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
