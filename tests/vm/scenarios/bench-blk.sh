# Sourced by guest-init.sh (it provides check, fig, fio, dev_id).
# `ptsd bench blk` beside fio on the same ublk devices, with the same
# engine (io_uring), request size, queue depth, O_DIRECT and run time,
# interleaved rounds (fio, ptsd, fio, ptsd): the two load generators should
# report the same device. A RAM-backed device (the target adds little) and
# the emulated SSD with its NAND timing (the device dominates).
#
# The check asserts that both ran and reported; the ratio is a figure, not
# an assertion (this is a TCG guest on a busy host: wall-time noise is
# large). Target: ptsd within 10 % of fio.

BB=/tmp/bb
mkdir -p $BB && : > $BB/figs

bb_fio() { # DEV RW QD: prints "IOPS P50_US"
    fio --name=bb --filename="$1" --direct=1 --ioengine=io_uring --rw="$2" --bs=4k \
        --iodepth="$3" --size=32M --runtime=2 --time_based --randseed=3 --minimal > $BB/fio.out ||
        { cat $BB/fio.out >&2; return 1; }
    # Terse v3: field 8 read IOPS, 49 write IOPS; the first "50.000000%=" of
    # a direction's fields is its completion-latency median.
    awk -F';' -v rw="$2" '{
        if (rw ~ /read/) { iops = $8; from = 9; to = 48 } else { iops = $49; from = 50; to = 89 }
        for (i = from; i <= to; i++) if ($i ~ /^50.000000%=/) { split($i, a, "="); p = a[2]; break }
        printf "%d %d\n", iops, p
    }' $BB/fio.out
}

bb_ptsd() { # DEV RW QD: prints "IOPS P50_US"
    ptsd bench blk "$1" --direct --rw "$2" --bs 4k --qd "$3" --size 32M --seconds 2 --seed 3 \
        --json > $BB/ptsd.json 2> $BB/ptsd.err || { cat $BB/ptsd.err >&2; return 1; }
    op=read; case $2 in *write) op=write ;; esac
    # The pretty JSON: the op's object, then its "iops" and "lat_p50_us".
    awk -v op="\"$op\":" '
        index($0, op) { inop = 1 }
        inop && /"iops":/ { gsub(/[^0-9.]/, "", $2); iops = $2 }
        inop && /"lat_p50_us":/ { gsub(/[^0-9.]/, "", $2); p = $2; inop = 0 }
        END { printf "%d %d\n", iops, p }' $BB/ptsd.json
}

bench_blk_vs_fio() {
    dev_m=$(ptsd ublk add --daemon --mem --size 64M --poll) || return 1
    dev_s=$(ptsd ublk add --daemon --ftl ptsd --size 128M --timing emulate --poll) || return 1
    # Write the span once so reads hit mapped pages on the emulated SSD.
    for d in "$dev_m" "$dev_s"; do
        dd if=/dev/urandom of="$d" bs=1M count=32 oflag=direct 2>/dev/null || return 1
    done
    for c in mem:"$dev_m":randread:1 mem:"$dev_m":randread:16 ssd:"$dev_s":randread:16 ssd:"$dev_s":randwrite:16; do
        IFS=: read -r name dev rw qd <<EOF
$c
EOF
        f1=$(bb_fio "$dev" "$rw" "$qd") || return 1
        p1=$(bb_ptsd "$dev" "$rw" "$qd") || return 1
        f2=$(bb_fio "$dev" "$rw" "$qd") || return 1
        p2=$(bb_ptsd "$dev" "$rw" "$qd") || return 1
        # Best round of each (the least disturbed by the busy host).
        fb=$(printf '%s\n%s\n' "$f1" "$f2" | sort -n | tail -1)
        pb=$(printf '%s\n%s\n' "$p1" "$p2" | sort -n | tail -1)
        fi=${fb% *}; pi=${pb% *}
        [ "$fi" -gt 0 ] && [ "$pi" -gt 0 ] || { echo "$name $rw qd$qd: no IOPS (fio $fb, ptsd $pb)"; return 1; }
        echo "bench-blk $name-$rw-qd$qd fio_iops=$fi ptsd_iops=$pi ratio=$(awk -v a="$pi" -v b="$fi" 'BEGIN{printf "%.2f", a/b}') fio_p50_us=${fb#* } ptsd_p50_us=${pb#* } (rounds fio:${f1% *},${f2% *} ptsd:${p1% *},${p2% *}; target 0.90-1.10)" >> $BB/figs
    done
    for d in "$dev_m" "$dev_s"; do ptsd ublk del "$(dev_id "$d")" > /dev/null; done
}

check bench-blk-vs-fio bench_blk_vs_fio
while read -r line; do fig "$line"; done < $BB/figs
