#!/usr/bin/env bash
# Builds the systemd lane's Debian 12 root: debootstrap (bookworm, minbase) with systemd as
# init, D-Bus, a user manager for a lingering unprivileged user, and Debian's cloud kernel with
# the initrd Debian generates for it (virtio_blk, virtio_pci). Output, cached by the caller:
#   $OUT/rootfs.img   ext4 image of the root (booted read-only through qemu's snapshot=on)
#   $OUT/vmlinuz      the kernel, $OUT/initrd.img its initrd, $OUT/versions.txt what is in it
# Needs root (debootstrap, chroot), debootstrap and e2fsprogs (mkfs.ext4 -d).
set -euo pipefail
OUT=${1:?usage: build-image.sh OUTDIR}
MIRROR=${GUARDIAN_SYSTEMD_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$OUT"
ROOT=$(mktemp -d "$OUT/root.XXXXXX")
cleanup() {
    for m in proc sys dev; do umount -l "$ROOT/$m" 2>/dev/null || true; done
    rm -rf "$ROOT"
}
trap cleanup EXIT

# minbase keeps it small; the packages below are what the lane needs and no more.
PKGS=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,procps,util-linux,passwd
PKGS=$PKGS,linux-image-cloud-amd64,initramfs-tools,zstd
timeout 900 debootstrap --variant=minbase --include="$PKGS" bookworm "$ROOT" "$MIRROR"

# The initrd: debootstrap's postinst ran update-initramfs without /proc; regenerate it once
# with the virtio modules named, so the root on /dev/vda is found whatever the build host is.
printf '%s\n' virtio_pci virtio_blk ext4 >>"$ROOT/etc/initramfs-tools/modules"
mount -t proc proc "$ROOT/proc"
kver=$(basename "$(ls -d "$ROOT"/lib/modules/* | head -n1)")
chroot "$ROOT" update-initramfs -c -k "$kver" >/dev/null 2>&1 ||
    chroot "$ROOT" update-initramfs -u -k "$kver" >/dev/null
umount "$ROOT/proc"

# The machine: hostname, fstab, root login off the console, an unprivileged user who lingers
# (user@1000.service starts at boot, so `systemd-run --user` has a manager to talk to).
echo guardian-systemd >"$ROOT/etc/hostname"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' >"$ROOT/etc/fstab"
chroot "$ROOT" useradd -m -u 1000 -s /bin/sh tester
mkdir -p "$ROOT/var/lib/systemd/linger"
: >"$ROOT/var/lib/systemd/linger/tester"
# Quiet boot, no getty on the console (the test unit owns the second serial port).
chroot "$ROOT" systemctl mask serial-getty@ttyS0.service getty@tty1.service \
    systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    fstrim.timer >/dev/null 2>&1 || true

# The lane's entry point: a oneshot that mounts the payload disk (/dev/vdb: guardian and the
# test script, built fresh per run) and runs it; the script powers the machine off.
cat >"$ROOT/etc/systemd/system/guardian-lane.service" <<'EOF'
[Unit]
Description=guardian systemd lane
After=multi-user.target user@1000.service
Wants=user@1000.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mkdir -p /payload && mount -o ro /dev/vdb /payload && exec /bin/sh /payload/inside.sh'
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=journal+console
TimeoutStartSec=600

[Install]
WantedBy=multi-user.target
EOF
chroot "$ROOT" systemctl enable guardian-lane.service >/dev/null 2>&1
# Never enter the emergency shell (it would wait on a console forever): power off instead.
mkdir -p "$ROOT/etc/systemd/system/emergency.service.d" "$ROOT/etc/systemd/system/rescue.service.d"
for u in emergency rescue; do
    printf '[Service]\nExecStart=\nExecStart=/bin/systemctl --no-block poweroff\n' \
        >"$ROOT/etc/systemd/system/$u.service.d/poweroff.conf"
done

{
    echo "kernel $kver"
    chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}\n' systemd linux-image-cloud-amd64 dbus
} >"$OUT/versions.txt"
cp "$ROOT/boot/vmlinuz-$kver" "$OUT/vmlinuz"
cp "$ROOT/boot/initrd.img-$kver" "$OUT/initrd.img"
# Drop what the VM never needs (the kernel image and the apt caches) before sizing the image.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/boot/*
size_mb=$(($(du -sm "$ROOT" | cut -f1) + 384))
rm -f "$OUT/rootfs.img.tmp"
mkfs.ext4 -q -F -L guardian-root -d "$ROOT" "$OUT/rootfs.img.tmp" "${size_mb}M"
mv "$OUT/rootfs.img.tmp" "$OUT/rootfs.img"
echo "build-image: $OUT/rootfs.img ($size_mb MB), $(tr '\n' ';' <"$OUT/versions.txt")"
