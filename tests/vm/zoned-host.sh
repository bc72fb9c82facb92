# Host side of the zoned checks (tests/vm/scenarios/zoned.sh), sourced by
# run.sh: the modules btrfs needs (Debian's 6.12 cloud kernel has btrfs as
# a module and no f2fs), blkzone (the host's util-linux), and mkfs.btrfs
# and btrfs from Debian's btrfs-progs, downloaded with the libraries the
# host lacks and cached under target/vm-cache/ as fio is.

# In load order: btrfs needs the other three.
zoned_modules="xor raid6_pq libcrc32c btrfs"

# Copy $1 into the initramfs $rd with every library ldd finds for it
# (LD_LIBRARY_PATH=$2), at the path the guest's loader looks in.
zoned_copy_bin() {
    local bin=$1 libpath=$2 root=$3 lib dest
    mkdir -p "$rd/sbin" && cp -L "$bin" "$rd/sbin/"
    for lib in $(LD_LIBRARY_PATH=$libpath ldd "$bin" | grep -o '/[^ ]*'); do
        case "$lib" in
            "$root"/*) dest=${lib#"$root"} ;;
            *) dest=$lib ;;
        esac
        mkdir -p "$rd$(dirname "$dest")"
        [ -e "$rd$dest" ] || cp -L "$lib" "$rd$dest"
    done
}

zoned_host_build() {
    local bdir=$cache/btrfs-progs m missing bin
    if [ ! -x "$bdir/root/bin/btrfs" ]; then
        log "downloading btrfs-progs and the libraries the host lacks"
        rm -rf "$bdir" && mkdir -p "$bdir/debs"
        missing=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                --no-breaks --no-replaces --no-enhances --no-pre-depends btrfs-progs 2>/dev/null \
            | grep -E '^(lib|zlib)' | sort -u | while read -r p; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
        (cd "$bdir/debs" && apt-get download -q btrfs-progs $missing >/dev/null 2>&1 || apt-get download btrfs-progs $missing)
        for deb in "$bdir"/debs/*.deb; do dpkg-deb -x "$deb" "$bdir/root"; done
        rm -rf "$bdir/debs"
    fi
    local libpath=$bdir/root/lib/x86_64-linux-gnu:$bdir/root/usr/lib/x86_64-linux-gnu
    for bin in "$bdir/root/bin/btrfs" "$bdir/root/sbin/mkfs.btrfs" "$(command -v blkzone || echo /usr/sbin/blkzone)"; do
        [ -x "$bin" ] || { echo "vm test: missing $bin"; exit 1; }
        zoned_copy_bin "$bin" "$libpath" "$bdir/root"
    done
    for m in $zoned_modules; do
        [ -f "$kdir/$m.ko" ] && cp "$kdir/$m.ko" "$rd/lib/"
    done
}
