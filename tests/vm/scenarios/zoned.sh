# Sourced by guest-init.sh (it provides check, fig, result, up, dev_id,
# wait_state, fio). The zoned /dev/ublkbN of `ptsd ublk add --zoned`:
# - zoned-layout: the kernel sees a host-managed device with the zone
#   size, capacity and limits asked for; blkzone report shows every zone;
#   writes move the write pointer, a write off it fails; open, close,
#   finish and reset move the zone through its states;
# - zoned-fio: fio --zonemode=zbd writes zones sequentially and verifies
#   every block (crc32c); its bandwidth is a figure;
# - zoned-btrfs: btrfs in zoned mode (the guest kernel has no f2fs) is
#   made, filled and emptied three times (block groups freed and their
#   zones reset: the device's zone reset and zone append counts are
#   checked), unmounted, remounted, its files checked and `btrfs check`
#   clean;
# - zoned-recover: kill -9 of the daemon of a zoned device with an image
#   file; `ptsd ublk recover` keeps every write pointer and zone state
#   (blkzone report before and after), and the data.

ZN=/tmp/zn
mkdir -p $ZN

# blkzone report lines, as "start wptr cap cond" (hex as printed: the
# write pointer relative to the zone start).
zn_report() {
    blkzone report "$1" | sed -n 's/.*start: \(0x[0-9a-f]*\), len \(0x[0-9a-f]*\), cap \(0x[0-9a-f]*\), wptr \(0x[0-9a-f]*\).*zcond:\([ 0-9]*\).*/\1 \4 \3 \5/p'
}

zn_line() { # DEV ZONE: the report line of zone ZONE (0-based)
    zn_report "$1" | sed -n "$(($2 + 1))p"
}

zn_sysfs() { cat /sys/block/"${1#/dev/}"/queue/"$2"; }

zoned_layout() {
    dev=$(ptsd ublk add --daemon --zoned --size 256MiB --zone-size 8MiB --zone-capacity 6MiB \
        --max-open 8 --max-active 12 --store mem --no-poll) || return 1
    id=$(dev_id "$dev")
    [ "$(zn_sysfs "$dev" zoned)" = host-managed ] || { echo "zoned: $(zn_sysfs "$dev" zoned)"; return 1; }
    [ "$(zn_sysfs "$dev" chunk_sectors)" = 16384 ] || { echo "chunk_sectors $(zn_sysfs "$dev" chunk_sectors)"; return 1; }
    [ "$(zn_sysfs "$dev" nr_zones)" = 32 ] || { echo "nr_zones $(zn_sysfs "$dev" nr_zones)"; return 1; }
    [ "$(zn_sysfs "$dev" max_open_zones)" = 8 ] || { echo "max_open_zones $(zn_sysfs "$dev" max_open_zones)"; return 1; }
    [ "$(zn_sysfs "$dev" max_active_zones)" = 12 ] || { echo "max_active_zones $(zn_sysfs "$dev" max_active_zones)"; return 1; }
    [ "$(zn_report "$dev" | wc -l)" = 32 ] || { echo "blkzone report:"; blkzone report "$dev" | head -5; return 1; }
    # Zone 1: 8 MiB in, 6 MiB capacity (0x3000 sectors), empty (cond 1).
    set -- $(zn_line "$dev" 1)
    [ "$1 $2 $3 $4" = "0x000004000 0x000000 0x003000 1" ] || { echo "zone 1: $*"; blkzone report "$dev" | head -3; return 1; }
    # 1 MiB at its write pointer; then a write off it must fail.
    dd if=/dev/urandom of=$ZN/z1 bs=1M count=1 2>/dev/null
    dd if=$ZN/z1 of="$dev" bs=1M seek=8 oflag=direct 2>/dev/null || { echo "write at the write pointer failed"; return 1; }
    set -- $(zn_line "$dev" 1)
    [ "$2 $4" = "0x000800 2" ] || { echo "after 1 MiB, zone 1: $* (want wptr 0x800, implicitly open)"; return 1; }
    if dd if=$ZN/z1 of="$dev" bs=1M seek=11 oflag=direct 2>/dev/null; then
        echo "a write off the write pointer succeeded"; return 1
    fi
    # After a failed write the kernel trusts the zone's write pointer again
    # only once a zone report (or reset, or finish) gave it: as with any
    # zoned drive, the user reports first.
    set -- $(zn_line "$dev" 1)
    [ "$2 $4" = "0x000800 2" ] || { echo "after the failed write, zone 1: $*"; return 1; }
    dd if="$dev" of=$ZN/z1back bs=1M skip=8 count=1 iflag=direct 2>/dev/null && cmp $ZN/z1 $ZN/z1back || return 1
    # Past the capacity: 6 MiB fill the zone (full, cond 14), no more.
    dd if=/dev/zero of="$dev" bs=1M seek=9 count=5 oflag=direct 2> $ZN/dd.err || {
        echo "filling zone 1 failed: $(tail -n 1 $ZN/dd.err); zone 1: $(zn_line "$dev" 1); kernel: $(dmesg | tail -n 3 | tr '\n' ' ')"
        echo "stats: $(ptsd ublk stats "$id" | tr -d ' \n' | sed 's/"p[0-9]*_ns":[0-9]*,//g; s/"m[a-z]*_ns":[0-9]*,*//g')"
        return 1
    }
    set -- $(zn_line "$dev" 1)
    [ "$4" = 14 ] || { echo "zone 1 not full: $*"; return 1; }
    # Management: open (3), close (4: written) or empty again (1), finish (14), reset (1).
    blkzone open -o 32768 -c 1 "$dev" || return 1
    set -- $(zn_line "$dev" 2); [ "$4" = 3 ] || { echo "after open, zone 2: $*"; return 1; }
    dd if=/dev/zero of="$dev" bs=4k seek=4096 count=1 oflag=direct 2>/dev/null || return 1
    blkzone close -o 32768 -c 1 "$dev" || return 1
    set -- $(zn_line "$dev" 2); [ "$4" = 4 ] || { echo "after close, zone 2: $*"; return 1; }
    blkzone finish -o 32768 -c 1 "$dev" || return 1
    set -- $(zn_line "$dev" 2); [ "$4" = 14 ] || { echo "after finish, zone 2: $*"; return 1; }
    blkzone reset "$dev" || return 1
    [ "$(zn_report "$dev" | awk '$4 != 1 || $2 != "0x000000"' | wc -l)" = 0 ] || { echo "after reset:"; blkzone report "$dev" | head; return 1; }
    ptsd ublk del "$id"
}
check zoned-layout zoned_layout

zoned_fio() {
    dev=$(ptsd ublk add --daemon --zoned --size 256MiB --store mem --timing emulate) || return 1
    id=$(dev_id "$dev")
    # 8 zones written sequentially (64 KiB requests), then read back and
    # checked.
    fio --name=zbd --filename="$dev" --direct=1 --ioengine=psync \
        --zonemode=zbd --rw=write --bs=64k --size=64M --verify=crc32c --verify_fatal=1 \
        --minimal > $ZN/fio.out || { cat $ZN/fio.out; return 1; }
    # Terse fields: 5 error, 7 read (verify) KiB/s, 48 write KiB/s.
    [ "$(cut -d';' -f5 $ZN/fio.out)" = 0 ] || { echo "fio error"; cat $ZN/fio.out; return 1; }
    echo "zoned fio zbd (--timing emulate, 64 KiB psync, 64 MiB): write $(cut -d';' -f48 $ZN/fio.out) KiB/s, verify read $(cut -d';' -f7 $ZN/fio.out) KiB/s" > $ZN/fio.fig
    set -- $(zn_line "$dev" 7)
    [ "$4" = 14 ] || { echo "zone 7 after fio: $*"; return 1; }
    ptsd ublk del "$id"
}
check zoned-fio zoned_fio
[ -f $ZN/fio.fig ] && fig "$(cat $ZN/fio.fig)"

zn_fill() { # DIR MiB: files of random data, their sums in $ZN/sums
    mkdir -p "$1" && i=0
    while [ $i -lt "$2" ]; do
        dd if=/dev/urandom of="$1/f$i" bs=1M count=1 2>/dev/null || return 1
        i=$((i + 1))
    done
    (cd "$1" && md5sum f*) > $ZN/sums
}

zn_stat() { # ID OP: count of OP in the device's stats (written each second)
    sleep 1.5
    ptsd ublk stats "$1" | awk -v op="\"$2\"" '$1 == op":" {f=1} f && /"count"/ {gsub(/[^0-9]/, "", $2); print $2; exit}'
}

zoned_btrfs() {
    for m in xor raid6_pq libcrc32c btrfs; do
        grep -q "^$m " /proc/modules || insmod /lib/$m.ko || { echo "insmod $m failed"; return 1; }
    done
    rm -f /tmp/zbtrfs.img
    dev=$(ptsd ublk add --daemon --zoned --size 256MiB --store /tmp/zbtrfs.img --no-poll) || return 1
    id=$(dev_id "$dev")
    mkfs.btrfs -f -q -O zoned -d single -m single "$dev" > $ZN/mkfs.out 2>&1 || { cat $ZN/mkfs.out; return 1; }
    mkdir -p /mnt/zb
    mount -t btrfs "$dev" /mnt/zb || { dmesg | tail -5; return 1; }
    resets0=$(zn_stat "$id" zone_reset)
    # Three rounds of 48 MiB written and deleted on the 256 MiB device:
    # the emptied block groups are removed and their zones reset.
    r=0
    while [ $r -lt 3 ]; do
        zn_fill /mnt/zb/r$r 48 || { echo "round $r: write failed"; df /mnt/zb; return 1; }
        sync && rm -rf /mnt/zb/r$r && sync
        btrfs balance start -dusage=0 /mnt/zb > /dev/null 2>&1
        r=$((r + 1))
    done
    zn_fill /mnt/zb/keep 24 || return 1
    umount /mnt/zb || return 1
    resets=$(( $(zn_stat "$id" zone_reset) - ${resets0:-0} ))
    appends=$(zn_stat "$id" zone_append)
    [ "$resets" -ge 3 ] || { echo "only $resets zone resets in three fill/delete rounds"; return 1; }
    [ "${appends:-0}" -gt 0 ] || { echo "btrfs sent no zone append"; return 1; }
    echo "btrfs zoned: $resets zone resets, $appends zone appends over 3 x 48 MiB filled and deleted" > $ZN/btrfs.fig
    btrfs check --readonly "$dev" > $ZN/check.out 2>&1 || { tail -5 $ZN/check.out; return 1; }
    mount -t btrfs "$dev" /mnt/zb || return 1
    (cd /mnt/zb/keep && md5sum -c -s $ZN/sums) || { echo "files differ after the remount"; return 1; }
    umount /mnt/zb || return 1
    ptsd ublk del "$id" && rm -f /tmp/zbtrfs.img
}
check zoned-btrfs zoned_btrfs
[ -f $ZN/btrfs.fig ] && fig "$(cat $ZN/btrfs.fig)"

zoned_recover() {
    rm -f /tmp/zrec.img
    dev=$(ptsd ublk add --daemon --zoned --size 256MiB --store /tmp/zrec.img --no-poll) || return 1
    id=$(dev_id "$dev")
    dd if=/dev/urandom of=$ZN/rpat bs=1M count=3 2>/dev/null
    # 3 MiB into zone 2, 1 MiB into zone 5 (flushed: conv=fsync), zone 6
    # finished: write pointers and states to keep.
    dd if=$ZN/rpat of="$dev" bs=1M seek=16 oflag=direct conv=fsync 2>/dev/null || return 1
    dd if=$ZN/rpat of="$dev" bs=1M seek=40 count=1 oflag=direct conv=fsync 2>/dev/null || return 1
    blkzone finish -o $((6 * 16384)) -c 1 "$dev" || return 1
    zn_report "$dev" > $ZN/before
    kill -9 "$(cat /run/ptsd-ublk/"$id".pid)" || return 1
    wait_state "$id" quiesced || { echo "device never quiesced"; ptsd ublk list; return 1; }
    ptsd ublk recover "$id" --daemon || return 1
    wait_state "$id" live || { echo "device not live after recover"; ptsd ublk list; return 1; }
    zn_report "$dev" > $ZN/after
    # A power cycle closes open zones (cond 2/3 -> 4); nothing else moves.
    sed 's/ [23]$/ 4/' $ZN/before > $ZN/want
    cmp -s $ZN/want $ZN/after || { echo "zones changed:"; diff $ZN/want $ZN/after | head; return 1; }
    grep -q '^0x000008000 0x001800 ' $ZN/after || { echo "zone 2 lost its write pointer"; sed -n 3p $ZN/after; return 1; }
    dd if="$dev" of=$ZN/rback bs=1M skip=16 count=3 iflag=direct 2>/dev/null && cmp $ZN/rpat $ZN/rback || return 1
    # Writes go on at the kept write pointer.
    dd if=$ZN/rpat of="$dev" bs=1M seek=19 count=1 oflag=direct conv=fsync 2>/dev/null || { echo "write at the kept pointer failed"; return 1; }
    ptsd ublk del "$id" && rm -f /tmp/zrec.img
}
check zoned-recover zoned_recover
