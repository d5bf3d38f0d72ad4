#!/usr/bin/env bash
# scripts/guest/build.sh [--fio] [--trixie] [--force]
#
# Builds the Linux test guest that crates/test-guest boots under QEMU: Debian's
# stock kernel (linux-image-amd64, booted as an uncompressed ELF through QEMU's
# PVH entry) and a busybox initramfs with nvme-cli and the NVMe/TCP host
# (nvme-tcp) and target (nvmet, nvmet-tcp) modules. With --fio, also a second
# initramfs with fio (and its ~80 MB of shared libraries) appended.
#
# With --trixie, instead (only) the Debian 13 flavour: kernel 6.12 with
# DH-HMAC-CHAP (nvme-auth) and NVMe/TCP TLS (nvme-keyring, tls), nvme-cli 2.13
# with libnvme, tlshd (ktls-utils) and keyctl (keyutils), every binary with
# trixie's own libraries and loader. Its packages come from the trixie suite
# of the mirror the machine's apt already uses (FERROBAY_TRIXIE_MIRROR=URI
# overrides), through a private apt configuration under the cache: the
# machine's own apt sources and state are never changed.
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
#   out/trixie/{vmlinux,initramfs.cpio,kernel-version,stamp}   (--trixie)
# Host tools come from scripts/install-deps.sh (qemu-system-x86, busybox-static,
# cpio, kmod, file). Packages are fetched with 'apt-get download' (no install);
# when apt's package lists are empty this runs 'apt-get update', as root.
# Env: KVER=6.1.0-xx-amd64 picks a specific linux-image-<KVER> package;
# TRIXIE_KVER=6.12.x+deb13-amd64 likewise for --trixie.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${FERROBAY_GUEST_DIR:-$REPO/target/guest}
WITH_FIO=0 WITH_TRIXIE=0 FORCE=0
for a in "$@"; do
    case $a in
        --fio) WITH_FIO=1 ;;
        --trixie) WITH_TRIXIE=1 ;;
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

# 1. helpers ----------------------------------------------------------------------
SCRIPTS_HASH=$(cd "$HERE" && find . -type f ! -name '*.md' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)

# Package tools: APT names the apt front end (apt_host: the machine's own apt
# configuration; apt_trixie: the private one of the trixie flavour) and DEBS
# the directory downloaded packages are cached in.
apt_host() { "$@"; }
APT=apt_host DEBS=$CACHE/debs
fetch_debs() {   # fetch_debs PKG... : download into $DEBS unless present
    local p
    for p in "$@"; do
        ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 && continue
        ( cd "$DEBS" && $APT apt-get -q -o APT::Sandbox::User=root download "$p" >/dev/null ) ||
            die "apt-get download $p failed"
    done
}
extract_debs() { # extract_debs DEST PKG... : dpkg -x each package once
    local dest=$1 p d; shift
    mkdir -p "$dest"
    for p in "$@"; do
        for d in "$DEBS/${p}_"*.deb; do
            [ -f "$dest/.${d##*/}.done" ] || { dpkg -x "$d" "$dest"; touch "$dest/.${d##*/}.done"; }
        done
    done
}
# copy_with_libs ROOT LIBPATH BIN... : install BINs into ROOT/usr/sbin with their
# shared-library closure (LIBPATH first, then the host's libraries), skipping
# libraries ROOT already has. With LOADER set (a dynamic loader unpacked from
# the guest's own packages), the closure is resolved by that loader and every
# library must come from under LOADER_ROOT: nothing of the host's leaks in.
list_libs() {    # list_libs LIBPATH BIN : ldd-style output
    if [ -n "${LOADER:-}" ]; then "$LOADER" --library-path "$1" --list "$2"
    else LD_LIBRARY_PATH=$1 ldd "$2"; fi
}
copy_with_libs() {
    local root=$1 libpath=$2 b lib dst libs; shift 2
    mkdir -p "$root/usr/sbin" "$root/lib/x86_64-linux-gnu" "$root/lib64"
    for b in "$@"; do
        install -m 0755 "$b" "$root/usr/sbin/"
        libs=$(list_libs "$libpath" "$b") || { echo "$libs" >&2; die "cannot list the shared libraries of $b"; }
        if echo "$libs" | grep -q 'not found'; then
            echo "$libs" >&2; die "unresolved shared libraries for $b"
        fi
        echo "$libs" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
            if [ -n "${LOADER:-}" ]; then
                case $lib in "$LOADER_ROOT"/*) ;; /lib64/ld-linux-x86-64.so.2) lib=$LOADER ;;
                    *) die "$b: $lib resolved from the host, not from the guest's packages" ;; esac
            fi
            case $lib in */ld-linux-x86-64.so.*) dst=$root/lib64 ;; *) dst=$root/lib/x86_64-linux-gnu ;; esac
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
# extract_vmlinux VMLINUZ DEST : the uncompressed ELF kernel, booted through
# QEMU's PVH entry point: under TCG this saves ~10 s of in-guest decompression
# per boot. (The same method as the kernel's scripts/extract-vmlinux.)
extract_vmlinux() {
    local vmlinuz=$1 dest=$2 off
    # Debian 12 compresses the kernel with xz, Debian 13 with zstd.
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then
        tail -c +$((off + 1)) "$vmlinuz" | xz -dc --single-stream > "$dest.tmp" 2>/dev/null || true
    else
        off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$vmlinuz" | head -n1 | cut -d: -f1 || true)
        [ -n "$off" ] || die "no xz or zstd stream in $vmlinuz"
        command -v zstd >/dev/null || die "zstd is needed to unpack $vmlinuz; run scripts/install-deps.sh (as root)"
        tail -c +$((off + 1)) "$vmlinuz" | zstd -dc > "$dest.tmp" 2>/dev/null || true
    fi
    [ "$(head -c 4 "$dest.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] ||
        die "could not extract an ELF vmlinux from $vmlinuz"
    mv -f "$dest.tmp" "$dest"
}
# make_root X KVER ROOT : the busybox root every flavour shares (init, harness,
# /etc files) and the kernel modules: BOOT_MODS are loaded by /init (insmod, in
# dependency order as the host's kmod resolves them); EXTRA_MODS are shipped for
# 'modprobe' in jobs (brd and null_blk take size parameters). depmod on the
# subset makes busybox modprobe work in the guest.
make_root() {
    local x=$1 kver=$2 root=$3 modsrc moddst
    modsrc=$x/lib/modules/$kver
    # Debian 13's kernels ship their modules under /usr/lib (merged /usr).
    if [ ! -e "$modsrc" ] && [ -d "$x/usr/lib/modules/$kver" ]; then
        mkdir -p "$x/lib/modules"; ln -s "../../usr/lib/modules/$kver" "$modsrc"
    fi
    [ -f "$modsrc/modules.dep" ] || depmod -b "$x" "$kver"
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/nvme,proc,sys,dev,tmp,run,root,lib/ferrobay,lib/x86_64-linux-gnu,lib64}
    cp "$BUSYBOX" "$root/bin/busybox"
    for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
    # The kernel's request_module() runs /sbin/modprobe.
    ln -s ../bin/busybox "$root/sbin/modprobe"
    install -m 0755 "$HERE/guest/init" "$root/init"
    install -m 0644 "$HERE/guest/harness.sh" "$root/lib/ferrobay/harness.sh"
    moddst=$root/lib/modules/$kver
    mkdir -p "$moddst"
    closure() { for m in "$@"; do modprobe -d "$x" -S "$kver" --show-depends "$m"; done |
                awk '$1=="insmod"{print $2}' | awk '!seen[$0]++'; }
    # shellcheck disable=SC2086
    closure $BOOT_MODS $EXTRA_MODS | while read -r ko; do
        rel=${ko#"$modsrc"/}
        mkdir -p "$moddst/$(dirname "$rel")"
        cp "$ko" "$moddst/$rel"
    done
    # busybox insmod loads plain .ko files: decompress xz-compressed modules (Debian 13).
    find "$moddst" -name '*.ko.xz' -exec xz -d {} +
    # shellcheck disable=SC2086
    closure $BOOT_MODS | sed "s|^$modsrc/||; s|\.ko\.xz$|.ko|" > "$root/lib/modules/boot.list"
    cp "$modsrc/modules.order" "$modsrc/modules.builtin" "$modsrc/modules.builtin.modinfo" "$moddst/" 2>/dev/null || true
    depmod -b "$root" "$kver"
    printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
    printf 'root:x:0:\n' > "$root/etc/group"
}
MODS_BASE="virtio_pci virtio_net qemu_fw_cfg configfs crc32c_generic crc32c-intel nvme-tcp nvmet nvmet-tcp"
MODS_EXTRA="brd null_blk loop virtio_blk"

# 2. base image (bookworm) ----------------------------------------------------------
if [ "$WITH_TRIXIE" = 0 ] || [ "$WITH_FIO" = 1 ]; then
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
STAMP="kver=$KVER scripts=$SCRIPTS_HASH"

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
    ROOT=$CACHE/root
    BOOT_MODS=$MODS_BASE EXTRA_MODS=$MODS_EXTRA make_root "$X" "$KVER" "$ROOT"
    LIBPATH=$X/lib/x86_64-linux-gnu:$X/usr/lib/x86_64-linux-gnu
    copy_with_libs "$ROOT" "$LIBPATH" "$X/usr/sbin/nvme"
    echo "$STAMP" > "$ROOT/etc/ferrobay-guest"
    extract_vmlinux "$X/boot/vmlinuz-$KVER" "$OUT/vmlinux"
    pack_cpio "$ROOT" "$OUT/initramfs.cpio"
    echo "$KVER" > "$OUT/kernel-version"
    echo "$STAMP" > "$OUT/stamp"
    log "base image built in $((SECONDS - t0)) s: kernel $KVER, $(wc -l < "$ROOT/lib/modules/boot.list") boot modules, initramfs $(du -h "$OUT/initramfs.cpio" | cut -f1)"
fi
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

# 4. trixie flavour -----------------------------------------------------------------
# Debian 13: kernel 6.12 (CONFIG_NVME_HOST_AUTH, CONFIG_NVME_TCP_TLS; checked
# below), nvme-cli 2.13, tlshd, keyctl. Every user-space binary runs on trixie's
# own glibc and loader (the host's bookworm libraries are too old for them).
if [ "$WITH_TRIXIE" = 1 ]; then
    TDIR=$CACHE/trixie TOUT=$OUT/trixie
    TAPT=$TDIR/apt
    mkdir -p "$TAPT"/{sources.list.d,preferences.d,state/lists/partial,cache/archives/partial} "$TDIR/debs" "$TOUT"
    : > "$TAPT/status"
    # The private apt configuration: its own sources, lists, cache and (empty)
    # dpkg status; the machine's apt configuration is not read or changed.
    TRIXIE_APT_OPTS=(-o Dir::Etc::SourceList="$TAPT/sources.list"
                     -o Dir::Etc::SourceParts="$TAPT/sources.list.d"
                     -o Dir::Etc::Preferences="$TAPT/preferences"
                     -o Dir::Etc::PreferencesParts="$TAPT/preferences.d"
                     -o Dir::State="$TAPT/state" -o Dir::State::status="$TAPT/status"
                     -o Dir::Cache="$TAPT/cache" -o APT::Sandbox::User=root)
    apt_trixie() { local tool=$1; shift; "$tool" "${TRIXIE_APT_OPTS[@]}" "$@"; }
    APT=apt_trixie DEBS=$TDIR/debs
    # The mirror: FERROBAY_TRIXIE_MIRROR, else the one the machine's apt uses for
    # its own release (the archive that carries both suites).
    mirror=${FERROBAY_TRIXIE_MIRROR:-}
    if [ -z "$mirror" ]; then
        codename=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")
        mirror_from_host() { apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 2>/dev/null |
                             awk -v s="$codename" '$1==s{print $2; exit}'; }
        mirror=$(mirror_from_host)
        if [ -z "$mirror" ]; then
            log "apt has no package lists: apt-get update"
            apt-get update -qq || die "apt-get update failed (needs root and a reachable Debian mirror)"
            mirror=$(mirror_from_host)
        fi
        [ -n "$mirror" ] || die "cannot tell which Debian mirror apt uses; set FERROBAY_TRIXIE_MIRROR=URI"
    fi
    KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -s "$KEYRING" ] || die "$KEYRING missing (package debian-archive-keyring)"
    want_src="deb [signed-by=$KEYRING] ${mirror%/} trixie main"
    if [ "$(cat "$TAPT/sources.list" 2>/dev/null)" != "$want_src" ]; then
        echo "$want_src" > "$TAPT/sources.list"
        rm -f "$TAPT"/state/lists/*_Packages* 2>/dev/null || true
    fi
    tkver_from_apt() { apt_trixie apt-cache depends linux-image-amd64 2>/dev/null |
                       sed -n 's/.*Depends: linux-image-//p' | head -n1; }
    # The lists are fetched once (and again with --force): the image stays what
    # it was built from until then, and later builds need no network.
    if [ "$FORCE" = 1 ] || ! ls "$TAPT"/state/lists/*_Packages* >/dev/null 2>&1; then
        log "trixie package lists: apt-get update (private configuration in $TAPT)"
        apt_trixie apt-get -qq update || die "apt-get update for trixie failed (needs root and a reachable Debian mirror)"
        rm -f "$TAPT/kver"
    fi
    # What linux-image-amd64 points to, resolved once per list update (apt-cache on
    # the full list takes seconds; every test process calls this script).
    if [ ! -s "$TAPT/kver" ]; then
        tkver_from_apt > "$TAPT/kver.tmp" && mv -f "$TAPT/kver.tmp" "$TAPT/kver"
    fi
    TKVER=${TRIXIE_KVER:-$(cat "$TAPT/kver" 2>/dev/null)}
    [ -n "$TKVER" ] || { rm -f "$TAPT/kver"; die "cannot resolve trixie's linux-image-amd64 to a kernel version"; }
    TSTAMP="flavour=trixie kver=$TKVER scripts=$SCRIPTS_HASH"
    if [ "$FORCE" = 0 ] && [ "$(cat "$TOUT/stamp" 2>/dev/null)" = "$TSTAMP" ] &&
       [ -s "$TOUT/vmlinux" ] && [ -s "$TOUT/initramfs.cpio" ]; then
        log "trixie image up to date ($TSTAMP)"
    else
        t0=$SECONDS
        log "building trixie image: $TSTAMP"
        command -v zstd >/dev/null || die "missing host tool: zstd; run scripts/install-deps.sh (as root)"
        TOOLS=(nvme-cli ktls-utils keyutils)
        # The tools and their library closure (libc6 included); no perl/python.
        want=(linux-image-"$TKVER" "${TOOLS[@]}")
        deps=$(apt_trixie apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                 --no-breaks --no-replaces --no-enhances "${TOOLS[@]}") ||
            die "apt-cache depends ${TOOLS[*]} failed (trixie lists in $TAPT)"
        for p in $(echo "$deps" | grep -E '^(lib[^ <]*|zlib1g)$' | sort -u); do
            case $p in *-perl|libpython*|*-dev) continue ;; esac
            want+=("$p")
        done
        fetch_debs "${want[@]}"
        X=$TDIR/x
        extract_debs "$X" "${want[@]}"
        cfg=$X/boot/config-$TKVER
        for opt in CONFIG_NVME_AUTH CONFIG_NVME_HOST_AUTH CONFIG_NVME_TCP_TLS CONFIG_NVME_KEYRING CONFIG_TLS; do
            grep -Eq "^$opt=(y|m)$" "$cfg" || die "$opt is not set in $cfg"
        done
        ROOT=$TDIR/root
        # nvme-core needs nvme-auth and nvme-tcp needs nvme-keyring (their
        # dependencies pull them in); tls is the kernel TLS that tlshd hands
        # sockets to, with the AEADs of the TLS 1.3 suites NVMe/TCP uses.
        BOOT_MODS="$MODS_BASE nvme-fabrics nvme-auth nvme-keyring tls gcm" \
        EXTRA_MODS="$MODS_EXTRA ccm chacha20poly1305 ghash-generic aesni-intel" \
            make_root "$X" "$TKVER" "$ROOT"
        LIBPATH=$X/lib/x86_64-linux-gnu:$X/usr/lib/x86_64-linux-gnu
        LOADER=$X/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
        [ -x "$LOADER" ] || LOADER=$X/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
        [ -x "$LOADER" ] || die "no dynamic loader in trixie's libc6"
        LOADER=$LOADER LOADER_ROOT=$X copy_with_libs "$ROOT" "$LIBPATH" \
            "$X/usr/sbin/nvme" "$X/usr/sbin/tlshd" "$X/usr/bin/keyctl"
        # tlshd's configuration as the package ships it.
        cp -a "$X"/etc/tlshd* "$ROOT/etc/" 2>/dev/null || true
        echo "$TSTAMP" > "$ROOT/etc/ferrobay-guest"
        extract_vmlinux "$X/boot/vmlinuz-$TKVER" "$TOUT/vmlinux"
        pack_cpio "$ROOT" "$TOUT/initramfs.cpio"
        echo "$TKVER" > "$TOUT/kernel-version"
        echo "$TSTAMP" > "$TOUT/stamp"
        log "trixie image built in $((SECONDS - t0)) s: kernel $TKVER, $(wc -l < "$ROOT/lib/modules/boot.list") boot modules, initramfs $(du -h "$TOUT/initramfs.cpio" | cut -f1)"
    fi
fi
