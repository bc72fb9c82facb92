#!/usr/bin/env bash
# The README on a fresh machine: a clean Debian trixie chroot (debootstrap)
# with only Debian's rustc and cargo installed, the repository (HEAD, as
# committed) copied in, then exactly the README's two commands, each with its
# wall time. Exit status 0 if both succeed.
#
#   sudo tests/fresh/run.sh            # both commands
#   sudo tests/fresh/run.sh --main     # only the main-job command
#
# Needs root, debootstrap and network access (Debian mirror, crates.io). The
# debootstrapped base is cached as a tarball in $PTSD_FRESH_DIR
# (default /var/tmp/ptsd-fresh); every run unpacks it into a new root, with
# an empty cargo home, so nothing of a previous run (or of this host's
# toolchain) is reused. Trixie, because its rustc/cargo (1.85) meet the
# workspace's rust-version.
#
# Not in CI: the two commands build ptsd from scratch several times over
# (release, debug, loom, the VM's build) - over an hour on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
dir=${PTSD_FRESH_DIR:-/var/tmp/ptsd-fresh}
suite=${PTSD_FRESH_SUITE:-trixie}
mirror=${PTSD_FRESH_MIRROR:-http://deb.debian.org/debian}
only_main=false
[ "${1:-}" = "--main" ] && only_main=true

[ "$(id -u)" -eq 0 ] || { echo "fresh test: needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap >/dev/null || { echo "fresh test: needs debootstrap (apt install debootstrap)"; exit 1; }
mkdir -p "$dir"
base=$dir/$suite-base.tar
if [ ! -f "$base" ]; then
    echo "== fresh: debootstrap $suite with rustc and cargo (once; cached as $base)"
    rm -rf "$dir/base.tmp"
    debootstrap --variant=minbase --include=ca-certificates "$suite" "$dir/base.tmp" "$mirror"
    # apt, not debootstrap --include: rustc depends on the virtual libc-dev,
    # which debootstrap does not resolve.
    mount -t proc proc "$dir/base.tmp/proc"
    chroot "$dir/base.tmp" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc cargo && apt-get clean' \
        || { umount "$dir/base.tmp/proc"; exit 1; }
    umount "$dir/base.tmp/proc"
    tar -C "$dir/base.tmp" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$dir/base.tmp"
fi

root=$dir/root.$$
mounts=()
cleanup() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
    [ "${PTSD_FRESH_KEEP:-0}" = 1 ] || rm -rf "$root"
}
trap cleanup EXIT
mkdir -p "$root"
tar -C "$root" -xf "$base"
# The root a mount of its own, as a real machine's is: findmnt, df -T and
# umount -a (the mount-type test) go through /proc/self/mountinfo, which
# does not resolve the chroot's mounts when its root is a plain directory.
mount --bind "$root" "$root"
mounts+=("$root")
# The kernel interfaces the tests use: /proc, /sys, devices (FUSE, KVM-less
# QEMU needs none), shared memory for the journal.
for m in proc sys dev dev/pts dev/shm; do
    mkdir -p "$root/$m"
    case $m in
        proc) mount -t proc proc "$root/proc" ;;
        sys) mount -t sysfs sys "$root/sys" ;;
        dev/shm) mount -t tmpfs -o mode=1777 shm "$root/dev/shm" ;;
        *) mount --bind "/$m" "$root/$m" ;;
    esac
    mounts+=("$root/$m")
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This host's network, not a setup step: certificate authorities the host
# added locally (e.g. of a TLS-inspecting egress proxy) are trusted inside
# too, or cargo cannot reach crates.io from here.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
mkdir -p "$root/root/ptsd"
git -C "$repo" archive --format=tar HEAD | tar -C "$root/root/ptsd" -x
echo "== fresh: $(git -C "$repo" log -1 --format='%h %s' | cut -c1-100)"
chroot "$root" sh -c 'echo "== fresh: $(. /etc/os-release; echo $PRETTY_NAME), $(rustc --version), $(cargo --version)"'

# Extract the README's two commands (the first two ```sh blocks of
# "Two commands"), so this test runs what the README says, not a copy.
cmds=$(awk '/^## Two commands/{on=1} on && /^```sh/{grab=1; next} grab && /^```/{grab=0; n++; if (n==2) exit; next} grab{print}' README.md)
[ "$(printf '%s\n' "$cmds" | grep -c .)" -eq 2 ] || { echo "fresh test: expected two commands in README's 'Two commands', got:"; printf '%s\n' "$cmds"; exit 1; }

status=0
n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    if $only_main && [ "$n" -gt 1 ]; then break; fi
    echo "== fresh: command $n: $cmd"
    t0=$(date +%s)
    # A login-like environment: HOME=/root, an empty cargo home, no rustup.
    set +e
    chroot "$root" env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        bash -c "cd /root/ptsd && $cmd" < /dev/null 2>&1 | sed -u "s/^/[cmd $n] /"
    rc=${PIPESTATUS[0]}
    set -e
    t=$(( $(date +%s) - t0 ))
    echo "== fresh: command $n: exit $rc, wall time $((t / 60)) min $((t % 60)) s: $cmd"
    [ "$rc" -eq 0 ] || status=1
done <<< "$cmds"
[ "$status" -eq 0 ] && echo "== fresh: PASS" || echo "== fresh: FAIL"
exit "$status"
