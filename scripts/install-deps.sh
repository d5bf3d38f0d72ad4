#!/usr/bin/env bash
# Installs the system packages the tests need, only when something is missing.
set -euo pipefail
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && file /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v file >/dev/null || need+=(file)
# The Linux test guest (scripts/guest/build.sh) unpacks the kernel's xz stream
# (bookworm) or zstd stream (trixie); the trixie flavour's sources entry is signed
# with the Debian archive keyring.
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
[ -s /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
# ISA-L, the reference the erasure-coding benchmark compares against (loaded at run time).
[ -e /usr/include/isa-l.h ] || need+=(libisal-dev)
# etcd server for the meta crate's tests. (No protoc: the etcd API code is committed.)
command -v etcd >/dev/null || need+=(etcd-server)
# Headless Chromium and its WebDriver server for the dashboard's browser tests.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# TLS 1.3 PSK interop peers for crates/tls-psk (OpenSSL's s_server/s_client, GnuTLS's
# gnutls-serv/gnutls-cli) and nvme-cli for cross-checking the NVMe/TCP PSK derivations.
command -v openssl >/dev/null || need+=(openssl)
command -v gnutls-cli >/dev/null || need+=(gnutls-bin)
command -v nvme >/dev/null || need+=(nvme-cli)
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The Linux test guests (crates/test-guest): the bookworm image and the trixie one
# (kernel 6.12 with DH-HMAC-CHAP and NVMe/TCP TLS, nvme-cli 2.13, tlshd), whose
# packages come from Debian's trixie suite through a private apt configuration
# (the machine's apt sources are not changed). Fetched here, while the network is
# expected; a stamp makes this a no-op when the images are up to date.
GUEST_BUILD="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/guest/build.sh"
bash "$GUEST_BUILD"
bash "$GUEST_BUILD" --trixie

# S3 gateway (crates/objstore) tests: PostgreSQL server binaries for the shared object
# index (the Debian package also creates the `postgres` user the test server runs as),
# setpriv to drop root for it, the aws CLI, and boto3 + pytest for the end-to-end suite.
s3_need=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || s3_need+=(postgresql)
command -v setpriv >/dev/null || s3_need+=(util-linux)
command -v aws >/dev/null || s3_need+=(awscli)
command -v python3 >/dev/null || s3_need+=(python3 python3-pip)
if [ ${#s3_need[@]} -gt 0 ]; then
    echo "install-deps: installing ${s3_need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${s3_need[@]}"
fi
if ! python3 -c 'import boto3, pytest' 2>/dev/null; then
    echo "install-deps: installing boto3 and pytest (pip)"
    python3 -m pip install --quiet boto3 pytest \
        || python3 -m pip install --quiet --break-system-packages boto3 pytest
fi
# The Python client library (clients/python) is pip-installed by its test without build
# isolation (no network): setuptools and, for setuptools before 70.1, wheel.
if ! python3 -c 'import setuptools, wheel' 2>/dev/null; then
    echo "install-deps: installing setuptools and wheel (pip)"
    python3 -m pip install --quiet setuptools wheel \
        || python3 -m pip install --quiet --break-system-packages setuptools wheel
fi
# Static checks of the Python client library (type check and unused names).
if ! python3 -c 'import mypy, pyflakes' 2>/dev/null; then
    echo "install-deps: installing mypy and pyflakes (pip)"
    python3 -m pip install --quiet mypy pyflakes \
        || python3 -m pip install --quiet --break-system-packages mypy pyflakes
fi
# The S3 benchmark (cargo bench -p ferrobay --bench s3, and its smoke pass in the test
# suite) compares against MinIO, built from its Go module at a pinned version (never
# committed); its load generator benches/s3load is Go too. Go itself comes with the
# machine (Debian's golang-go is too old for either).
MINIO_MODULE=github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
if command -v go >/dev/null; then
    gobin="$(go env GOPATH)/bin"
    if ! command -v minio >/dev/null && [ ! -x "$gobin/minio" ]; then
        echo "install-deps: building MinIO ($MINIO_MODULE, go install; takes minutes)"
        go install "$MINIO_MODULE"
    fi
else
    echo "install-deps: Go is not installed: the S3 benchmark's smoke pass cannot run"
fi
