#!/usr/bin/env bash
# Real-kernel test of `ptsd ublk` in a QEMU VM (TCG, no KVM needed).
#
# Downloads the newest Debian 6.12 cloud kernel package (never pinned),
# takes its vmlinuz and ublk_drv.ko, builds `ptsd` (glibc, its libraries copied in), packs an
# initramfs (busybox, mke2fs, e2fsck, fio with its libraries,
# tests/vm/guest-init.sh as /init, tests/vm/scenarios/ for it to source),
# boots it and
# parses the guest's `PTSD-VM:` result lines. Downloads are cached under
# target/vm-cache/. Exit status: 0 if every guest check passed.
#
# Host packages: qemu-system-x86 busybox-static e2fsprogs xz-utils
# libclang-dev (scripts/setup installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
cache=$root/target/vm-cache
mkdir -p "$cache"
. tests/vm/dax-host.sh
. tests/vm/uring-host.sh
. tests/vm/zoned-host.sh
t0=$(date +%s)
log() { echo "== vm: [$(( $(date +%s) - t0 )) s] $*"; }

for tool in qemu-system-x86_64 busybox dpkg-deb xz apt-get gzip; do
    command -v "$tool" >/dev/null || { echo "vm test: missing host tool $tool (run scripts/setup)"; exit 1; }
done
[ -x /sbin/mke2fs ] || [ -x /usr/sbin/mke2fs ] || { echo "vm test: missing mke2fs (e2fsprogs)"; exit 1; }

# --- kernel: newest 6.12.x Debian cloud build -------------------------------
pick_kernel() {
    apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-cloud-amd64-unsigned$' \
        | awk '{print $1}' | sort -V | tail -1
}
pkg=$(pick_kernel)
if [ -z "$pkg" ]; then
    log "apt lists have no 6.12 cloud kernel; apt-get update"
    apt-get update -qq
    pkg=$(pick_kernel)
fi
[ -n "$pkg" ] || { echo "vm test: no linux-image-6.12.*-cloud-amd64-unsigned in apt"; exit 1; }
kdir=$cache/$pkg
nvmet_mods="configfs nvmet nvmet-tcp nvme-fabrics nvme-tcp"
if [ ! -f "$kdir/vmlinuz" ] || [ ! -f "$kdir/ublk_drv.ko" ] || [ ! -f "$kdir/brd.ko" ] || [ ! -f "$kdir/.nvmet" ] || [ ! -f "$kdir/nfit.ko" ] || [ ! -f "$kdir/btrfs.ko" ]; then
    log "downloading $pkg"
    rm -rf "$kdir.tmp" && mkdir -p "$kdir.tmp"
    (cd "$kdir.tmp" && apt-get download -q "$pkg" >/dev/null 2>&1 || apt-get download "$pkg")
    dpkg-deb -x "$kdir.tmp"/*.deb "$kdir.tmp/x"
    mkdir -p "$kdir"
    cp "$kdir.tmp"/x/boot/vmlinuz-* "$kdir/vmlinuz"
    # ublk_drv, and brd (a RAM disk: the kernel-only baseline of the
    # latency figures); neither depends on another module.
    # The NVMe target and initiator over TCP (the export test): loaded in
    # this order, each needing only the ones before it (or nothing).
    # And the NVDIMM stack for the DAX tests (dax-host.sh), btrfs for the
    # zoned tests (zoned-host.sh).
    for m in ublk_drv brd $nvmet_mods $dax_modules $zoned_modules; do
        ko=$(find "$kdir.tmp/x" -name "$m.ko*" | head -1)
        [ -n "$ko" ] || continue
        case "$ko" in
            *.xz) xz -dc "$ko" > "$kdir/$m.ko" ;;
            *) cp "$ko" "$kdir/$m.ko" ;;
        esac
    done
    touch "$kdir/.nvmet"
    rm -rf "$kdir.tmp"
fi
log "kernel $pkg"

# --- fio: Debian's binary plus the shared libraries it links --------------
# Packages of fio's dependency closure that the host lacks are downloaded
# and unpacked into a private root, so `ldd` (with LD_LIBRARY_PATH) finds
# every library; the host's own are used where present.
fdir=$cache/fio
if [ ! -x "$fdir/root/usr/bin/fio" ]; then
    log "downloading fio and the libraries the host lacks"
    rm -rf "$fdir" && mkdir -p "$fdir/debs"
    missing=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
            --no-breaks --no-replaces --no-enhances --no-pre-depends fio 2>/dev/null \
        | grep -E '^(lib|zlib)' | sort -u | while read -r p; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
    (cd "$fdir/debs" && apt-get download -q fio $missing >/dev/null 2>&1 || apt-get download fio $missing)
    for deb in "$fdir"/debs/*.deb; do dpkg-deb -x "$deb" "$fdir/root"; done
    rm -rf "$fdir/debs"
fi
fio_libpath=$fdir/root/lib/x86_64-linux-gnu:$fdir/root/usr/lib/x86_64-linux-gnu:$fdir/root/usr/lib/x86_64-linux-gnu/ceph
if LD_LIBRARY_PATH=$fio_libpath ldd "$fdir/root/usr/bin/fio" | grep -q 'not found'; then
    echo "vm test: fio has unresolved libraries:"
    LD_LIBRARY_PATH=$fio_libpath ldd "$fdir/root/usr/bin/fio" | grep 'not found'
    exit 1
fi

# --- ptsd --------------------------------------------------------------------
# A glibc build (the host's target), whose libraries go into the initramfs
# like mke2fs's below: a static musl build would lack `ptsd bench blk`
# (tokio-uring does not build against musl), which the guest runs beside fio.
target=$(rustc -vV | sed -n 's/^host: //p')
log "building ptsd ($target, release)"
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true \
    cargo build --release --locked --quiet --target "$target" --features ublk --bin ptsd
ptsd_bin=$root/target/$target/release/ptsd
# TPFTL's own ublk server (examples/tpftl; scenarios/tpftl-ublk.sh).
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true \
    cargo build --release --locked --quiet --target "$target" -p ptsd-example-tpftl --bin tpftl-ublk

# --- initramfs ---------------------------------------------------------------
rd=$cache/initramfs
rm -rf "$rd" && mkdir -p "$rd"/{bin,sbin,lib,lib64,proc,sys,dev,run,tmp,mnt,etc}
cp "$(command -v busybox)" "$rd/bin/busybox"
cp "$ptsd_bin" "$rd/bin/ptsd"
cp "$root/target/$target/release/tpftl-ublk" "$rd/bin/tpftl-ublk"
for lib in $( (ldd "$ptsd_bin"; ldd "$rd/bin/tpftl-ublk") 2>/dev/null | grep -o '/[^ ]*'); do
    mkdir -p "$rd$(dirname "$lib")" && cp -L "$lib" "$rd$lib"
done
cp "$kdir/ublk_drv.ko" "$kdir/brd.ko" "$rd/lib/"
for m in $nvmet_mods; do [ -f "$kdir/$m.ko" ] && cp "$kdir/$m.ko" "$rd/lib/"; done
cp tests/vm/nvmet.sh "$rd/nvmet.sh"
for tool in mke2fs e2fsck; do
    bin=$(command -v $tool || echo /sbin/$tool)
    cp "$bin" "$rd/sbin/$tool"
    for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
        mkdir -p "$rd$(dirname "$lib")"
        cp -L "$lib" "$rd$lib"
    done
done
ln -s mke2fs "$rd/sbin/mkfs.ext4"
# Libraries go to the same path in the guest (the guest runs fio with
# LD_LIBRARY_PATH naming these directories: there is no ld.so.cache).
cp "$fdir/root/usr/bin/fio" "$rd/bin/fio"
for lib in $(LD_LIBRARY_PATH=$fio_libpath ldd "$fdir/root/usr/bin/fio" | grep -o '/[^ ]*'); do
    case "$lib" in
        "$fdir"/root/*) dest=${lib#"$fdir/root"} ;;
        *) dest=$lib ;;
    esac
    mkdir -p "$rd$(dirname "$dest")"
    [ -e "$rd$dest" ] || cp -L "$lib" "$rd$dest"
done
dax_host_build
uring_host_build
zoned_host_build
cp "${PTSD_VM_INIT:-tests/vm/guest-init.sh}" "$rd/init"
# Scenarios in files of their own, sourced by /init.
mkdir -p "$rd/lib/vm-scenarios" && cp tests/vm/scenarios/*.sh "$rd/lib/vm-scenarios/"
chmod +x "$rd/init"
(cd "$rd" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$cache/initrd.gz"

# --- boot --------------------------------------------------------------------
# no_timer_check: on a heavily loaded host the guest kernel's early
# IO-APIC timer check can miss its ticks under TCG and panic ("IO-APIC +
# timer doesn't work"); seen at load 30.
# Single-threaded TCG: both vCPUs take turns on one host thread. A guest
# wake-up across vCPUs then needs no host thread wake-up, which on a busy
# host costs milliseconds (fio 4 KiB QD1 reads on a ublk RAM disk: p50
# ~0.5 ms here vs 5-9 ms with multi-threaded TCG).
out=$cache/console.log
log "booting (TCG); console in $out"
dax_qemu_args
# Every boot's kernel command line starts with these (each adds its mode).
boot_args="console=ttyS0 quiet panic=-1 no_timer_check"
qemu=(qemu-system-x86_64 -accel "${PTSD_VM_ACCEL:-tcg,thread=single}" -smp "${PTSD_VM_SMP:-2}" -nographic -no-reboot
    -kernel "$kdir/vmlinuz" -initrd "$cache/initrd.gz" "${dax_qemu[@]}")
timeout "${PTSD_VM_TIMEOUT:-600}" "${qemu[@]}" \
    -append "$boot_args ${PTSD_VM_APPEND:-}" > "$out" 2>&1 || true
tr -d '\r' < "$out" > "$out.txt"
dax_powercut_boots
uring_boot

grep -E '^PTSD-VM(-FIG)?:' "$out.txt" || true
pass=$(grep -c '^PTSD-VM: [^ ]* PASS' "$out.txt" || true)
fail=$(grep -c '^PTSD-VM: [^ ]* FAIL' "$out.txt" || true)
done_line=$(grep -c '^PTSD-VM-DONE' "$out.txt" || true)
log "whole VM test took $(( $(date +%s) - t0 )) s"
if [ "$done_line" -eq 0 ]; then
    echo "vm test: the guest did not finish; last console lines:"
    tail -40 "$out.txt"
    fail=$((fail + 1))
fi
echo "vm: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
