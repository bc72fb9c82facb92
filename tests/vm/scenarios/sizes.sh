# Sourced by guest-init.sh (it provides check, dev_id). One size syntax:
# `--size 4GiB` means 4·2^30 bytes to `ptsd ublk add` (the kernel's view of
# the device) and to `ptsd mkfs` (the image file), and `4GB` 4·10^9 (an
# image is whole 4 KiB blocks: 976 562 of them, 3 999 997 952 bytes).
size_syntax() {
    dev=$(ptsd ublk add --daemon --mem --size 4GiB --no-poll) || return 1
    got=$(( $(cat /sys/block/"${dev#/dev/}"/size) * 512 ))
    ptsd ublk del "$(dev_id "$dev")" > /dev/null
    [ "$got" = 4294967296 ] || { echo "ublk add --size 4GiB gave $got bytes"; return 1; }
    rm -f /tmp/size.img
    ptsd mkfs /tmp/size.img --size 4GiB > /dev/null || return 1
    got=$(stat -c %s /tmp/size.img); rm -f /tmp/size.img
    [ "$got" = 4294967296 ] || { echo "mkfs --size 4GiB gave $got bytes"; return 1; }
    ptsd mkfs /tmp/size.img --size 4GB > /dev/null || return 1
    got=$(stat -c %s /tmp/size.img); rm -f /tmp/size.img
    [ "$got" = 3999997952 ] || { echo "mkfs --size 4GB gave $got bytes"; return 1; }
}
check size-syntax size_syntax
