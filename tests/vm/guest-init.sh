#!/bin/busybox sh
# /init of the ublk test VM: runs every check, prints one `PTSD-VM: NAME
# PASS|FAIL [detail]` line each (parsed by tests/vm/run.sh), figures as
# `PTSD-VM-FIG: ...`, then `PTSD-VM-DONE` and powers off.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs -o size=600m tmpfs /tmp
mkdir -p /dev/shm && mount -t tmpfs -o size=64m tmpfs /dev/shm
echo 3 > /proc/sys/kernel/printk

up() { cut -d' ' -f1 /proc/uptime; }
result() { echo "PTSD-VM: $* (t=$(up)s)"; }
fig() { echo "PTSD-VM-FIG: $*"; }
# check NAME CMD...: run CMD, PASS if it exits 0.
check() {
    name=$1; shift
    if "$@" > /tmp/check.out 2>&1; then
        result "$name" PASS
    else
        result "$name" FAIL "$(tail -n 4 /tmp/check.out | tr '\n' ' ')"
    fi
}
finish() {
    echo PTSD-VM-DONE
    sync
    poweroff -f
}
trap finish EXIT
# The DAX tests (/lib/dax.sh = tests/vm/dax.sh); a power-cut boot runs
# only its own part there and ends.
. /lib/dax.sh

# The FUSE-over-io_uring boot (tests/vm/uring-host.sh) runs a newer kernel,
# with its own ublk module; it runs only the whole-stack check, over io_uring.
uring_mode=false ublk_ko=/lib/ublk_drv.ko
case " $(cat /proc/cmdline) " in
    *" ptsd.mode=fuse-uring "*) uring_mode=true ublk_ko=/lib/k-uring/ublk_drv.ko ;;
esac
if ! insmod $ublk_ko; then
    result "$($uring_mode && echo stack-fs-uring || echo insmod)" FAIL "cannot load ublk_drv on $(uname -r)"
    exit 0
fi
if ! $uring_mode; then
    result insmod PASS
    check no-devices-yet sh -c 'ptsd ublk list | grep -q "^ *id"'
fi

dev_id() { echo "${1#/dev/ublkb}"; }

wait_state() { # ID STATE: wait up to 10 s for the device to reach STATE
    i=0
    while [ $i -lt 100 ]; do
        ptsd ublk list | awk -v id="$1" '$1==id {print $2}' | grep -qx "$2" && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

mbps() { # MiB START END (uptime seconds)
    awk -v m="$1" -v a="$2" -v b="$3" 'BEGIN { d = b - a; if (d <= 0) d = 0.01; printf "%.1fMiB/s", m / d }'
}

dd_roundtrip() { # DEV MiB
    dd if=/dev/urandom of=/tmp/pattern bs=1M count="$2" 2>/dev/null &&
    t0=$(up) && dd if=/tmp/pattern of="$1" bs=1M oflag=direct 2>/dev/null &&
    t1=$(up) && dd if="$1" of=/tmp/back bs=1M count="$2" iflag=direct 2>/dev/null &&
    t2=$(up) && cmp /tmp/pattern /tmp/back &&
    echo "dd-write $(mbps "$2" "$t0" "$t1") dd-read $(mbps "$2" "$t1" "$t2")" > /tmp/dd.fig
}

ext4_cycle() { # DEV
    mkfs.ext4 -F -q "$1" &&
    mkdir -p /mnt/t && mount -t ext4 "$1" /mnt/t &&
    dd if=/dev/urandom of=/mnt/t/data bs=1M count=4 2>/dev/null &&
    mkdir -p /mnt/t/dir && for i in 1 2 3 4 5 6 7 8; do echo "file $i" > /mnt/t/dir/f$i; done &&
    sum1=$(md5sum /mnt/t/data | cut -d' ' -f1) && sync &&
    umount /mnt/t && mount -t ext4 "$1" /mnt/t &&
    sum2=$(md5sum /mnt/t/data | cut -d' ' -f1) &&
    [ "$sum1" = "$sum2" ] && [ "$(cat /mnt/t/dir/f8)" = "file 8" ] &&
    umount /mnt/t
}

# One device per configuration: dd, ext4, verify, stats, delete.
exercise() { # LABEL full|quick ADD-ARGS...
    label=$1; level=$2; shift 2
    if ! dev=$(ptsd ublk add --daemon "$@" 2>/tmp/add.err); then
        result "$label-add" FAIL "$(tail -n 3 /tmp/add.err | tr '\n' ' ')"
        tail -n 5 /run/ptsd-ublk/daemon.log
        return
    fi
    result "$label-add" PASS "$dev"
    id=$(dev_id "$dev")
    check "$label-dd" dd_roundtrip "$dev" "$([ "$level" = full ] && echo 8 || echo 4)"
    fig "$label $(cat /tmp/dd.fig 2>/dev/null)"
    [ "$level" = full ] && check "$label-ext4" ext4_cycle "$dev"
    check "$label-verify" ptsd ublk verify "$dev" --ops "$([ "$level" = full ] && echo 50 || echo 25)" --seed 7 --span 32M
    fig "$label $(grep -o 'read_p50_us=[0-9.]* read_p99_us=[0-9.]* write_p50_us=[0-9.]*' /tmp/check.out)"
    # The daemon publishes its stats once a second, and on an idle host dd
    # and verify finish sooner: wait for the first report (up to 3 s).
    check "$label-stats" sh -c "i=0; until ptsd ublk stats $id | grep -q '\"read\"'; do [ \$i -ge 30 ] && exit 1; sleep 0.1; i=\$((i+1)); done"
    check "$label-del" sh -c "ptsd ublk del $id && i=0; while [ -e $dev ] && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i+1)); done; [ ! -e $dev ]"
}

# fio is Debian's dynamically linked binary; its libraries sit at their
# host paths (no ld.so.cache in the initramfs).
fio() {
    LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu/ceph \
        /bin/fio --thread "$@"
}

# The whole stack: ptsd-fs (FUSE) on the emulated SSD behind the kernel's
# ublk driver. fsync = journal commit (journal in RAM, /tmp); after a
# kill -9 of the file system's daemon the remount replays the journal; a
# clean unmount checkpoints everything down to the SSD, which fsck and a
# second remount then read back from the device alone.
stack() {
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 128M --no-poll) || return 1
    id=$(dev_id "$dev")
    ptsd mkfs "$dev" || return 1
    mkdir -p /mnt/p
    jargs="--journal /tmp/fs.journal --journal-size 16M"
    ptsd mount --device "$dev" $jargs $stack_opts /mnt/p > /tmp/mount.out 2>&1 || { cat /tmp/mount.out; return 1; }
    if [ -n "$stack_transport" ]; then
        grep -q "$stack_transport" /tmp/mount.out || { echo "not served by $stack_transport:"; cat /tmp/mount.out; return 1; }
    fi
    mkdir -p /mnt/p/d || return 1
    t0=$(up); i=0
    while [ $i -lt 30 ]; do
        dd if=/dev/urandom of=/mnt/p/d/f$i bs=4k count=$((i % 8 + 1)) conv=fsync 2>/dev/null || return 1
        dd if=/dev/urandom of=/mnt/p/log bs=512 count=1 oflag=append conv=notrunc,fsync 2>/dev/null || return 1
        i=$((i + 1))
    done
    t1=$(up)
    (cd /mnt/p && md5sum log d/*) > /tmp/stack.sums || return 1
    echo "fsync-workload 60 fsyncs in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" > /tmp/stack.fig
    # Crash the file system's daemon: only the journal holds the last writes.
    kill -9 "$(cat /run/ptsd/*.pid)" || return 1
    sleep 0.3
    umount /mnt/p 2>/dev/null || umount -l /mnt/p || return 1
    ptsd mount --device "$dev" $jargs $stack_opts /mnt/p || { echo "remount after kill -9 failed"; return 1; }
    (cd /mnt/p && md5sum -c -s /tmp/stack.sums) || { echo "fsync'd data lost after kill -9"; return 1; }
    ptsd umount /mnt/p || return 1
    ptsd fsck "$dev" || { echo "fsck after clean unmount"; return 1; }
    ptsd mount --device "$dev" $jargs $stack_opts /mnt/p || return 1
    (cd /mnt/p && md5sum -c -s /tmp/stack.sums) || { echo "data lost after checkpoint + remount"; return 1; }
    ptsd umount /mnt/p || return 1
    ptsd ublk del "$id"
}

# fio: random read/write with crc32c verification through libaio, QD 8.
fio_verify() { # ADD-ARGS...
    dev=$(ptsd ublk add --daemon "$@") || return 1
    fio --name=verify --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 \
        --rw=randrw --bs=4k --size=4M --verify=crc32c --verify_fatal=1 --randseed=7 \
        --minimal > /tmp/fio.out || { cat /tmp/fio.out; return 1; }
    # Terse fields 5 and 6: error code, read KiB.
    [ "$(cut -d';' -f5 /tmp/fio.out)" = 0 ] || { echo "fio error"; return 1; }
    ptsd ublk del "$(dev_id "$dev")"
}

# kill -9 of a daemon serving the emulated SSD with a file-backed store:
# `recover` reopens the image (OOB recovery) and every flushed write is
# there; a second crash after more flushed writes too; after a clean `del`
# a new device on the same image reads it all back (checkpoint path).
ftl_store_recovery() {
    rm -f /tmp/ssd.img
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --store /tmp/ssd.img --no-poll) || return 1
    id=$(dev_id "$dev")
    dd if=/dev/urandom of=/tmp/fpat bs=1M count=12 2>/dev/null
    crash_recover() {
        pid=$(cat /run/ptsd-ublk/"$id".pid) || return 1
        kill -9 "$pid"
        wait_state "$id" quiesced || { echo "device never quiesced"; ptsd ublk list; return 1; }
        ptsd ublk recover "$id" --daemon || return 1
        wait_state "$id" live || { echo "device not live after recover"; ptsd ublk list; return 1; }
    }
    dd if=/tmp/fpat of="$dev" bs=1M count=8 oflag=direct conv=fsync 2>/dev/null || return 1
    crash_recover || return 1
    dd if="$dev" of=/tmp/fback bs=1M count=8 iflag=direct 2>/dev/null || return 1
    head -c 8388608 /tmp/fpat | cmp - /tmp/fback || { echo "flushed writes lost after the first crash"; return 1; }
    # Overwrite part of it and add more, flush, crash again.
    dd if=/tmp/fpat of="$dev" bs=1M skip=8 seek=4 count=4 oflag=direct conv=fsync 2>/dev/null || return 1
    crash_recover || return 1
    head -c 4194304 /tmp/fpat > /tmp/fexp && tail -c 4194304 /tmp/fpat >> /tmp/fexp
    dd if="$dev" of=/tmp/fback bs=1M count=8 iflag=direct 2>/dev/null || return 1
    cmp /tmp/fexp /tmp/fback || { echo "flushed writes lost after the second crash"; return 1; }
    ptsd ublk del "$id" || return 1
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --store /tmp/ssd.img --no-poll) || return 1
    dd if="$dev" of=/tmp/fback bs=1M count=8 iflag=direct 2>/dev/null || return 1
    cmp /tmp/fexp /tmp/fback || { echo "data lost after clean shutdown and reopen"; return 1; }
    ptsd ublk del "$(dev_id "$dev")"
}

if $uring_mode; then
    # FUSE over io_uring is off by default; ptsd must be served by it here.
    if echo Y > /sys/module/fuse/parameters/enable_uring; then
        stack_opts="-o uring" stack_transport="FUSE over io_uring, "
        check stack-fs-uring stack
        fig "stack-uring $(cat /tmp/stack.fig 2>/dev/null) ($(uname -r))"
    else
        result stack-fs-uring SKIP "kernel $(uname -r) has no FUSE io_uring (no fuse enable_uring parameter)"
    fi
    exit 0
fi
stack_opts="" stack_transport=""
result boot PASS
check stack-fs-on-ublk stack
fig "stack $(cat /tmp/stack.fig 2>/dev/null)"
check fio-verify-ftl-ptsd fio_verify --ftl ptsd --size 64M --no-poll
check fio-verify-mem-2q fio_verify --mem --size 64M --queues 2
check ftl-store-recovery ftl_store_recovery
exercise mem-poll full --mem --size 64M
exercise mem-nopoll quick --mem --size 64M --no-poll --sched fifo
exercise mem-2q-mutex quick --mem --size 64M --queues 2 --lock per-request --no-poll
exercise ftl-ptsd full --ftl ptsd --size 128M --poll
exercise ftl-dftl quick --ftl dftl --size 128M --no-poll
exercise ftl-page quick --ftl page --size 128M --no-poll

# Latency figures: 4 KiB random reads at QD1 of written pages (mapping
# cached) through fio, on the emulated SSD with the NAND timing emulated
# (model: tR 120 us + transfer 10 us = 130 us per read) and off (the VM's
# and the target's own overhead), a ublk RAM disk, and a kernel RAM disk
# (brd: no userspace in the path). One fio start (loading its libraries
# takes seconds under TCG) runs the devices in turn, three rounds (the
# kernel RAM disk one); the
# guest reports each round's median and the smallest median per device
# (the round least disturbed by the busy host), plus the target-side
# median from the daemons' histograms.
latency_figures() {
    dev_e=$(ptsd ublk add --daemon --ftl ptsd --size 64M --timing emulate --poll) || return 1
    dev_o=$(ptsd ublk add --daemon --ftl ptsd --size 64M --timing off --poll) || return 1
    dev_m=$(ptsd ublk add --daemon --mem --size 64M --poll) || return 1
    insmod /lib/brd.ko rd_nr=1 rd_size=8192 || return 1
    set -- --direct=1 --size=4M --minimal \
        --name=fill-emulate --filename="$dev_e" --rw=write --bs=1M \
        --name=fill-off --filename="$dev_o" --rw=write --bs=1M \
        --name=fill-mem --filename="$dev_m" --rw=write --bs=1M
    # The kernel RAM disk's figure is steady: one round is enough.
    set -- "$@" --name=kernel-ramdisk --filename=/dev/ram0 --stonewall \
        --ioengine=psync --rw=randread --bs=4k --runtime=1 --time_based
    for r in 1 2 3; do
        for d in emulate:"$dev_e" off:"$dev_o" mem:"$dev_m"; do
            set -- "$@" --name="${d%%:*}" --filename="${d#*:}" --stonewall \
                --ioengine=psync --rw=randread --bs=4k --runtime=2 --time_based
        done
    done
    fio "$@" > /tmp/lat.out || { cat /tmp/lat.out; return 1; }
    # Terse lines: field 3 the job, the first "50.000000%=N" the read
    # completion latency median (us).
    awk -F';' '$3 !~ /^fill/ {
            for (i = 1; i <= NF; i++) if ($i ~ /^50.000000%=/) { split($i, a, "="); break }
            p = a[2] + 0; rounds[$3] = rounds[$3] " " p
            if (!($3 in best) || p < best[$3]) best[$3] = p
        }
        END { for (j in best) printf "%s %d%s\n", j, best[j], rounds[j] }' /tmp/lat.out > /tmp/lat.best
    sleep 1.2 # the daemons publish their histograms every second
    for d in emulate:"$dev_e" off:"$dev_o" mem:"$dev_m"; do
        t=$(ptsd ublk stats "$(dev_id "${d#*:}")" | grep -A8 '"read"' | grep -o '"p50_ns": [0-9]*' | grep -o '[0-9]*$')
        echo "${d%%:*} $((t / 1000))" >> /tmp/lat.target
    done
    rmmod brd
    for d in "$dev_e" "$dev_o" "$dev_m"; do ptsd ublk del "$(dev_id "$d")" > /dev/null; done
    [ "$(wc -l < /tmp/lat.best)" -eq 4 ]
}
rm -f /tmp/lat.target
check latency latency_figures
if [ -f /tmp/lat.target ]; then
    while read -r name best rounds; do
        t=$(awk -v n="$name" '$1 == n { print $2 }' /tmp/lat.target)
        fig "latency-$name fio_read_p50_us=$best (rounds:$(echo $rounds | tr ' ' ',')) target_read_p50_us=${t:--}"
    done < /tmp/lat.best
    e=$(awk '$1 == "emulate" { print $2 }' /tmp/lat.best); o=$(awk '$1 == "off" { print $2 }' /tmp/lat.best)
    te=$(awk '$1 == "emulate" { print $2 }' /tmp/lat.target); to=$(awk '$1 == "off" { print $2 }' /tmp/lat.target)
    fig "latency-summary 4KiB QD1 read p50: emulate ${e}us, off ${o}us, emulate-minus-off fio=$((e - o))us target=$((te - to))us (model 130us)"
fi

# Recovery: a file-backed device survives `kill -9` of its daemon.
recovery() {
    dd if=/dev/zero of=/tmp/backing.img bs=1M count=64 2>/dev/null || return 1
    dev=$(ptsd ublk add --daemon --backing /tmp/backing.img) || return 1
    id=$(dev_id "$dev")
    dd if=/dev/urandom of=/tmp/rpat bs=1M count=8 2>/dev/null
    dd if=/tmp/rpat of="$dev" bs=1M oflag=direct conv=fsync 2>/dev/null || return 1
    pid=$(cat /run/ptsd-ublk/"$id".pid) || return 1
    kill -9 "$pid"
    wait_state "$id" quiesced || { echo "device never quiesced"; ptsd ublk list; return 1; }
    ptsd ublk recover "$id" --daemon || return 1
    wait_state "$id" live || { echo "device not live after recover"; ptsd ublk list; return 1; }
    dd if="$dev" of=/tmp/rback bs=1M count=8 iflag=direct 2>/dev/null || return 1
    cmp /tmp/rpat /tmp/rback || return 1
    # The recovered daemon serves writes too.
    dd if=/tmp/rpat of="$dev" bs=1M seek=16 oflag=direct conv=fsync 2>/dev/null || return 1
    ptsd ublk del "$id"
}
check recovery recovery

. /nvmet.sh
if [ -z "$(nvmet_missing)" ]; then
    check nvmet-export nvmet_export
else
    result nvmet-export SKIP "the guest kernel lacks the modules $(nvmet_missing)"
fi
[ -f /tmp/nvmet.fig ] && fig "$(cat /tmp/nvmet.fig)"

# Scenarios in files of their own (tests/vm/scenarios/).
for scenario in /lib/vm-scenarios/*.sh; do
    [ -f "$scenario" ] && . "$scenario"
done

check del-all sh -c 'ptsd ublk add --daemon --mem --size 16M >/dev/null && ptsd ublk add --daemon --mem --size 16M >/dev/null && ptsd ublk del --all && sleep 0.5 && ! ls /dev/ublkb* 2>/dev/null'

dax_checks
