# Sourced by guest-init.sh (it provides check, dev_id). Issue 46: TPFTL, a
# mapping scheme written outside ptsd-ftl (examples/tpftl), served as
# /dev/ublkbN by its own binary `tpftl-ublk` (run.sh ships it): fio with
# verify on it, then ext4 made, mounted, written, remounted and read back.
# With a file-backed store it takes ptsd-stack's image lock as `ptsd ublk`
# does: an image `ptsd mount` holds is refused, naming the holder.

# tpftl-ublk ARGS...: start it in the background; sets dev (the device it
# printed) and tpftl_pid.
tpftl_start() {
    rm -f /tmp/tpftl.dev
    tpftl-ublk --no-poll "$@" > /tmp/tpftl.dev 2> /tmp/tpftl.err &
    tpftl_pid=$!
    i=0
    while [ ! -s /tmp/tpftl.dev ] && kill -0 $tpftl_pid 2>/dev/null && [ $i -lt 300 ]; do
        sleep 0.1; i=$((i+1))
    done
    dev=$(head -n 1 /tmp/tpftl.dev)
    [ -b "$dev" ] || { echo "tpftl-ublk gave no device"; cat /tmp/tpftl.err; kill $tpftl_pid 2>/dev/null; return 1; }
}

# Delete the device; the daemon then exits.
tpftl_stop() {
    ptsd ublk del "$(dev_id "$1")" || return 1
    wait $tpftl_pid
}

tpftl_ublk_fio() {
    command -v tpftl-ublk > /dev/null || { echo "no tpftl-ublk in the guest"; return 1; }
    tpftl_start --size 64MiB --store mem || return 1
    fio --name=verify --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 \
        --rw=randrw --bs=4k --size=4M --verify=crc32c --verify_fatal=1 --randseed=7 \
        --minimal > /tmp/fio.out || { cat /tmp/fio.out; tpftl_stop "$dev"; return 1; }
    # Terse field 5: the error code.
    [ "$(cut -d';' -f5 /tmp/fio.out)" = 0 ] || { echo "fio error"; tpftl_stop "$dev"; return 1; }
    mkfs.ext4 -q -F "$dev" || { tpftl_stop "$dev"; return 1; }
    mkdir -p /mnt/tpftl
    mount -t ext4 "$dev" /mnt/tpftl || { tpftl_stop "$dev"; return 1; }
    dd if=/dev/urandom of=/tmp/tpftl.pat bs=64k count=32 2>/dev/null
    cp /tmp/tpftl.pat /mnt/tpftl/f && umount /mnt/tpftl || { tpftl_stop "$dev"; return 1; }
    mount -t ext4 "$dev" /mnt/tpftl || { tpftl_stop "$dev"; return 1; }
    cmp /tmp/tpftl.pat /mnt/tpftl/f || { echo "ext4 on TPFTL lost the file"; umount /mnt/tpftl; tpftl_stop "$dev"; return 1; }
    umount /mnt/tpftl
    tpftl_stop "$dev"
}

tpftl_ublk_lock() {
    img=/tmp/tpftl-lock.img
    jargs="--journal /tmp/tpftl-lock.journal --journal-size 16M"
    rm -f $img /tmp/tpftl-lock.journal
    ptsd mkfs $img --size 64MiB > /dev/null || return 1
    mkdir -p /mnt/tpftl-lock
    ptsd mount --device $img $jargs /mnt/tpftl-lock > /tmp/tpftl.out 2>&1 || { cat /tmp/tpftl.out; return 1; }
    if tpftl-ublk --no-poll --size 64MiB --store $img > /tmp/tpftl.out 2>&1; then
        echo "tpftl-ublk of a mounted image was not refused"; ptsd ublk del --all; ptsd umount /mnt/tpftl-lock; return 1
    fi
    ptsd umount /mnt/tpftl-lock || return 1
    grep -q "in use by PID [0-9]* (ptsd mount)" /tmp/tpftl.out || { cat /tmp/tpftl.out; return 1; }
    rm -f $img /tmp/tpftl-lock.journal
}

check tpftl-ublk-fio tpftl_ublk_fio
check tpftl-ublk-lock tpftl_ublk_lock
