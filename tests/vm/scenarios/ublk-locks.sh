# Sourced by guest-init.sh (it provides check, dev_id). Issue 44 §2: `ptsd
# ublk add` opens its image through ptsd-stack, under the exclusive image
# lock `ptsd mount`, mkfs and fsck take. An image a mount holds is refused
# to ublk (as a backing file and as an SSD image: either would serve, or
# format, the live file system), and an image a ublk daemon serves is
# refused to mount, mkfs, fsck --repair and a second ublk, each naming the
# holder: "in use by PID N (ptsd mount)" / "(ptsd ublk)".
ublk_locks() {
    img=/tmp/locks.img
    jargs="--journal /tmp/locks.journal --journal-size 16M"
    rm -f $img /tmp/locks.journal
    ptsd mkfs $img --size 64MiB > /dev/null || return 1
    mkdir -p /mnt/locks
    ptsd mount --device $img $jargs /mnt/locks > /tmp/locks.out 2>&1 || { cat /tmp/locks.out; return 1; }
    echo kept > /mnt/locks/a || return 1
    for how in "--backing $img" "--store $img"; do
        if ptsd ublk add --daemon --no-poll $how > /tmp/locks.out 2>&1; then
            echo "ublk add $how of a mounted image was not refused"
            ptsd ublk del --all; return 1
        fi
        grep -q "in use by PID [0-9]* (ptsd mount)" /tmp/locks.out || { echo "ublk add $how:"; cat /tmp/locks.out; return 1; }
    done
    ptsd umount /mnt/locks || return 1

    dev=$(ptsd ublk add --daemon --no-poll --backing $img) || return 1
    id=$(dev_id "$dev")
    pid=$(cat /run/ptsd-ublk/"$id".pid)
    for cmd in "mount --device $img $jargs /mnt/locks" "mkfs $img" "fsck $img --journal /tmp/locks.journal --repair" \
               "ublk add --daemon --no-poll --backing $img"; do
        if ptsd $cmd > /tmp/locks.out 2>&1; then
            echo "ptsd $cmd of an image ublk serves was not refused"
            grep -q " /mnt/locks " /proc/mounts && ptsd umount /mnt/locks
            ptsd ublk del --all; return 1
        fi
        grep -q "in use by PID $pid (ptsd ublk)" /tmp/locks.out || { echo "ptsd $cmd:"; cat /tmp/locks.out; ptsd ublk del --all; return 1; }
    done
    ptsd ublk del "$id" || return 1
    # The daemon lets go once the device is gone: the file system is intact.
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    ptsd mount --device $img $jargs /mnt/locks > /tmp/locks.out 2>&1 || { cat /tmp/locks.out; return 1; }
    [ "$(cat /mnt/locks/a)" = kept ] || { echo "the file system lost /a"; ptsd umount /mnt/locks; return 1; }
    ptsd umount /mnt/locks || return 1
    rm -f $img /tmp/locks.journal
}
check ublk-locks ublk_locks
