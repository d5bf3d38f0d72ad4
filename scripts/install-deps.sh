#!/usr/bin/env bash
# Installs the system packages the tests need, only when something is missing.
set -euo pipefail
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && file /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v file >/dev/null || need+=(file)
# The Linux test guest (scripts/guest/build.sh) unpacks the kernel's xz stream.
command -v xz >/dev/null || need+=(xz-utils)
# ISA-L, the reference the erasure-coding benchmark compares against (loaded at run time).
[ -e /usr/include/isa-l.h ] || need+=(libisal-dev)
# etcd server for the meta crate's tests. (No protoc: the etcd API code is committed.)
command -v etcd >/dev/null || need+=(etcd-server)
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
