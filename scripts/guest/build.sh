#!/usr/bin/env bash
# scripts/guest/build.sh [--fio] [--force]
#
# Builds the Linux test guest that crates/test-guest boots under QEMU: Debian's
# stock kernel (linux-image-amd64, booted as an uncompressed ELF through QEMU's
# PVH entry) and a busybox initramfs with nvme-cli and the NVMe/TCP host
# (nvme-tcp) and target (nvmet, nvmet-tcp) modules. With --fio, also a second
# initramfs with fio (and its ~80 MB of shared libraries) appended.
#
# Idempotent and safe to run concurrently: a lock file serialises callers and
# a stamp (kernel version + hash of the scripts under scripts/guest/) skips
# work already done. Downloaded .debs are cached.
#
# Output, in $FERROBAY_GUEST_DIR (default <repo>/target/guest):
#   out/vmlinux                 kernel, ELF with a PVH note
#   out/initramfs.cpio          base root filesystem (/init = guest/init)
#   out/initramfs-fio.cpio      (--fio) base + fio and its libraries
#   out/kernel-version          e.g. 6.1.0-56-amd64
#   out/stamp, out/stamp-fio    what the artefacts were built from
# Host tools come from scripts/install-deps.sh (qemu-system-x86, busybox-static,
# cpio, kmod, file). Packages are fetched with 'apt-get download' (no install);
# when apt's package lists are empty this runs 'apt-get update', as root.
# Env: KVER=6.1.0-xx-amd64 picks a specific linux-image-<KVER> package.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${FERROBAY_GUEST_DIR:-$REPO/target/guest}
WITH_FIO=0 FORCE=0
for a in "$@"; do
    case $a in
        --fio) WITH_FIO=1 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build.sh: unknown argument '$a' (see --help)" >&2; exit 2 ;;
    esac
done
log() { echo "build.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# 0. host tools ----------------------------------------------------------------
missing=()
for t in cpio depmod modprobe file xz sha256sum flock dpkg apt-get; do
    command -v "$t" >/dev/null || missing+=("$t")
done
BUSYBOX=/bin/busybox
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || missing+=("busybox-static")
[ ${#missing[@]} -eq 0 ] || die "missing host tools: ${missing[*]}; run scripts/install-deps.sh (as root)"

mkdir -p "$DIR/out" "$DIR/cache/debs"
exec 9>"$DIR/.build.lock"
flock -w 1800 9 || die "timed out waiting for the lock $DIR/.build.lock"
OUT=$DIR/out CACHE=$DIR/cache

# 1. which kernel -----------------------------------------------------------------
kver_from_apt() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-//p' | head -n1; }
if [ -z "${KVER:-}" ]; then
    KVER=$(kver_from_apt)
    if [ -z "$KVER" ]; then
        log "apt has no package lists: apt-get update"
        apt-get update -qq || die "apt-get update failed (needs root and a reachable Debian mirror)"
        KVER=$(kver_from_apt)
    fi
    [ -n "$KVER" ] || die "cannot resolve linux-image-amd64 to a kernel version"
fi
SCRIPTS_HASH=$(cd "$HERE" && find . -type f ! -name '*.md' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
STAMP="kver=$KVER scripts=$SCRIPTS_HASH"

fetch_debs() {   # fetch_debs PKG... : download into the cache unless present
    local p
    for p in "$@"; do
        ls "$CACHE/debs/${p}_"*.deb >/dev/null 2>&1 && continue
        ( cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "$p" >/dev/null ) ||
            die "apt-get download $p failed"
    done
}
extract_debs() { # extract_debs DEST PKG... : dpkg -x each package once
    local dest=$1 p d; shift
    mkdir -p "$dest"
    for p in "$@"; do
        for d in "$CACHE/debs/${p}_"*.deb; do
            [ -f "$dest/.${d##*/}.done" ] || { dpkg -x "$d" "$dest"; touch "$dest/.${d##*/}.done"; }
        done
    done
}
# copy_with_libs ROOT LIBPATH BIN... : install BINs into ROOT/usr/sbin with their
# shared-library closure (LIBPATH first, then the host's libraries), skipping
# libraries ROOT already has.
copy_with_libs() {
    local root=$1 libpath=$2 b lib dst; shift 2
    mkdir -p "$root/usr/sbin" "$root/lib/x86_64-linux-gnu" "$root/lib64"
    for b in "$@"; do
        install -m 0755 "$b" "$root/usr/sbin/"
        if LD_LIBRARY_PATH=$libpath ldd "$b" | grep -q 'not found'; then
            LD_LIBRARY_PATH=$libpath ldd "$b" >&2; die "unresolved shared libraries for $b"
        fi
        LD_LIBRARY_PATH=$libpath ldd "$b" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
            case $lib in /lib64/*) dst=$root/lib64 ;; *) dst=$root/lib/x86_64-linux-gnu ;; esac
            [ -e "$dst/${lib##*/}" ] || [ -e "${SKIP_ROOT:-/nonexistent}/${dst#"$root"}/${lib##*/}" ] ||
                cp -L "$lib" "$dst/"
        done
    done
}
pack_cpio() {    # pack_cpio DIR DEST : uncompressed newc archive (gunzip is slow under TCG)
    ( cd "$1" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet --reproducible ) > "$2.tmp"
    # Pad so that another archive can be appended (the kernel wants 4-byte alignment).
    truncate -s %512 "$2.tmp"
    mv -f "$2.tmp" "$2"
}

# 2. base image -------------------------------------------------------------------
base_ok() {
    [ "$FORCE" = 0 ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$STAMP" ] &&
        [ -s "$OUT/vmlinux" ] && [ -s "$OUT/initramfs.cpio" ]
}
if base_ok; then
    log "base image up to date ($STAMP)"
else
    t0=$SECONDS
    log "building base image: $STAMP"
    NVME_PKGS=(nvme-cli libnvme1 libjson-c5 libdbus-1-3 libssl3 zlib1g libuuid1 libsystemd0
               libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1)
    fetch_debs "linux-image-$KVER" "${NVME_PKGS[@]}"
    X=$CACHE/x
    extract_debs "$X" "linux-image-$KVER" "${NVME_PKGS[@]}"
    MODSRC=$X/lib/modules/$KVER
    # Debian 13's kernels ship their modules under /usr/lib (merged /usr).
    if [ ! -e "$MODSRC" ] && [ -d "$X/usr/lib/modules/$KVER" ]; then
        mkdir -p "$X/lib/modules"; ln -s "../../usr/lib/modules/$KVER" "$MODSRC"
    fi
    [ -f "$MODSRC/modules.dep" ] || depmod -b "$X" "$KVER"

    ROOT=$CACHE/root
    rm -rf "$ROOT"
    mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc/nvme,proc,sys,dev,tmp,run,root,lib/ferrobay,lib/x86_64-linux-gnu,lib64}
    cp "$BUSYBOX" "$ROOT/bin/busybox"
    for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -s busybox "$ROOT/bin/$a"; done
    # The kernel's request_module() runs /sbin/modprobe.
    ln -s ../bin/busybox "$ROOT/sbin/modprobe"
    install -m 0755 "$HERE/guest/init" "$ROOT/init"
    install -m 0644 "$HERE/guest/harness.sh" "$ROOT/lib/ferrobay/harness.sh"

    # Modules: BOOT_MODS are loaded by /init (insmod, in dependency order as the
    # host's kmod resolves them); EXTRA_MODS are shipped for 'modprobe' in jobs
    # (brd and null_blk take size parameters). depmod on the subset makes
    # busybox modprobe work in the guest.
    BOOT_MODS="virtio_pci virtio_net qemu_fw_cfg configfs crc32c_generic crc32c-intel nvme-tcp nvmet nvmet-tcp"
    EXTRA_MODS="brd null_blk loop virtio_blk"
    MODDST=$ROOT/lib/modules/$KVER
    mkdir -p "$MODDST"
    closure() { for m in "$@"; do modprobe -d "$X" -S "$KVER" --show-depends "$m"; done |
                awk '$1=="insmod"{print $2}' | awk '!seen[$0]++'; }
    # shellcheck disable=SC2086
    closure $BOOT_MODS $EXTRA_MODS | while read -r ko; do
        rel=${ko#"$MODSRC"/}
        mkdir -p "$MODDST/$(dirname "$rel")"
        cp "$ko" "$MODDST/$rel"
    done
    # busybox insmod loads plain .ko files: decompress xz-compressed modules (Debian 13).
    find "$MODDST" -name '*.ko.xz' -exec xz -d {} +
    # shellcheck disable=SC2086
    closure $BOOT_MODS | sed "s|^$MODSRC/||; s|\.ko\.xz$|.ko|" > "$ROOT/lib/modules/boot.list"
    cp "$MODSRC/modules.order" "$MODSRC/modules.builtin" "$MODSRC/modules.builtin.modinfo" "$MODDST/" 2>/dev/null || true
    depmod -b "$ROOT" "$KVER"

    LIBPATH=$X/lib/x86_64-linux-gnu:$X/usr/lib/x86_64-linux-gnu
    copy_with_libs "$ROOT" "$LIBPATH" "$X/usr/sbin/nvme"
    printf 'root:x:0:0:root:/root:/bin/sh\n' > "$ROOT/etc/passwd"
    printf 'root:x:0:\n' > "$ROOT/etc/group"
    echo "$STAMP" > "$ROOT/etc/ferrobay-guest"

    # Uncompressed ELF kernel, booted through QEMU's PVH entry point: under TCG
    # this saves ~10 s of in-guest xz decompression per boot. (The same method
    # as the kernel's scripts/extract-vmlinux.)
    VMLINUZ=$X/boot/vmlinuz-$KVER
    # Debian 12 compresses the kernel with xz, Debian 13 with zstd.
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -n1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then
        tail -c +$((off + 1)) "$VMLINUZ" | xz -dc --single-stream > "$OUT/vmlinux.tmp" 2>/dev/null || true
    else
        off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$VMLINUZ" | head -n1 | cut -d: -f1 || true)
        [ -n "$off" ] || die "no xz or zstd stream in $VMLINUZ"
        command -v zstd >/dev/null || die "zstd is needed to unpack $VMLINUZ"
        tail -c +$((off + 1)) "$VMLINUZ" | zstd -dc > "$OUT/vmlinux.tmp" 2>/dev/null || true
    fi
    [ "$(head -c 4 "$OUT/vmlinux.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] ||
        die "could not extract an ELF vmlinux from $VMLINUZ"
    mv -f "$OUT/vmlinux.tmp" "$OUT/vmlinux"
    pack_cpio "$ROOT" "$OUT/initramfs.cpio"
    echo "$KVER" > "$OUT/kernel-version"
    echo "$STAMP" > "$OUT/stamp"
    log "base image built in $((SECONDS - t0)) s: kernel $KVER, $(wc -l < "$ROOT/lib/modules/boot.list") boot modules, initramfs $(du -h "$OUT/initramfs.cpio" | cut -f1)"
fi

# 3. fio flavour ---------------------------------------------------------------------
# fio is taken from Debian with its shared libraries (librbd, librados, glusterfs,
# ...: ~80 MB in guest RAM, ~2-3 s more per boot under TCG), so it lives in its
# own initramfs that only jobs asking for it boot.
if [ "$WITH_FIO" = 1 ]; then
    if [ "$FORCE" = 0 ] && [ "$(cat "$OUT/stamp-fio" 2>/dev/null)" = "$STAMP" ] && [ -s "$OUT/initramfs-fio.cpio" ]; then
        log "fio image up to date"
    else
        t0=$SECONDS
        # fio's library packages that the host lacks (the rest comes from the host,
        # which is the same Debian release); perl/python modules are not needed.
        want=(fio)
        for p in $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                     --no-breaks --no-replaces --no-enhances fio | grep '^lib' | sort -u); do
            case $p in *-perl|libpython*) continue ;; esac
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || want+=("$p")
        done
        fetch_debs "${want[@]}"
        XF=$CACHE/x-fio
        extract_debs "$XF" "${want[@]}"
        FROOT=$CACHE/root-fio
        rm -rf "$FROOT"; mkdir -p "$FROOT"
        LIBPATH=$XF/lib/x86_64-linux-gnu:$XF/usr/lib/x86_64-linux-gnu:$XF/usr/lib/x86_64-linux-gnu/ceph
        SKIP_ROOT=$CACHE/root copy_with_libs "$FROOT" "$LIBPATH" "$XF/usr/bin/fio"
        pack_cpio "$FROOT" "$OUT/fio.cpio.part"
        cat "$OUT/initramfs.cpio" "$OUT/fio.cpio.part" > "$OUT/initramfs-fio.cpio.tmp"
        mv -f "$OUT/initramfs-fio.cpio.tmp" "$OUT/initramfs-fio.cpio"
        rm -f "$OUT/fio.cpio.part"
        echo "$STAMP" > "$OUT/stamp-fio"
        log "fio image built in $((SECONDS - t0)) s: $(du -h "$OUT/initramfs-fio.cpio" | cut -f1)"
    fi
fi
