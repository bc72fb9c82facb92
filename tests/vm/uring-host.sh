# Host side of the FUSE-over-io_uring boot, sourced by run.sh. The main
# boot's Debian 6.12 kernel has no FUSE io_uring (it came in 6.14), so one
# more boot runs the whole stack — ptsd-fs over io_uring on the emulated SSD
# behind ublk, kill -9, remount, fsck — on the newest Debian cloud kernel of
# trixie-backports (downloaded from the Debian archive, never pinned, cached
# under target/vm-cache/). Guest side: the `ptsd.mode=fuse-uring` branch of
# guest-init.sh. Without network access or such a kernel the boot is
# reported as SKIP, not as a failure.

uring_mirror=${PTSD_VM_MIRROR:-http://deb.debian.org/debian}

# Sets uring_kdir (vmlinuz + ublk_drv.ko) or leaves it empty (with $uring_why).
uring_kernel_fetch() {
    uring_kdir="" uring_why=""
    local idx=$cache/trixie-backports-Packages
    if [ ! -s "$idx" ] || [ -n "$(find "$idx" -mmin +1440)" ]; then
        curl -fsS -m 120 "$uring_mirror/dists/trixie-backports/main/binary-amd64/Packages.xz" \
            | xz -dc > "$idx.tmp" 2>/dev/null && mv "$idx.tmp" "$idx" || rm -f "$idx.tmp"
    fi
    [ -s "$idx" ] || { uring_why="no trixie-backports package index (network?)"; return; }
    local ver
    ver=$(grep -oE '^Package: linux-binary-[0-9.]+\+deb[0-9]+-cloud-amd64$' "$idx" \
        | sed 's/^Package: linux-binary-//; s/-cloud-amd64$//' | sort -V | tail -1)
    [ -n "$ver" ] || { uring_why="no cloud kernel in trixie-backports"; return; }
    local dir=$cache/uring-kernel-$ver
    if [ ! -f "$dir/vmlinuz" ] || [ ! -f "$dir/ublk_drv.ko" ]; then
        log "downloading the $ver cloud kernel (trixie-backports) for the FUSE io_uring boot"
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/x"
        local p f
        for p in linux-binary linux-modules; do
            f=$(awk -v p="Package: $p-$ver-cloud-amd64" '$0 == p { hit = 1 } hit && /^Filename:/ { print $2; exit }' "$idx")
            [ -n "$f" ] && curl -fsS -m 600 -o "$dir.tmp/$p.deb" "$uring_mirror/$f" \
                && dpkg-deb -x "$dir.tmp/$p.deb" "$dir.tmp/x" \
                || { uring_why="downloading $p-$ver failed"; rm -rf "$dir.tmp"; return; }
        done
        mkdir -p "$dir"
        cp "$(find "$dir.tmp/x" -name vmlinuz | head -1)" "$dir/vmlinuz"
        # busybox insmod takes no compressed modules.
        xz -dc "$(find "$dir.tmp/x" -name 'ublk_drv.ko*' | head -1)" > "$dir/ublk_drv.ko"
        rm -rf "$dir.tmp"
    fi
    uring_kdir=$dir uring_kver=$ver
}

# Into the initramfs ($rd): the new kernel's ublk module, beside the 6.12 one.
uring_host_build() {
    uring_kernel_fetch
    if [ -n "$uring_kdir" ]; then
        mkdir -p "$rd/lib/k-uring" && cp "$uring_kdir/ublk_drv.ko" "$rd/lib/k-uring/"
    else
        log "FUSE io_uring boot skipped: $uring_why"
    fi
}

# The boot itself; its result lines are appended to $out.txt.
uring_boot() {
    if [ -z "$uring_kdir" ]; then
        echo "PTSD-VM: stack-fs-uring SKIP $uring_why" >> "$out.txt"
        return
    fi
    local con=$cache/console-uring.log t1
    t1=$(date +%s)
    log "FUSE io_uring boot ($uring_kver); console in $con"
    timeout "${PTSD_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel "${PTSD_VM_ACCEL:-tcg,thread=single}" \
        -smp "${PTSD_VM_SMP:-2}" -m 2G -nographic -no-reboot -cpu max \
        -kernel "$uring_kdir/vmlinuz" -initrd "$cache/initrd.gz" \
        -append "$boot_args ptsd.mode=fuse-uring" > "$con" 2>&1 || true
    tr -d '\r' < "$con" | grep -aoE 'PTSD-VM(-FIG)?: .*' >> "$out.txt" || true
    grep -q '^PTSD-VM: stack-fs-uring ' "$out.txt" ||
        echo "PTSD-VM: stack-fs-uring FAIL the boot did not finish (see $con)" >> "$out.txt"
    echo "PTSD-VM-FIG: fuse-uring boot ($uring_kver) took $(( $(date +%s) - t1 )) s (host)" >> "$out.txt"
}
