# Sourced by guest-init.sh (it provides check, fig, result, up, dev_id,
# wait_state). kill -9 of the daemon of a PTSD device with a file store
# while ext4 on it is busy with write+fsync, then `ptsd ublk recover`,
# several times; and the cases `recover` and `add` must refuse.
#
# What must hold: every file whose fsync returned reads back intact, every
# raw write acknowledged before the kill and followed by a successful FLUSH
# reads back; no writer sees an error across a recovery (in-flight
# requests are reissued to the new daemon; acknowledged writes are
# replayed from the write log); ext4 never aborts its journal; after each
# real unmount no mount of the device survives anywhere (the daemon holds
# none) and e2fsck -fn is clean; `del` is clean and a new device on the
# same image reads everything back.

RK=/tmp/rk
mkdir -p $RK && : > $RK/figs
RK_CYCLES=3
# ext4 takes the first 48 MiB of the 64 MiB device; the raw checks write
# 4 KiB blocks from 56 MiB on.
RK_RAW=14336

rk_writer() { # N: write+fsync files until $RK/stop exists
    n=$1; i=0
    mkdir -p /mnt/rk/w"$n" || { echo "mkdir failed" >> $RK/w"$n".err; return; }
    while [ ! -e $RK/stop ]; do
        f=/mnt/rk/w$n/c${RK_CYCLE}f$i
        dd if=/dev/urandom of=$RK/w"$n".src bs=4k count=$((i % 4 + 1)) 2>/dev/null
        # dd conv=fsync exits non-zero if the write or the fsync fails.
        if dd if=$RK/w"$n".src of="$f" bs=4k conv=fsync 2> $RK/w"$n".dderr; then
            echo "$(md5sum < $RK/w"$n".src | cut -d' ' -f1)  $f" >> $RK/w"$n".ok
        else
            echo "$f: $(tr '\n' ' ' < $RK/w"$n".dderr)" >> $RK/w"$n".err
        fi
        i=$((i + 1))
    done
}

rk_daemon_pid() { cat /run/ptsd-ublk/"$1".pid; }

rk_stop_writers() {
    touch $RK/stop
    wait
    rm -f $RK/stop
}

rk_cleanup() { # after a failure: leave nothing behind for the next checks
    rk_stop_writers
    umount /mnt/rk 2>/dev/null
    [ -n "$RK_ID" ] && ptsd ublk del "$RK_ID" >/dev/null 2>&1
    RK_ID=
}

# Raw block $2 of device $1 gets fresh random data (O_DIRECT, no fsync);
# the expected content is kept in $RK/raw$2.
rk_raw_write() {
    dd if=/dev/urandom of=$RK/raw"$2" bs=4k count=1 2>/dev/null &&
        dd if=$RK/raw"$2" of="$1" bs=4k seek=$((RK_RAW + $2)) count=1 oflag=direct 2>/dev/null
}

rk_raw_check() { # DEV BLOCK WHAT
    dd if="$1" of=$RK/rawback bs=4k skip=$((RK_RAW + $2)) count=1 iflag=direct 2>/dev/null &&
        cmp -s $RK/raw"$2" $RK/rawback || { echo "raw block $2: $3"; return 1; }
}

rk_fsck() { # DEV: after a real unmount, nothing may still hold the file system
    if grep -l " $1 " /proc/[0-9]*/mountinfo > $RK/holders 2>/dev/null; then
        echo "a mount of $1 survives the umount in: $(tr '\n' ' ' < $RK/holders)"
        return 1
    fi
    e2fsck -fn "$1" > $RK/fsck.out 2>&1 || { echo "e2fsck -fn: $(tail -n 5 $RK/fsck.out | tr '\n' ' ')"; return 1; }
    if grep -q "in use" $RK/fsck.out; then
        echo "e2fsck: $(grep "in use" $RK/fsck.out)"
        return 1
    fi
}

rk_files_intact() { # WHAT
    cat $RK/w*.ok > $RK/all.ok 2>/dev/null
    [ -s $RK/all.ok ] || { echo "no file was written ($1)"; return 1; }
    md5sum -c -s $RK/all.ok || {
        echo "fsync'd files lost or damaged ($1): $(md5sum -c $RK/all.ok 2>&1 | grep -v ': OK' | head -n 3 | tr '\n' ' ')"
        return 1
    }
}

# kill -9 the daemon of device ID, recover it; the times go to the figures
# as "LABEL: kill->quiesced ..., quiesced->live ...".
rk_kill_recover() { # ID LABEL
    pid=$(rk_daemon_pid "$1") || { echo "no pid file"; return 1; }
    t0=$(up)
    kill -9 "$pid"
    wait_state "$1" quiesced || { echo "device never quiesced"; ptsd ublk list; return 1; }
    t1=$(up)
    logged=$(wc -l < /run/ptsd-ublk/daemon.log)
    # (info level: the daemon reports how many logged writes it replayed)
    RUST_LOG=ptsd_ublk=info ptsd ublk recover "$1" --daemon > /dev/null || { echo "recover failed"; return 1; }
    t2=$(up)
    wait_state "$1" live || { echo "device not live after recover"; ptsd ublk list; return 1; }
    t3=$(up)
    # (the log line is coloured: drop the escape sequences first)
    replayed=$(tail -n +$((logged + 1)) /run/ptsd-ublk/daemon.log | grep "replayed acknowledged writes" |
        tr -d '\033' | sed 's/\[[0-9;]*m//g' | grep -o 'records=[0-9]*' | head -n 1 | cut -d= -f2)
    echo "kill-recover $2: kill->quiesced $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') s, recover command $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.2f", b-a}') s, quiesced->live $(awk -v a="$t1" -v b="$t3" 'BEGIN{printf "%.2f", b-a}') s, ${replayed:-0} logged writes replayed" >> $RK/figs
    new=$(rk_daemon_pid "$1")
    [ "$(readlink /proc/"$new"/ns/mnt)" = "$(readlink /proc/1/ns/mnt)" ] ||
        { echo "the recovered daemon has a mount namespace of its own"; return 1; }
}

rk_cycle() { # DEV ID CYCLE
    dev=$1; id=$2; RK_CYCLE=$3
    mount -t ext4 "$dev" /mnt/rk || { echo "mount failed (cycle $3)"; return 1; }
    dmesg -c > /dev/null
    # Raw writes, with ext4 mounted but idle (so that no fsync flushes
    # them by the way): one flushed, one only acknowledged, then the kill.
    rk_raw_write "$dev" $((2 * $3)) &&
        dd if=/dev/null of="$dev" conv=fsync,notrunc 2>/dev/null || { echo "raw write + flush failed"; return 1; }
    rk_raw_write "$dev" $((2 * $3 + 1)) || { echo "raw write failed"; return 1; }
    rk_raw_check "$dev" $((2 * $3 + 1)) "does not read back before the kill" || return 1
    rk_kill_recover "$id" "cycle $3 raw" || return 1
    # The acknowledged-only raw write: a FLUSH now succeeds, so it must be
    # there.
    dd if=/dev/null of="$dev" conv=fsync,notrunc 2>/dev/null || { echo "FLUSH after recovery failed"; return 1; }
    rk_raw_check "$dev" $((2 * $3 + 1)) "acknowledged before the kill, lost although the next FLUSH succeeded" || return 1
    rk_raw_check "$dev" $((2 * $3)) "flushed before the kill, lost" || return 1
    # Now the writers, and a kill while they write and fsync.
    for n in 1 2 3; do rk_writer $n & done
    sleep 3
    rk_kill_recover "$id" "cycle $3 ext4 busy" || return 1
    sleep 2 # the writers go on on the new daemon
    rk_stop_writers
    if cat $RK/w*.err 2>/dev/null | grep -q .; then
        echo "a writer saw an error across the recovery: $(cat $RK/w*.err | head -n 3 | tr '\n' ' ')"
        return 1
    fi
    if dmesg | grep -E "EXT4-fs (error|warning)|I/O error|read-only|Buffer I/O" > $RK/dmesg.bad; then
        echo "kernel: $(head -n 3 $RK/dmesg.bad | tr '\n' ' ')"
        return 1
    fi
    rk_files_intact "cycle $3, mounted" || return 1
    umount /mnt/rk || { echo "umount failed"; return 1; }
    rk_fsck "$dev" || return 1
}

ublk_kill_recover() {
    rm -rf /tmp/rk.img /tmp/rk.img.acklog $RK/w* && mkdir -p $RK /mnt/rk && : > $RK/figs
    RK_ID=
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --store /tmp/rk.img --no-poll) || return 1
    id=$(dev_id "$dev"); RK_ID=$id
    mkfs.ext4 -F -q "$dev" 48M || { rk_cleanup; return 1; }
    c=1
    while [ $c -le $RK_CYCLES ]; do
        rk_cycle "$dev" "$id" $c || { rk_cleanup; return 1; }
        c=$((c + 1))
    done
    echo "kill-recover $(cat $RK/w*.ok | wc -l) fsync'd files over $RK_CYCLES kill -9 + recover cycles" >> $RK/figs
    ptsd ublk del "$id" || { echo "del failed"; return 1; }
    i=0; while [ -e "$dev" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    [ ! -e "$dev" ] || { echo "$dev still there after del"; return 1; }
    RK_ID=
    # A clean shutdown, then a new device on the same image: all there.
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 64M --store /tmp/rk.img --no-poll) || return 1
    id=$(dev_id "$dev"); RK_ID=$id
    mount -t ext4 "$dev" /mnt/rk || { rk_cleanup; echo "mount after re-add failed"; return 1; }
    rk_files_intact "after del + add" || { rk_cleanup; return 1; }
    umount /mnt/rk && rk_fsck "$dev" || { rk_cleanup; return 1; }
    c=1
    while [ $c -le $RK_CYCLES ]; do
        rk_raw_check "$dev" $((2 * c)) "lost after del + add" || { rk_cleanup; return 1; }
        rk_raw_check "$dev" $((2 * c + 1)) "lost after del + add" || { rk_cleanup; return 1; }
        c=$((c + 1))
    done
    ptsd ublk del "$id" > /dev/null
}

# expect_refusal WHAT MESSAGE CMD...: CMD fails within 5 s and says MESSAGE.
expect_refusal() {
    what=$1; msg=$2; shift 2
    t0=$(up)
    if "$@" > $RK/refuse.out 2>&1; then
        echo "$what: succeeded"; return 1
    fi
    t1=$(up)
    grep -q "$msg" $RK/refuse.out || { echo "$what: said: $(tr '\n' ' ' < $RK/refuse.out)"; return 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 5) }' || { echo "$what: took $t0 -> $t1 s"; return 1; }
    echo "$what: refused: $(head -n 1 $RK/refuse.out)"
}

ublk_refusals() {
    mkdir -p $RK
    # 4: RAM-backed devices have nothing to recover.
    for kind in "--mem" "--store mem"; do
        # shellcheck disable=SC2086 # $kind is two words on purpose
        dev=$(ptsd ublk add --daemon --size 16M $kind) || return 1
        id=$(dev_id "$dev")
        kill -9 "$(rk_daemon_pid "$id")"
        sleep 1
        expect_refusal "recover of $kind" "nothing to recover" ptsd ublk recover "$id" || return 1
        ptsd ublk del "$id" > /dev/null || { echo "del of the dead $kind device failed"; return 1; }
    done
    # 5: a live device is refused at once; its daemon keeps its pid file
    # and serves on.
    rm -f /tmp/rk2.img /tmp/rk2.img.acklog
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 16M --store /tmp/rk2.img) || return 1
    id=$(dev_id "$dev")
    expect_refusal "recover of a live device" "is live" ptsd ublk recover "$id" || return 1
    expect_refusal "recover --daemon of a live device" "is live" ptsd ublk recover "$id" --daemon || return 1
    [ -f /run/ptsd-ublk/"$id".pid ] || { echo "the live daemon's pid file is gone"; return 1; }
    dd if="$dev" of=/dev/null bs=4k count=16 iflag=direct 2>/dev/null || { echo "the live device stopped serving"; return 1; }
    ptsd ublk del "$id" > /dev/null || return 1
    # 6: bad input.
    expect_refusal "del 99" "no such ublk device 99" ptsd ublk del 99 || return 1
    expect_refusal "recover 99" "no such ublk device 99" ptsd ublk recover 99 || return 1
    expect_refusal "--queues 0" "queues 0 is out of range: allowed 1..=" ptsd ublk add --mem --size 16M --queues 0 || return 1
    expect_refusal "--queues 1000" "queues 1000 is out of range: allowed 1..=" ptsd ublk add --mem --size 16M --queues 1000 || return 1
    expect_refusal "--depth 0" "depth 0 is out of range: allowed 1..=4096" ptsd ublk add --mem --size 16M --depth 0 || return 1
    ! ls /dev/ublkb* > /dev/null 2>&1 || { echo "devices left: $(ls /dev/ublkb*)"; return 1; }
}

check ublk-kill-recover-ext4 ublk_kill_recover
# (check keeps a check's output: the figures come out here.)
while read -r line; do fig "$line"; done < $RK/figs
check ublk-refusals ublk_refusals
