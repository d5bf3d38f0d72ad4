# Guest-side helpers (busybox ash), sourced by /init before the job.
#
# Records (one per line on the job channel, parsed by crates/test-guest):
#   PASS <name> [k=v ...]     FAIL <name> [k=v ...]     RESULT k=v ...
#   READY [k=v ...]           INFO free text            DMESG kernel log line
# A run fails when the job's exit status is not 0 or any FAIL line was printed.
# Helpers that print a value on stdout (nvme_ns_dev, nvme_connect_tcp,
# host_sync, nvmet_ramdisk, ...) send their diagnostics to stderr, which goes
# to the same channel.
#
# Variables: HOST_ADDR (10.0.2.2, the host's 127.0.0.1 seen from the guest),
# GUEST_ADDR (10.0.2.15), FB_SYNC_PORT (set by the host for host_sync),
# FB_RUN (the run's name).
HOST_ADDR=10.0.2.2
GUEST_ADDR=10.0.2.15
FAILS=0

# ------------------------------------------------------------------ records
now()    { cut -d' ' -f1 /proc/uptime; }
since()  { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }   # since T0 : seconds
pass()   { echo "PASS $*"; }
fail()   { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
info()   { echo "INFO $*"; }
result() { echo "RESULT $*"; }
ready()  { echo "READY $*"; }
rate()   { awk -v k="$1" -v s="$2" 'BEGIN{ if (s > 0) printf "%.0f", k/s; else print "inf" }'; }  # rate KIB SECS

# capture TAG CMD... : run CMD, print each line of its output as "INFO TAG| line";
# returns CMD's exit status.
capture() {
    local tag=$1 out rc; shift
    out=$(mktemp)
    "$@" < /dev/null > "$out" 2>&1; rc=$?
    sed "s/^/INFO $tag| /" "$out"
    rm -f "$out"
    return $rc
}
# logrun CMD... : capture with an empty tag (kept from the reference harness).
logrun() { capture "" "$@"; }

# check NAME CMD... : run CMD; print "PASS NAME secs=S" or, with CMD's output,
# "FAIL NAME rc=N secs=S". Returns CMD's exit status.
check() {
    local name=$1 t out rc; shift
    t=$(now); out=$(mktemp)
    "$@" < /dev/null > "$out" 2>&1; rc=$?
    if [ $rc -eq 0 ]; then
        pass "$name" secs="$(since "$t")"
    else
        sed "s/^/INFO $name| /" "$out"
        fail "$name" rc=$rc secs="$(since "$t")"
    fi
    rm -f "$out"
    return $rc
}

# dmesg_tail [N] [REGEX] : last N (50) kernel lines matching REGEX (nvme) as INFO.
dmesg_tail() { dmesg | grep -iE "${2:-nvme}" | tail -n "${1:-50}" | sed 's/^/INFO dmesg| /'; }

# kmsg_follow [REGEX] & : forward kernel messages matching REGEX (nvme) as
# "KMSG ..." lines while the job runs (from the start of the kernel log).
kmsg_follow() { grep -iE "${1:-nvme}" < /dev/kmsg | sed 's/^[^;]*;/KMSG /'; }

# ------------------------------------------------------------ host <-> guest
# host_sync NAME [MESSAGE...] : rendezvous with the host test. Blocks until the
# test calls RunningGuest::release(NAME) (after wait_for(NAME), which returns
# MESSAGE), then prints the payload the host sent (may be empty).
# Returns non-zero (and prints FAIL host_sync) if the host could not be reached
# or answered something else. HOST_SYNC_TIMEOUT_S bounds the wait (900).
host_sync() {
    local name=$1 reply; shift
    if [ -z "${FB_SYNC_PORT:-}" ]; then
        fail host_sync name="$name" reason=no_sync_port >&2; return 1
    fi
    echo "SYNC_WAIT $name" >&2
    reply=$(printf 'SYNC %s %s\n' "$name" "$*" |
            timeout "${HOST_SYNC_TIMEOUT_S:-900}" nc "$HOST_ADDR" "$FB_SYNC_PORT")
    case $reply in
        "GO $name"|"GO $name "*)
            echo "SYNC_GO $name" >&2
            reply=${reply#"GO $name"}; echo "${reply# }"; return 0 ;;
    esac
    fail host_sync name="$name" reply="$(echo "$reply" | head -c 80 | tr ' \n' '_ ')" >&2
    return 1
}

# host_loopback_routed : make the host's 127.0.0.1 reachable from the guest as
# 127.0.0.1 itself, so that addresses the host's daemons publish (discovery log
# entries naming 127.0.0.1) work here. The guest gives up its own IPv4 loopback:
# 127.0.0.0/8 goes out through QEMU's user network, which connects to the host's
# loopback (route_localnet lets the kernel send such packets). After this, jobs
# reach the host as 127.0.0.1 or $HOST_ADDR alike.
host_loopback_routed() {
    local dev
    dev=$(ip route show default | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n1)
    [ -n "$dev" ] || { echo "host_loopback_routed: no default route" >&2; return 1; }
    echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet &&
        echo 1 > "/proc/sys/net/ipv4/conf/$dev/route_localnet" &&
        ip addr del 127.0.0.1/8 dev lo || return 1
    ip route get 127.0.0.1 | grep -q "via $HOST_ADDR" ||
        { echo "host_loopback_routed: $(ip route get 127.0.0.1)" >&2; return 1; }
}

# uevent_log FILE : record every kernel uevent in FILE, one line per event with its
# ACTION, DEVPATH, DEVNAME, SUBSYSTEM and NVME_* variables, from a background listener
# on the kernel's uevent netlink socket (busybox uevent): there is no udev in the guest.
uevent_log() {
    cat > /tmp/uevent-helper <<'EOF_HELPER'
#!/bin/sh
echo "$(env | grep -E '^(ACTION|DEVPATH|DEVNAME|SUBSYSTEM|NVME_[A-Z_]*)=' | sort | tr '\n' ' ')" >> "$1"
EOF_HELPER
    chmod +x /tmp/uevent-helper && : > "$1" || return 1
    uevent /tmp/uevent-helper "$1" &
    sleep 0.2
    kill -0 $! 2>/dev/null
}

# ---------------------------------------------------------------- devices
# wait_path PATH [TIMEOUT_S] : wait (10 s) until PATH exists.
wait_path() {
    local i=0 n=$(( ${2:-10} * 5 ))
    while [ ! -e "$1" ]; do
        [ $i -ge $n ] && return 1
        sleep 0.2; i=$((i + 1))
    done
}
# wait_path_gone PATH [TIMEOUT_S] : wait (10 s) until PATH no longer exists.
wait_path_gone() {
    local i=0 n=$(( ${2:-10} * 5 ))
    while [ -e "$1" ]; do
        [ $i -ge $n ] && return 1
        sleep 0.2; i=$((i + 1))
    done
}
# dev_size DEV : size in bytes.
dev_size() { blockdev --getsize64 "$1"; }

# ---------------------------------------------------------- O_DIRECT I/O
# Patterns written by io_write are kept in /tmp/io.TAG so that io_check can
# re-verify them later (after a reconnect, a target restart, ...).
# OFFSET and SIZE are bytes, multiples of the device's logical block size
# (512 B: any sector-aligned offset, e.g. 3584). One request of SIZE bytes.
io_args_ok() {
    [ $(( $1 % 512 )) -eq 0 ] && [ $(( $2 % 512 )) -eq 0 ] && [ "$2" -gt 0 ] ||
        { echo "io: offset=$1 size=$2 must be multiples of 512 (size > 0)" >&2; return 2; }
}
# io_write DEV OFFSET SIZE [TAG] : write SIZE random bytes at OFFSET with O_DIRECT.
io_write() {
    local dev=$1 off=$2 size=$3 tag=${4:-$2+$3}
    io_args_ok "$off" "$size" || return 2
    dd if=/dev/urandom of="/tmp/io.$tag" bs="$size" count=1 iflag=fullblock 2>/dev/null || return 2
    dd if="/tmp/io.$tag" of="$dev" bs="$size" count=1 seek="$off" \
       oflag=seek_bytes,direct conv=notrunc,fsync 2>/tmp/io.err ||
        { echo "io_write $dev off=$off size=$size: $(cat /tmp/io.err)" >&2; return 3; }
}
# io_check DEV OFFSET SIZE [TAG] : O_DIRECT read of SIZE bytes at OFFSET, must
# equal what io_write wrote with the same TAG.
io_check() {
    local dev=$1 off=$2 size=$3 tag=${4:-$2+$3}
    [ -f "/tmp/io.$tag" ] || { echo "io_check: nothing written with tag $tag" >&2; return 2; }
    dd if="$dev" of=/tmp/io.rb bs="$size" count=1 skip="$off" \
       iflag=skip_bytes,direct,fullblock 2>/tmp/io.err ||
        { echo "io_check $dev off=$off size=$size: $(cat /tmp/io.err)" >&2; return 4; }
    cmp "/tmp/io.$tag" /tmp/io.rb >&2 || { echo "io_check $dev off=$off size=$size: data differs" >&2; return 5; }
}
# io_verify DEV OFFSET SIZE [TAG] : io_write then io_check.
io_verify() { io_write "$@" && io_check "$@"; }

# The io_matrix cases, "SIZE OFFSET_IN_SLOT": 512 B .. 1 MiB, sector-aligned but
# not size-aligned offsets, some crossing 4 KiB / 128 KiB boundaries. Each case
# gets its own 2 MiB slot: the matrix covers 16 MiB from BASE. A job may set
# its own IO_MATRIX (e.g. 4 KiB-aligned cases for a 4 KiB-LBA namespace).
IO_MATRIX="512 512
1024 3584
4096 4608
8192 64512
16896 132608
65536 262656
131072 1046016
1048576 512"
# io_matrix DEV [BASE_BYTES] [PREFIX] : io_verify every case (PASS/FAIL
# PREFIX_SIZE_at_OFFSET each); returns the number of failed cases.
io_matrix() {
    local dev=$1 base=${2:-0} p=${3:-io} i=0 bad=0 size off
    while read -r size off; do
        off=$((base + i * 2097152 + off))
        check "${p}_${size}_at_${off}" io_verify "$dev" "$off" "$size" "$p.$i" || bad=$((bad + 1))
        i=$((i + 1))
    done <<EOF
$IO_MATRIX
EOF
    return $bad
}
# io_matrix_check DEV [BASE_BYTES] [PREFIX] : re-read everything io_matrix wrote.
io_matrix_check() {
    local dev=$1 base=${2:-0} p=${3:-io} i=0 bad=0 size off
    while read -r size off; do
        off=$((base + i * 2097152 + off))
        check "${p}_recheck_${size}_at_${off}" io_check "$dev" "$off" "$size" "$p.$i" || bad=$((bad + 1))
        i=$((i + 1))
    done <<EOF
$IO_MATRIX
EOF
    return $bad
}

# fio_verify DEV OFFSET SIZE [fio options...] : fio random writes (4k/64k/256k
# mix, queue depth 16, libaio, O_DIRECT) over SIZE bytes at OFFSET, each block
# carrying a crc32c header that is read back and checked. Needs the fio image
# (GuestConfig::with_fio). Prints fio's output only when it fails.
FIO_JOB_ARGS="--rw=randwrite --bssplit=4k/50:64k/40:256k/10 --iodepth=16 --ioengine=libaio
 --direct=1 --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=terse --terse-version=3"
fio_verify() {
    local dev=$1 off=$2 size=$3 out rc; shift 3
    command -v fio >/dev/null || { echo "fio_verify: no fio: boot with GuestConfig::with_fio()" >&2; return 127; }
    out=$(mktemp)
    # shellcheck disable=SC2086
    fio --name=verify --filename="$dev" --offset="$off" --size="$size" $FIO_JOB_ARGS "$@" > "$out" 2>&1
    rc=$?
    # (the terse result line is long and says little on failure)
    [ $rc -eq 0 ] || grep -v '^3;fio-' "$out" | sed 's/^/INFO fio| /' >&2
    rm -f "$out"
    return $rc
}
# fio_reverify DEV OFFSET SIZE [fio options...] : check, without writing, what
# fio_verify with the same arguments wrote (e.g. after a target restart).
fio_reverify() { fio_verify "$@" --verify_only; }

# make_pattern FILE SIZE_KB : random data file.
make_pattern() { dd if=/dev/urandom of="$1" bs=1024 count="$2" 2>/dev/null; }
# verify_rw DEV PATTERN OFFSET_BYTES : write PATTERN at OFFSET with O_DIRECT in
# IO_BS requests (64 KiB: above nvmet-tcp's in-capsule limit, so R2T/H2CData is
# used), read back with O_DIRECT and compare. Sets WSECS/RSECS.
IO_BS=${IO_BS:-65536}
verify_rw() {
    local t0
    t0=$(now)
    dd if="$2" of="$1" bs="$IO_BS" seek="$3" oflag=seek_bytes,direct conv=notrunc,fsync 2>/dev/null || return 2
    WSECS=$(since "$t0")
    verify_ro "$@"
}
# verify_ro DEV PATTERN OFFSET_BYTES : read back and compare only.
verify_ro() {
    local n t0
    n=$(wc -c < "$2")
    t0=$(now)
    echo 3 > /proc/sys/vm/drop_caches
    dd if="$1" bs="$IO_BS" skip="$3" count=$(( (n + IO_BS - 1) / IO_BS )) \
        iflag=skip_bytes,direct,fullblock 2>/dev/null | head -c "$n" > /tmp/readback || return 3
    RSECS=$(since "$t0")
    cmp "$2" /tmp/readback || return 4
}

# ---------------------------------------------------------- NVMe host side
# nvme_ns_dev NQN [TIMEOUT_S] : print /dev/nvmeXnY, the first namespace of the
# subsystem NQN, waiting (30 s) for it to appear.
nvme_ns_dev() {
    local i=0 n=$(( ${2:-30} * 5 )) s ns
    while [ $i -lt $n ]; do
        for s in /sys/class/nvme-subsystem/nvme-subsys*; do
            [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
            for ns in "$s"/nvme*n*; do
                [ -e "$ns" ] && [ -b "/dev/${ns##*/}" ] && { echo "/dev/${ns##*/}"; return 0; }
            done
        done
        sleep 0.2; i=$((i + 1))
    done
    echo "nvme_ns_dev: no namespace of $1 after ${2:-30} s" >&2
    return 1
}
# nvme_ctrl_dev NQN : print /dev/nvmeX, the (first) controller connected to NQN.
nvme_ctrl_dev() {
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && { echo "/dev/${c##*/}"; return 0; }
    done
    return 1
}
# nvme_ctrl_state NQN : print the controller state (live, connecting, resetting, ...).
nvme_ctrl_state() {
    local c
    c=$(nvme_ctrl_dev "$1") || { echo none; return 1; }
    cat "/sys/class/nvme/${c#/dev/}/state"
}
# wait_ctrl_state NQN STATE [TIMEOUT_S] : wait (30 s) for the controller state.
wait_ctrl_state() {
    local i=0 n=$(( ${3:-30} * 5 ))
    while [ "$(nvme_ctrl_state "$1" 2>/dev/null)" != "$2" ]; do
        [ $i -ge $n ] && { echo "wait_ctrl_state: $1 is $(nvme_ctrl_state "$1") not $2 after ${3:-30} s" >&2; return 1; }
        sleep 0.2; i=$((i + 1))
    done
}
# nvme_disc_ctrl ADDR PORT : print nvmeX, the discovery controller connected to
# ADDR:PORT (a persistent discovery connection).
nvme_disc_ctrl() {
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = nqn.2014-08.org.nvmexpress.discovery ] || continue
        case ",$(cat "$c/address" 2>/dev/null)," in
            *",traddr=$1,"*) ;;
            *) continue ;;
        esac
        case ",$(cat "$c/address" 2>/dev/null)," in
            *",trsvcid=$2,"*) echo "${c##*/}"; return 0 ;;
        esac
    done
    return 1
}
# nvme_connect_tcp ADDR PORT NQN [nvme-connect options...] : connect and print
# the namespace device. Diagnostics (nvme-cli output, dmesg) go to stderr.
nvme_connect_tcp() {
    local addr=$1 svc=$2 nqn=$3; shift 3
    capture connect nvme connect -t tcp -a "$addr" -s "$svc" -n "$nqn" "$@" >&2 ||
        { dmesg_tail 20 >&2; return 1; }
    nvme_ns_dev "$nqn" || { dmesg_tail 20 >&2; return 1; }
}

# ---------------------------------------------------------- nvmet target side
# nvmet_ramdisk SIZE_MB : create /dev/ram0 (brd) of SIZE_MB and print its path.
nvmet_ramdisk() {
    modprobe brd rd_nr=1 rd_size=$(( $1 * 1024 )) max_part=0 || return 1
    wait_path /dev/ram0 5 && echo /dev/ram0
}
# nvmet_setup NQN TRADDR TRSVCID BACKING [PORTID] : export block device (or
# file) BACKING as namespace 1 of subsystem NQN on an NVMe/TCP port through
# configfs. Any host may connect.
nvmet_setup() {
    local nqn=$1 addr=$2 svc=$3 backing=$4 pid=${5:-1} cfg=/sys/kernel/config/nvmet
    [ -d $cfg ] || { echo "nvmet configfs missing" >&2; return 1; }
    mkdir -p "$cfg/subsystems/$nqn/namespaces/1" || return 1
    echo 1 > "$cfg/subsystems/$nqn/attr_allow_any_host"
    echo "$backing" > "$cfg/subsystems/$nqn/namespaces/1/device_path"
    # tmpfs files cannot do O_DIRECT: buffered I/O for file backends
    [ -b "$backing" ] || echo 1 > "$cfg/subsystems/$nqn/namespaces/1/buffered_io"
    echo 1 > "$cfg/subsystems/$nqn/namespaces/1/enable" || return 1
    mkdir -p "$cfg/ports/$pid"
    echo tcp > "$cfg/ports/$pid/addr_trtype"
    echo ipv4 > "$cfg/ports/$pid/addr_adrfam"
    echo "$addr" > "$cfg/ports/$pid/addr_traddr"
    echo "$svc" > "$cfg/ports/$pid/addr_trsvcid"
    ln -s "$cfg/subsystems/$nqn" "$cfg/ports/$pid/subsystems/$nqn" || return 1
}
# nvmet_unexport NQN [PORTID] : unlink the subsystem from the port (hosts lose it).
nvmet_unexport() { rm "/sys/kernel/config/nvmet/ports/${2:-1}/subsystems/$1"; }

# host_scenario TRADDR TRSVCID SUBNQN [SIZE_KB] [nvme-connect options...] :
# discover, connect, write/read-verify, reconnect + re-verify, disconnect
# (kept from the reference harness). Returns the number of failed steps.
host_scenario() {
    local addr=$1 svc=$2 nqn=$3 size=${4:-4096} t dev ctrl c off2 out
    shift 3; [ $# -gt 0 ] && shift
    info "host scenario: traddr=$addr trsvcid=$svc subnqn=$nqn size_kb=$size hostnqn=$(cat /etc/nvme/hostnqn)"
    t=$(now)
    if [ "${SKIP_DISCOVER:-0}" = 1 ]; then
        info "discover skipped (SKIP_DISCOVER=1)"
    elif capture discover nvme discover -t tcp -a "$addr" -s "$svc"; then
        pass discover secs="$(since "$t")"
    else
        fail discover secs="$(since "$t")"
    fi
    t=$(now)
    if dev=$(nvme_connect_tcp "$addr" "$svc" "$nqn" "$@"); then
        pass connect secs="$(since "$t")" ctrl="$(nvme_ctrl_dev "$nqn")" ns="$dev"
    else
        fail connect secs="$(since "$t")"; return 1
    fi
    ctrl=$(nvme_ctrl_dev "$nqn")
    capture list nvme list
    c=/sys/class/nvme/${ctrl#/dev/}
    info "ctrl=$ctrl cntlid=$(cat "$c/cntlid") state=$(cat "$c/state") queue_count=$(cat "$c/queue_count") sqsize=$(cat "$c/sqsize") ns_bytes=$(dev_size "$dev")"
    make_pattern /tmp/pattern "$size"
    make_pattern /tmp/pattern2 12
    off2=$(( (size + 4) * 1024 + 512 ))
    if verify_rw "$dev" /tmp/pattern 0; then
        pass write_read_verify kb="$size" bs="$IO_BS" write_secs="$WSECS" read_secs="$RSECS"
        result write_kib_s="$(rate "$size" "$WSECS")" read_kib_s="$(rate "$size" "$RSECS")"
    else
        fail write_read_verify rc=$?
    fi
    if verify_rw "$dev" /tmp/pattern2 $off2; then
        pass write_read_verify_offset offset=$off2 kb=12
    else
        fail write_read_verify_offset rc=$?
    fi
    t=$(now)
    capture disconnect nvme disconnect -n "$nqn"
    if dev=$(nvme_connect_tcp "$addr" "$svc" "$nqn" "$@") &&
       verify_ro "$dev" /tmp/pattern 0 && verify_ro "$dev" /tmp/pattern2 $off2; then
        pass reconnect_reverify secs="$(since "$t")"
    else
        fail reconnect_reverify secs="$(since "$t")"
    fi
    t=$(now)
    out=$(nvme disconnect -n "$nqn" 2>&1); echo "$out" | sed 's/^/INFO disconnect| /'
    if echo "$out" | grep -q 'disconnected 1'; then
        pass disconnect secs="$(since "$t")"
    else
        fail disconnect secs="$(since "$t")"
    fi
    return $FAILS
}
