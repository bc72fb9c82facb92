# Host side of the DAX tests (guest side: tests/vm/dax.sh), sourced by
# run.sh: the NVDIMM modules and the journal's real-region test binary in
# the initramfs, QEMU's two NVDIMMs, and the power-cut boots.

dax_modules="libnvdimm nd_btt nd_pmem nfit"

# Into the initramfs ($rd): the modules, the guest script, and the
# journal's real-region tests built for the guest ($target).
dax_host_build() {
    for m in $dax_modules; do cp "$kdir/$m.ko" "$rd/lib/"; done
    cp tests/vm/dax.sh "$rd/lib/dax.sh"
    log "building the journal's real-region tests ($target, release)"
    local exe
    exe=$(CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true \
        cargo test --release --locked --quiet --target "$target" -p ptsd-nvjournal \
            --test real_region --no-run --message-format=json \
        | grep -o '"executable":"[^"]*real_region[^"]*"' | tail -1 | cut -d'"' -f4)
    [ -x "$exe" ] || { echo "vm test: no real_region test binary"; exit 1; }
    cp "$exe" "$rd/bin/nvjournal-real-region"
    for lib in $(ldd "$exe" 2>/dev/null | grep -o '/[^ ]*'); do # none when static
        mkdir -p "$rd$(dirname "$lib")" && [ -e "$rd$lib" ] || cp -L "$lib" "$rd$lib"
    done
}

# QEMU options: an emulated NVDIMM backed by a file that outlives QEMU
# (persistence "cpu": TCG models no cache, stores reach the file), a CPU
# with clwb/clflushopt (-cpu max; qemu64 has only clflush), and a second
# NVDIMM, used as a plain block device (/dev/pmem1, ext4 without dax), for
# the emulated SSD's image in the power-cut test (the cloud kernel's
# virtio-blk is a module; this needs none more). Both files are new for
# each run.sh.
dax_qemu_args() {
    rm -f "$cache/pmem.img" "$cache/pmem-ssd.img"
    dax_qemu=(-machine pc,nvdimm=on,nvdimm-persistence=cpu -cpu max -m 2G,slots=2,maxmem=4G
        -object "memory-backend-file,id=mem1,share=on,mem-path=$cache/pmem.img,size=512M"
        -device nvdimm,memdev=mem1,id=nv1
        -object "memory-backend-file,id=mem2,share=on,mem-path=$cache/pmem-ssd.img,size=256M"
        -device nvdimm,memdev=mem2,id=nv2)
}

# Two more boots on the same NVDIMM files: the first writes and
# fsyncs through the whole stack and prints PTSD-VM-POWERCUT, then QEMU is
# killed (SIGKILL: a power cut for the guest); the second verifies. Their
# result lines are appended to $out.txt.
dax_powercut_boots() {
    local t1 cut=$cache/console-powercut1.log ver=$cache/console-powercut2.log
    t1=$(date +%s)
    log "power cut: boot 1 (write + fsync), console in $cut"
    "${qemu[@]}" -append "$boot_args ptsd.dax=powercut1" > "$cut" 2>&1 &
    local pid=$! i=0
    while kill -0 $pid 2>/dev/null && ! grep -q '^PTSD-VM-POWERCUT' "$cut" && [ $i -lt 1800 ]; do
        sleep 0.1; i=$((i + 1))
    done
    local cutok=0 ended=""
    grep -q '^PTSD-VM-POWERCUT' "$cut" && cutok=1
    kill -0 $pid 2>/dev/null || ended="QEMU exited by itself after $((i / 10)) s; "
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null || true
    tr -d '\r' < "$cut" | grep -aoE 'PTSD-VM(-FIG)?: .*' >> "$out.txt" || true
    if [ $cutok = 0 ]; then
        echo "PTSD-VM: dax-powercut-write FAIL boot 1 never reached the power cut (${ended}see $cut)" >> "$out.txt"
        return
    fi
    log "power cut: QEMU killed; boot 2 (verify), console in $ver"
    timeout 300 "${qemu[@]}" -append "$boot_args ptsd.dax=powercut2" > "$ver" 2>&1 || true
    tr -d '\r' < "$ver" | grep -aoE 'PTSD-VM(-FIG)?: .*' >> "$out.txt" || true
    grep -q '^PTSD-VM: dax-powercut-verify ' "$out.txt" ||
        echo "PTSD-VM: dax-powercut-verify FAIL boot 2 did not finish (see $ver)" >> "$out.txt"
    echo "PTSD-VM-FIG: dax-powercut both boots took $(( $(date +%s) - t1 )) s (host)" >> "$out.txt"
}
