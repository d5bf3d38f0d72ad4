#!/usr/bin/env bash
# scripts/guest/run.sh [--fio|--trixie] [--fwd HOSTPORT:GUESTPORT]... [--cpus N] [--mem MB]
#                      [JOBFILE] [-- QEMU_ARGS...]
#
# Boots the test guest in the foreground, for people (tests use crates/test-guest).
# With JOBFILE: runs it with the harness helpers loaded (as the tests do), then
# powers off; exit status 0 when the job exited 0 and printed no FAIL line.
# Without: an interactive shell in the guest (helpers loaded; 'exit' powers off).
# Kernel console and job output share this terminal (Ctrl-A x quits QEMU).
# The guest reaches the host's 127.0.0.1 as 10.0.2.2; --fwd forwards host
# 127.0.0.1:HOSTPORT to the guest's GUESTPORT. Builds the image if needed.
# Env: FERROBAY_GUEST_DIR, FERROBAY_GUEST_ACCEL=kvm, EXTRA_APPEND.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${FERROBAY_GUEST_DIR:-$(cd "$HERE/../.." && pwd)/target/guest}
FIO=0 TRIXIE=0 CPUS=2 MEM=1024 JOB= NET=user,id=n0
while [ $# -gt 0 ]; do
    case $1 in
        --fio) FIO=1 ;;
        --trixie) TRIXIE=1 ;;
        --fwd) NET+=",hostfwd=tcp:127.0.0.1:${2%%:*}-10.0.2.15:${2##*:}"; shift ;;
        --cpus) CPUS=$2; shift ;;
        --mem) MEM=$2; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) JOB=$(realpath "$1") ;;
    esac
    shift
done
command -v qemu-system-x86_64 >/dev/null ||
    { echo "run.sh: qemu-system-x86_64 missing: run scripts/install-deps.sh (as root)" >&2; exit 1; }
KERNEL=$DIR/out/vmlinux
if [ "$TRIXIE" = 1 ]; then "$HERE/build.sh" --trixie; KERNEL=$DIR/out/trixie/vmlinux INITRD=$DIR/out/trixie/initramfs.cpio
elif [ "$FIO" = 1 ]; then "$HERE/build.sh" --fio; INITRD=$DIR/out/initramfs-fio.cpio
else "$HERE/build.sh"; INITRD=$DIR/out/initramfs.cpio; fi

APPEND="console=ttyS0 quiet panic=-1 no_timer_check ${EXTRA_APPEND:-}"
FWCFG=()
if [ -n "$JOB" ]; then
    FWCFG=(-fw_cfg "name=opt/ferrobay/job,file=${JOB//,/,,}")
else
    APPEND+=" fb.shell"
fi
if [ "${FERROBAY_GUEST_ACCEL:-tcg}" = kvm ]; then ACCEL=(-accel kvm -cpu host)
else ACCEL=(-accel tcg,thread=multi -cpu max); fi
mkdir -p "$DIR/runs"
LOG=$DIR/runs/manual-$(date +%Y%m%d-%H%M%S)-$$.log
# Both serial ports on one multiplexed stdio; the terminal output is also logged.
set +e
qemu-system-x86_64 -name ferrobay-guest-manual -machine pc -nodefaults -no-user-config \
    -no-reboot -display none -smp "$CPUS" -m "$MEM" "${ACCEL[@]}" \
    -kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND" \
    -chardev stdio,id=con,mux=on,signal=off -serial chardev:con -serial chardev:con \
    -netdev "$NET" -device virtio-net-pci,netdev=n0,romfile= \
    "${FWCFG[@]}" "$@" | tee "$LOG"
set -e
echo "run.sh: log in $LOG" >&2
[ -z "$JOB" ] && exit 0
tr -d '\r' < "$LOG" | grep -q '^HARNESS_DONE rc=0' && ! tr -d '\r' < "$LOG" | grep -q '^FAIL '
