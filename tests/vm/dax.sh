# The journal on real DAX: sourced by guest-init.sh (as /lib/dax.sh) after
# its helpers (result, check, fig, up). QEMU gives the guest an
# emulated NVDIMM (run.sh); this brings it up as /dev/pmem0 in fsdax mode
# without ndctl, puts ext4 -o dax on it and runs there: the journal's
# real-region tests in DAX + MAP_SYNC mode (mode checked, flush checker on),
# the whole stack (ptsd mount, journal on DAX, checkpoints to the emulated
# SSD behind ublk) across a kill -9 of the file system's daemon, and the
# journal benchmark on DAX vs tmpfs. Boots started with ptsd.dax=powercut1
# and ptsd.dax=powercut2 on the kernel command line run the two halves of
# the power-cut test instead (run.sh kills QEMU between them).

PMEM=/mnt/pmem

# Load the NVDIMM stack: the namespace comes up raw (or, once converted on
# an earlier boot, in fsdax mode: the pfn info block is on the NVDIMM).
dax_modules() {
    for m in libnvdimm nd_btt nd_pmem nfit; do
        insmod /lib/$m.ko || { echo "insmod $m failed"; return 1; }
    done
    i=0
    until [ -e /dev/pmem0 ] && [ -e /dev/pmem1 ]; do
        [ $i -ge 100 ] && { echo "no /dev/pmem0 and pmem1"; ls /sys/bus/nd/devices; return 1; }
        sleep 0.1; i=$((i + 1))
    done
}

dax_is_fsdax() {
    for p in /sys/bus/nd/devices/pfn*; do
        [ -n "$(cat "$p/namespace" 2>/dev/null)" ] && return 0
    done
    return 1
}

# Raw -> fsdax through sysfs: detach the namespace from nd_pmem, give the
# pfn seed a uuid, the mode and the namespace, and bind the pfn device
# (what `ndctl create-namespace -f -e namespace0.0 -m fsdax` does).
dax_to_fsdax() {
    dax_is_fsdax && return 0
    nd=/sys/bus/nd
    echo namespace0.0 > $nd/drivers/nd_pmem/unbind || return 1
    pfn=$(basename "$(ls -d $nd/devices/pfn0.* | head -1)")
    cat /proc/sys/kernel/random/uuid > $nd/devices/$pfn/uuid &&
    echo pmem > $nd/devices/$pfn/mode &&
    echo namespace0.0 > $nd/devices/$pfn/namespace &&
    echo "$pfn" > $nd/drivers/nd_pmem/bind || return 1
    i=0
    until [ -e /dev/pmem0 ] && dax_is_fsdax; do
        [ $i -ge 100 ] && { echo "pmem0 not back in fsdax mode"; return 1; }
        sleep 0.1; i=$((i + 1))
    done
}

# ext4 -o dax on /dev/pmem0 (formatted when FORMAT=1 or not mountable).
dax_mount() {
    mkdir -p $PMEM
    if [ "${1:-}" = format ] || ! mount -t ext4 -o dax /dev/pmem0 $PMEM 2>/dev/null; then
        mkfs.ext4 -F -q -b 4096 /dev/pmem0 && mount -t ext4 -o dax /dev/pmem0 $PMEM || return 1
    fi
    grep -q "^/dev/pmem0 $PMEM ext4 .*dax" /proc/mounts || { echo "not mounted with dax"; grep pmem /proc/mounts; return 1; }
}

# The journal's real-region tests (crates/nvjournal/tests/real_region.rs)
# with the region on DAX: the first asserts DAX mode (MAP_SYNC: VmFlags sf;
# statx DAX), all run under the flush checker. And on tmpfs, where MAP_SYNC
# must be refused.
dax_journal_tests() {
    PTSD_REGION_DIR=$PMEM PTSD_EXPECT_REGION_MODE=dax PTSD_FLUSH_CHECK=1 \
        /bin/nvjournal-real-region --test-threads=1 --nocapture > /tmp/dax-tests.out 2>&1 ||
        { cat /tmp/dax-tests.out; return 1; }
    # (--nocapture prints it after the test's name, on the same line)
    grep -q 'REGION: mode=dax (MAP_SYNC) map_sync_vmflag_sf=true statx_dax=true' /tmp/dax-tests.out ||
        { echo "DAX mode not shown"; grep REGION /tmp/dax-tests.out; return 1; }
    grep -q 'durability points checked, 0 violation' /tmp/dax-tests.out || { echo "flush checker not run"; return 1; }
    if grep 'violation(s)' /tmp/dax-tests.out | grep -v ' 0 violation(s)'; then return 1; fi
    # Every test of the binary ran and passed (not a count that each new
    # test would have to bump).
    grep -qE 'test result: ok\. [0-9]+ passed; 0 failed' /tmp/dax-tests.out
}

dax_tmpfs_refuses_map_sync() {
    PTSD_REGION_DIR=/dev/shm PTSD_EXPECT_REGION_MODE=tmpfs \
        /bin/nvjournal-real-region --exact region_mode_is_the_one_expected --nocapture > /tmp/dax-tmpfs.out 2>&1 ||
        { cat /tmp/dax-tmpfs.out; return 1; }
    grep -q 'REGION: mode=tmpfs.* map_sync_vmflag_sf=false statx_dax=false' /tmp/dax-tmpfs.out
}

# fsync'd files on ptsd mount; their sums in $1.
dax_write_files() {
    mkdir -p /mnt/p/d || return 1
    i=0
    while [ $i -lt 16 ]; do
        dd if=/dev/urandom of=/mnt/p/d/f$i bs=4k count=$((i % 8 + 1)) conv=fsync 2>/dev/null || return 1
        dd if=/dev/urandom of=/mnt/p/log bs=512 count=1 oflag=append conv=notrunc,fsync 2>/dev/null || return 1
        i=$((i + 1))
    done
    (cd /mnt/p && md5sum log d/*) > "$1"
}

dax_banner_ok() { # mount output file
    grep -q 'power-loss safe (DAX, MAP_SYNC, clwb+sfence)' "$1" ||
        { echo "durability banner:"; cat "$1"; return 1; }
}

# The whole stack: ptsd-fs with its journal on DAX, checkpoints down to
# the emulated SSD behind ublk; fsync'd data survives kill -9 of the file
# system's daemon (replayed from the DAX journal) and a clean unmount.
dax_stack() {
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --no-poll) || return 1
    id=${dev#/dev/ublkb}
    jargs="--journal $PMEM/stack.journal --journal-size 16M"
    ptsd mkfs "$dev" > /dev/null || return 1
    mkdir -p /mnt/p
    ptsd mount --device "$dev" $jargs /mnt/p > /tmp/dax-mount.out 2>&1 || { cat /tmp/dax-mount.out; return 1; }
    dax_banner_ok /tmp/dax-mount.out || return 1
    t0=$(up)
    dax_write_files /tmp/dax-stack.sums || return 1
    t1=$(up)
    echo "32 fsyncs in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" > /tmp/dax-stack.fig
    kill -9 "$(cat /run/ptsd/*.pid)" || return 1
    sleep 0.3
    umount /mnt/p 2>/dev/null || umount -l /mnt/p || return 1
    ptsd mount --device "$dev" $jargs /mnt/p > /tmp/dax-mount.out 2>&1 || { echo "remount after kill -9 failed"; cat /tmp/dax-mount.out; return 1; }
    grep -q 'recovered' /tmp/dax-mount.out || { echo "no journal recovery:"; cat /tmp/dax-mount.out; return 1; }
    (cd /mnt/p && md5sum -c -s /tmp/dax-stack.sums) || { echo "fsync'd data lost after kill -9"; return 1; }
    ptsd umount /mnt/p || return 1
    ptsd fsck "$dev" > /dev/null || { echo "fsck after clean unmount"; return 1; }
    ptsd ublk del "$id"
}

# `ptsd bench journal` with the region on DAX and on tmpfs, one kind and
# one thread, interleaved rounds (DAX_BENCH_ROUNDS, default 2); the guest reports blocks/s of the median
# run of each and the ratio (TCG: compare, do not read absolute figures).
dax_bench() {
    mkdir -p /mnt/bshm && mount -t tmpfs -o size=160m tmpfs /mnt/bshm || return 1
    r=0
    while [ $r -lt "${DAX_BENCH_ROUNDS:-2}" ]; do
        r=$((r + 1))
        for place in dax:$PMEM tmpfs:/mnt/bshm; do
            ptsd bench journal --kinds partitioned --threads 1 --rounds 1 --seconds 1 \
                --region-size 32MiB --region "${place#*:}/bench" > /tmp/bench.out 2>&1 ||
                { cat /tmp/bench.out; return 1; }
            bps=$(awk '$1 == "median" && $2 ~ /^partitioned/ { print $4; exit }' /tmp/bench.out)
            [ -n "$bps" ] || { cat /tmp/bench.out; return 1; }
            stage=$(grep -o 'crc + non-temporal copy + fence [0-9.]*us, flag store + flush + fence [0-9.]*us' /tmp/bench.out)
            grep -q "region ${place#*:}/bench (${place%%:*}" /tmp/bench.out ||
                { echo "unexpected region mode:"; grep 'journal bench:' /tmp/bench.out; return 1; }
            echo "${place%%:*} $r $bps $stage" >> /tmp/dax-bench.txt
        done
    done
    umount /mnt/bshm
    # Median of each place's runs (busybox awk has no asort).
    awk '{ n[$1]++; v[$1, n[$1]] = $3; all[$1] = all[$1] " " $3; by[$1, $2] = $3 } END {
            for (r = 1; r <= n["dax"]; r++) if (by["tmpfs", r] > 0) pairs = pairs sprintf(" %.2f", by["dax", r] / by["tmpfs", r])
            for (k in n) {
                for (i = 1; i <= n[k]; i++) for (j = i + 1; j <= n[k]; j++)
                    if (v[k, j] < v[k, i]) { t = v[k, i]; v[k, i] = v[k, j]; v[k, j] = t }
                m = int((n[k] + 1) / 2)
                med[k] = n[k] % 2 ? v[k, m] : (v[k, m] + v[k, m + 1]) / 2
            }
            printf "journal-bench 1 thread partitioned4 blocks/s, median (mean of the middle two if even) of %d rounds: dax %d (runs:%s) tmpfs %d (runs:%s) dax/tmpfs=%.2f (per round:%s)\n",
                n["dax"], med["dax"], all["dax"], med["tmpfs"], all["tmpfs"], med["dax"] / med["tmpfs"], pairs }' /tmp/dax-bench.txt > /tmp/dax-bench.fig
}

dax_checks() {
    rm -f /tmp/dax-bench.txt
    t0=$(up)
    check dax-modules dax_modules || return
    check dax-fsdax dax_to_fsdax
    check dax-mount dax_mount format
    check dax-journal-tests dax_journal_tests
    grep -o 'REGION: .*' /tmp/dax-tests.out | head -1 | sed 's/^/PTSD-VM-FIG: dax /'
    grep 'kill -9 after' /tmp/dax-tests.out | sed 's/^/PTSD-VM-FIG: dax journal /'
    check dax-tmpfs-refuses-map-sync dax_tmpfs_refuses_map_sync
    check dax-stack-kill9 dax_stack
    fig "dax-stack $(cat /tmp/dax-stack.fig 2>/dev/null)"
    fig "dax-stack remount after kill -9: $(grep -o 'journal .*' /tmp/dax-mount.out | head -1)"
    check dax-bench dax_bench
    fig "$(cat /tmp/dax-bench.fig 2>/dev/null)"
    grep -h . /tmp/dax-bench.txt 2>/dev/null | sed 's/^/PTSD-VM-FIG: dax-bench-run /'
    fig "dax checks took $(awk -v a="$t0" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"
}

# --- power cut: two boots on the same two NVDIMMs ---------------------------
# Boot 1 writes and fsyncs through the whole stack (journal on DAX, the
# SSD's image on ext4 on the second NVDIMM, /dev/pmem1, as a plain block
# device), then says PTSD-VM-POWERCUT and waits:
# run.sh kills QEMU there (no sync, no unmount, nothing stopped). Boot 2
# mounts both file systems again, restarts the SSD from its image and
# mounts ptsd-fs, which replays the DAX journal: every fsync'd byte must be
# there.
dax_disk() {
    mkdir -p /mnt/disk
    [ "${1:-}" = format ] && { mkfs.ext4 -F -q -b 4096 /dev/pmem1 || return 1; }
    mount -t ext4 -o dax=never /dev/pmem1 /mnt/disk
}

dax_powercut1() {
    dax_modules && dax_to_fsdax && dax_mount && dax_disk format || return 1
    rm -f $PMEM/cut.journal $PMEM/cut.sums
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --no-poll --store /mnt/disk/ssd.img) || return 1
    ptsd mkfs "$dev" > /dev/null || return 1
    mkdir -p /mnt/p
    ptsd mount --device "$dev" --journal $PMEM/cut.journal --journal-size 16M /mnt/p > /tmp/dax-mount.out 2>&1 ||
        { cat /tmp/dax-mount.out; return 1; }
    dax_banner_ok /tmp/dax-mount.out || return 1
    dax_write_files /tmp/cut.sums || return 1
    # The sums go to the DAX file system, fsync'd (no global sync: that
    # would flush the stack under test too).
    dd if=/tmp/cut.sums of=$PMEM/cut.sums conv=fsync 2>/dev/null
}

dax_powercut2() {
    dax_modules || return 1
    dax_is_fsdax || { echo "the NVDIMM lost its fsdax info block"; return 1; }
    mkdir -p $PMEM && mount -t ext4 -o dax /dev/pmem0 $PMEM || { echo "cannot mount the DAX fs after the power cut"; return 1; }
    [ -s $PMEM/cut.sums ] || { echo "no sums from boot 1"; return 1; }
    dax_disk || { echo "cannot mount the SSD's disk after the power cut"; return 1; }
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --no-poll --store /mnt/disk/ssd.img) || return 1
    mkdir -p /mnt/p
    ptsd mount --device "$dev" --journal $PMEM/cut.journal --journal-size 16M /mnt/p > /tmp/dax-mount.out 2>&1 ||
        { echo "mount after the power cut failed"; cat /tmp/dax-mount.out; return 1; }
    cat /tmp/dax-mount.out
    grep -q 'recovered' /tmp/dax-mount.out || { echo "no journal recovery"; return 1; }
    (cd /mnt/p && md5sum -c -s $PMEM/cut.sums) || { echo "fsync'd data lost in the power cut"; return 1; }
    ptsd umount /mnt/p || return 1
    ptsd fsck "$dev" > /dev/null || { echo "fsck after the power cut"; return 1; }
}

case " $(cat /proc/cmdline) " in
    *" ptsd.dax=powercut1 "*)
        t0=$(up)
        insmod /lib/ublk_drv.ko
        if dax_powercut1 > /tmp/cut.out 2>&1; then
            result dax-powercut-write PASS "$(awk -v a="$t0" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"
            echo PTSD-VM-POWERCUT
            while :; do sleep 1; done # run.sh pulls the plug
        fi
        result dax-powercut-write FAIL "$(tail -n 4 /tmp/cut.out | tr '\n' ' ')"
        exit 0
        ;;
    *" ptsd.dax=powercut2 "*)
        t0=$(up)
        insmod /lib/ublk_drv.ko
        check dax-powercut-verify dax_powercut2
        fig "dax-powercut remount: $(grep -o 'journal .*' /tmp/dax-mount.out | head -1)"
        fig "dax-powercut verify boot took $(awk -v a="$t0" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"
        exit 0
        ;;
esac
