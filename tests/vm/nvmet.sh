# Sourced by guest-init.sh: `ptsd ublk export` of a PTSD device over
# NVMe/TCP through the kernel's own target, on the loopback address; the
# kernel's initiator connects (through /dev/nvme-fabrics, what `nvme
# connect` writes), fio verifies data through /dev/nvmeXnY, then disconnect,
# unexport (configfs left empty) and delete.

nvmet_modules="configfs nvmet nvmet-tcp nvme-fabrics nvme-tcp"

nvmet_missing() { # prints the modules the guest kernel does not ship
    for m in $nvmet_modules; do [ -f "/lib/$m.ko" ] || printf '%s ' "$m"; done
}

nvmet_export() {
    for m in $nvmet_modules; do
        grep -q "^$(echo "$m" | tr - _) " /proc/modules || insmod "/lib/$m.ko" || { echo "insmod $m failed"; return 1; }
    done
    grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config || return 1
    ip link set lo up || return 1
    dev=$(ptsd ublk add --daemon --ftl ptsd --size 128M --no-poll) || return 1
    id=$(dev_id "$dev")
    nqn=nqn.2014-08.org.ptsd:ublkb$id
    ptsd ublk export "$id" --nvmet-tcp 127.0.0.1:4420 || return 1
    # Exporting twice is refused.
    if ptsd ublk export "$id" --nvmet-tcp 127.0.0.1:4420 2>/tmp/nv.err; then
        echo "second export accepted"; return 1
    fi
    grep -q "already exported" /tmp/nv.err || { cat /tmp/nv.err; return 1; }
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$nqn" > /dev/nvme-fabrics || { echo "connect failed"; return 1; }
    ctrl=""
    i=0
    while [ -z "$ctrl" ] && [ $i -lt 50 ]; do
        for c in /sys/class/nvme/nvme*; do
            [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] && ctrl=$(basename "$c")
        done
        [ -n "$ctrl" ] || { sleep 0.1; i=$((i + 1)); }
    done
    [ -n "$ctrl" ] || { echo "no controller for $nqn"; return 1; }
    ns=""
    i=0
    while [ -z "$ns" ] && [ $i -lt 50 ]; do
        ns=$(ls -d /sys/class/nvme/"$ctrl"/nvme*n1 /sys/class/nvme/"$ctrl"/nvme*c*n1 2>/dev/null | head -1)
        [ -n "$ns" ] || { sleep 0.1; i=$((i + 1)); }
    done
    [ -n "$ns" ] || { echo "controller $ctrl has no namespace"; return 1; }
    nsname=$(basename "$ns")
    # With native multipath the block device is /dev/nvmeXnY, not the path node.
    blk=/dev/$(echo "$nsname" | sed 's/c[0-9]*n/n/')
    [ -b "$blk" ] || blk=/dev/$nsname
    [ -b "$blk" ] || { echo "no block device for $nsname"; ls /dev/nvme*; return 1; }
    size=$(cat "/sys/class/block/$(basename "$blk")/size")
    [ "$size" = $((128 * 2048)) ] || { echo "$blk has $size sectors, expected $((128 * 2048))"; return 1; }
    t0=$(up)
    fio --name=nvmet --filename="$blk" --direct=1 --ioengine=libaio --iodepth=8 \
        --rw=randrw --bs=4k --size=4M --verify=crc32c --verify_fatal=1 --randseed=11 \
        --minimal > /tmp/nvfio.out || { cat /tmp/nvfio.out; return 1; }
    [ "$(cut -d';' -f5 /tmp/nvfio.out)" = 0 ] || { echo "fio error"; return 1; }
    # What fio wrote over NVMe/TCP is on the ublk device itself.
    dd if="$blk" of=/tmp/nv.a bs=1M count=4 iflag=direct 2>/dev/null || return 1
    dd if="$dev" of=/tmp/nv.b bs=1M count=4 iflag=direct 2>/dev/null || return 1
    cmp /tmp/nv.a /tmp/nv.b || { echo "NVMe/TCP view and ublk device differ"; return 1; }
    t1=$(up)
    echo "nvmet-tcp fio randrw 4M verify + compare in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" > /tmp/nvmet.fig
    echo 1 > "/sys/class/nvme/$ctrl/delete_controller" || return 1
    ptsd ublk unexport "$id" || return 1
    [ -z "$(ls /sys/kernel/config/nvmet/subsystems)" ] || { echo "subsystem left behind"; return 1; }
    [ -z "$(ls /sys/kernel/config/nvmet/ports)" ] || { echo "port left behind"; return 1; }
    if ptsd ublk unexport "$id" 2>/tmp/nv.err; then echo "second unexport accepted"; return 1; fi
    ptsd ublk del "$id"
}
