# Guest job of benches/storage_node.rs (busybox ash, sourced after harness.sh).
# Both targets on guest loopback, each on a RAM namespace of $NS_MB MiB:
#   kernel:   nvmet-tcp on a brd RAM disk, 127.0.0.1:$KPORT, $KNQN
#   ferrobay: `ferrobay node run` with --drive ram:${NS_MB}M, 127.0.0.1:$FPORT, $FNQN
# and the same loads from the same initiators: `ferrobay bench` (nvmf-host), then the
# kernel's nvme-tcp host with fio ($WITH_FIO=1). Each run prints one line
#   FBRESULT initiator=.. target=.. workload=.. round=.. busy_ticks=.. node_ticks=.. hz=.. time=.. json=<JSON>
# with the guest's busy CPU ticks (/proc/stat: user+nice+system+irq+softirq) and the node
# process's ticks over the run.
# Every workload runs ROUNDS times per target, the target that goes first alternating
# from workload to workload and round to round.
# From the bench: FILES_PORT LIBS NS_MB SECS ROUNDS WORKLOADS PRE KNQN KPORT FNAME FNQN FPORT
# WITH_FIO

HZ=100   # USER_HZ of Debian's x86-64 kernels
fetch() { wget -q -O "$2" "http://$HOST_ADDR:$FILES_PORT/$1"; }
cpu_busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
pid_ticks() {   # utime + stime of PID (0 when there is no such process)
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || { echo 0; return; }
    sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
url() {
    case $1 in
        kernel) echo "nvme+tcp://127.0.0.1:$KPORT/$KNQN/1" ;;
        ferrobay) echo "nvme+tcp://127.0.0.1:$FPORT/$FNQN/1" ;;
    esac
}
node_log() { tail -n "${1:-30}" /tmp/fnode.log 2>/dev/null | sed 's/^/INFO node| /'; }

# 1. the binary under test and the libraries the image lacks -------------------------
t0=$(now)
fetch ferrobay /usr/sbin/ferrobay && chmod 0755 /usr/sbin/ferrobay ||
    { fail fetch_ferrobay port="$FILES_PORT"; exit 1; }
for l in $LIBS; do
    [ -e "/lib/x86_64-linux-gnu/$l" ] || [ -e "/lib64/$l" ] ||
        fetch "lib/$l" "/lib/x86_64-linux-gnu/$l" || { fail fetch_lib lib="$l"; exit 1; }
done
check ferrobay_runs ferrobay --version || exit 1
info "fetched ferrobay ($(wc -c < /usr/sbin/ferrobay) bytes) in $(since "$t0") s"

# 2. the two targets ----------------------------------------------------------------
dev=$(nvmet_ramdisk "$NS_MB") && nvmet_setup "$KNQN" 127.0.0.1 "$KPORT" "$dev" ||
    { fail kernel_target; dmesg_tail 20; exit 1; }
pass kernel_target dev="$dev"

mkdir -p /tmp/fnode
ferrobay node run --name "$FNAME" --data-dir /tmp/fnode --listen "127.0.0.1:$FPORT" \
    --discovery-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --drive "ram:${NS_MB}M" \
    > /tmp/fnode.log 2>&1 &
NODE_PID=$!
wait_path /tmp/fnode/endpoints.json 120 || { fail ferrobay_target; node_log; exit 1; }
pass ferrobay_target pid="$NODE_PID"

# 3. nvmf-host initiator (`ferrobay bench`) -------------------------------------------
our_run() {   # our_run TARGET NAME RW BS QD [ferrobay bench options...]
    local t=$1 w=$2 rw=$3 bs=$4 qd=$5 b0 n0 rc; shift 5
    b0=$(cpu_busy); n0=$(pid_ticks "$NODE_PID")
    time -f "%e %U %S" -o /tmp/time.out \
        ferrobay bench --target "$(url "$t")" --rw "$rw" --bs "$bs" --iodepth "$qd" --json "$@" \
        > /tmp/bench.json 2> /tmp/bench.err
    rc=$?
    b1=$(cpu_busy); n1=$(pid_ticks "$NODE_PID")
    if [ $rc -ne 0 ]; then
        fail "bench_${t}_$w" rc=$rc
        tail -n 20 /tmp/bench.err | sed 's/^/INFO bench| /'
        [ "$t" = ferrobay ] && node_log 20
        return 1
    fi
    echo "FBRESULT initiator=nvmf-host target=$t workload=$w round=${ROUND:-0} busy_ticks=$((b1 - b0)) node_ticks=$((n1 - n0)) hz=$HZ time=$(tr ' ' ',' < /tmp/time.out | tr -d '\n') json=$(tr -d '\n' < /tmp/bench.json)"
}

order() {   # order N: which target goes first alternates with N
    if [ $(( $1 % 2 )) -eq 0 ]; then echo "ferrobay kernel"; else echo "kernel ferrobay"; fi
}

set -- $(echo "$PRE" | tr ':' ' ')
for t in ferrobay kernel; do
    our_run "$t" "$1" "$2" "$3" "$4" || exit 1
done
ROUND=0
while [ $ROUND -lt "$ROUNDS" ]; do
    i=$ROUND
    for spec in $WORKLOADS; do
        set -- $(echo "$spec" | tr ':' ' ')
        for t in $(order $i); do
            our_run "$t" "$1" "$2" "$3" "$4" --runtime "${SECS}s" || exit 1
        done
        i=$((i + 1))
    done
    ROUND=$((ROUND + 1))
done
pass nvmf_host_runs

# 4. kernel initiator + fio ------------------------------------------------------------
if [ "$WITH_FIO" = 1 ]; then
    command -v fio > /dev/null || { fail fio_missing; exit 1; }
    kdev=$(nvme_connect_tcp 127.0.0.1 "$KPORT" "$KNQN") || { fail connect_kernel; exit 1; }
    fdev=$(nvme_connect_tcp 127.0.0.1 "$FPORT" "$FNQN") || { fail connect_ferrobay; node_log; exit 1; }
    pass kernel_host_connected kernel="$kdev" ferrobay="$fdev"
    fio_run() {   # fio_run TARGET DEV NAME RW BS QD
        local t=$1 d=$2 w=$3 rw=$4 bs=$5 qd=$6 b0 n0 rc
        b0=$(cpu_busy); n0=$(pid_ticks "$NODE_PID")
        fio --name="$w" --filename="$d" --ioengine=libaio --direct=1 --rw="$rw" --bs="$bs" \
            --iodepth="$qd" --numjobs=1 --time_based --runtime="$SECS" \
            --output-format=json --output=/tmp/fio.json > /tmp/fio.err 2>&1
        rc=$?
        b1=$(cpu_busy); n1=$(pid_ticks "$NODE_PID")
        if [ $rc -ne 0 ]; then
            fail "fio_${t}_$w" rc=$rc
            tail -n 20 /tmp/fio.err | sed 's/^/INFO fio| /'
            return 1
        fi
        echo "FBRESULT initiator=linux-nvme-tcp+fio target=$t workload=$w round=$ROUND busy_ticks=$((b1 - b0)) node_ticks=$((n1 - n0)) hz=$HZ time=- json=$(tr -d '\n' < /tmp/fio.json)"
    }
    ROUND=0
    while [ $ROUND -lt "$ROUNDS" ]; do
        i=$ROUND
        for spec in $WORKLOADS; do
            set -- $(echo "$spec" | tr ':' ' ')
            for t in $(order $i); do
                if [ "$t" = kernel ]; then d=$kdev; else d=$fdev; fi
                fio_run "$t" "$d" "$1" "$2" "$3" "$4" || exit 1
            done
            i=$((i + 1))
        done
        ROUND=$((ROUND + 1))
    done
    pass kernel_host_runs
    nvme disconnect -n "$FNQN" > /dev/null 2>&1
    nvme disconnect -n "$KNQN" > /dev/null 2>&1
fi

kill "$NODE_PID" 2> /dev/null
pass done
