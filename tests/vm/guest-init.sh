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

if ! insmod /lib/ublk_drv.ko; then
    result insmod FAIL "cannot load ublk_drv"
    exit 0
fi
result insmod PASS
check no-devices-yet sh -c 'ptsd ublk list | grep -q "^ *id"'

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
    check "$label-dd" dd_roundtrip "$dev" 8
    fig "$label $(cat /tmp/dd.fig 2>/dev/null)"
    [ "$level" = full ] && check "$label-ext4" ext4_cycle "$dev"
    check "$label-verify" ptsd ublk verify "$dev" --ops "$([ "$level" = full ] && echo 150 || echo 60)" --seed 7 --span 32M
    fig "$label $(grep -o 'read_p50_us=[0-9.]* read_p99_us=[0-9.]* write_p50_us=[0-9.]*' /tmp/check.out)"
    sleep 1.2 # the daemon publishes stats every second
    check "$label-stats" sh -c "ptsd ublk stats $id | grep -q '\"read\"'"
    check "$label-del" sh -c "ptsd ublk del $id && i=0; while [ -e $dev ] && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i+1)); done; [ ! -e $dev ]"
}

result boot PASS
exercise mem-poll full --mem --size 64M
exercise mem-nopoll quick --mem --size 64M --no-poll --sched fifo
exercise mem-2q-mutex quick --mem --size 64M --queues 2 --lock per-request --no-poll
exercise ftl-ptsd full --ftl ptsd --size 128M --no-poll
exercise ftl-dftl quick --ftl dftl --size 128M --no-poll
exercise ftl-page quick --ftl page --size 128M --no-poll

# Latency figures: guest-visible (verify tool, QD1) and target-side
# (the daemon's histograms) 4 KiB read medians, with the NAND model's
# timing emulated and off.
timing_fig() { # LABEL ADD-ARGS...
    label=$1; shift
    dev=$(ptsd ublk add --daemon "$@") || { result "$label" FAIL "add"; return; }
    id=$(dev_id "$dev")
    check "$label" ptsd ublk verify "$dev" --ops 80 --seed 3 --span 4M --write-pct 30
    guest=$(grep -o 'read_p50_us=[0-9.]*' /tmp/check.out)
    sleep 1.2
    target=$(ptsd ublk stats "$id" | grep -A8 '"read"' | grep -o '"p50_ns": [0-9]*' | grep -o '[0-9]*$')
    fig "$label guest_$guest target_read_p50_us=$((target / 1000))"
    ptsd ublk del "$id" >/dev/null
}
timing_fig timing-emulate-ptsd --ftl ptsd --size 128M --timing emulate --no-poll
timing_fig timing-off-ptsd --ftl ptsd --size 128M --timing off --no-poll

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

check del-all sh -c 'ptsd ublk add --daemon --size 16M >/dev/null && ptsd ublk add --daemon --size 16M >/dev/null && ptsd ublk del --all && sleep 0.5 && ! ls /dev/ublkb* 2>/dev/null'
