# The Linux kernel host with native NVMe multipath against a volume exported by
# two processor nodes (or, with one address, any single target), running a
# write-then-verify fio workload per scenario while the test injects a fault.
#
# Env from the test:
#   NQN        the volume's subsystem NQN
#   ADDRS      the processor nodes' addresses (one `nvme connect` each), PORT
#   SCENARIOS  names, in order; for each the test gets, over host_sync:
#                NAME-fault "paths=.."   fio runs: inject the fault, release
#                NAME-done  "rc=.. gap_ms=.." fio ended: check, restore, release
#   WORK_SECS  how long each scenario's write phase should last (sizes fio)
#   LEAD_SECS  seconds of I/O before the fault
#   REGION_MB  bytes of the device each scenario may use (one region each)
#   KATO_S     keep-alive timeout of each connection (nvme connect -k)
#   MIN_PATHS  paths that must be live before a scenario (default: all)
#   NEED_ANA   0: do not require one optimized path (a target without ANA)
# Records: PASS/FAIL per step, RESULT NAME_gap_ms=.. NAME_ios=.. per scenario.

kmsg_follow 'nvme|I/O error|blk_update' &
KMSG_PID=$!

# io_errors : kernel block-layer error lines so far.
io_errors() { dmesg | grep -cE 'I/O error|blk_update_request|Buffer I/O error|critical medium'; }

# paths : "ADDR:ctrl-state:ana-state ..." for every controller of NQN.
paths() {
    local c a st ana ns out=""
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
        a=$(sed -n 's/.*traddr=\([^,]*\).*/\1/p' "$c/address" 2>/dev/null)
        st=$(cat "$c/state" 2>/dev/null)
        ana=none
        for ns in "$c"/nvme*c*n1; do
            [ -e "$ns/ana_state" ] && ana=$(cat "$ns/ana_state")
        done
        out="$out $a:$st:$ana"
    done
    echo "${out# }"
}

# wait_paths N TIMEOUT_S : N controllers live and exactly one path optimized.
wait_paths() {
    local i=0 n=$(( $2 * 5 )) p live opt
    while :; do
        p=$(paths)
        live=$(echo "$p" | tr ' ' '\n' | grep -c ':live:')
        opt=$(echo "$p" | tr ' ' '\n' | grep -c ':live:optimized')
        [ "$live" -ge "$1" ] && { [ "$opt" = 1 ] || [ "${NEED_ANA:-1}" = 0 ]; } && return 0
        [ $i -ge $n ] && { echo "wait_paths: $p" >&2; return 1; }
        sleep 0.2; i=$((i + 1))
    done
}

# gap FILE... : "LONGEST_GAP_MS AT_MS IOS MAX_CLAT_MS" from fio completion logs
# (each line: ms since the job's start, latency in ns, ...).
gap() {
    cat "$@" 2>/dev/null | awk -F, '{ print $1 + 0, $2 + 0 }' | sort -n | awk '
        NR > 1 && $1 - p > g { g = $1 - p; at = p }
        $2 > m { m = $2 }
        { p = $1; n++ }
        END { printf "%d %d %d %d\n", g, at, n, m / 1000000 }'
}

# The kernel's nvme-tcp (6.1) may send a request from the submitting task's context;
# when that socket was reset (a processor node killed), tcp_sendpage raises SIGPIPE in
# the *submitter*: fio would die of it although the request is simply requeued on
# another path. fio runs with SIGPIPE ignored (inherited across exec) for that reason.
# fio_job NAME OFFSET SIZE [fio options...] : the workload (see harness.sh
# FIO_JOB_ARGS), completion latencies logged per I/O to /tmp/lat.NAME_clat.*.
fio_job() {
    local name=$1 off=$2 size=$3; shift 3
    # shellcheck disable=SC2086
    ( trap '' PIPE
      exec fio --name="$name" --filename="$DEV" --offset="$off" --size="$size" $FIO_JOB_ARGS \
        --write_lat_log="/tmp/lat.$name" --log_avg_msec=0 "$@" > "/tmp/fio.$name" 2>&1 )
}
# reverify OFFSET SIZE : re-read and check what fio_job wrote there (no latency log:
# fio 3.33 asserts in get_cur_log with --verify_only).
reverify() { ( trap '' PIPE; fio_verify "$DEV" "$1" "$2" --verify_only ); }

# ---------------------------------------------------------------- connect
set -- $ADDRS
for a in "$@"; do
    capture "connect-$a" nvme connect -t tcp -a "$a" -s "$PORT" -n "$NQN" -i 2 -l 120 -c 1 -k "${KATO_S:-5}" ||
        { dmesg_tail 30; fail "connect_$a"; exit 1; }
done
NPATHS=$#
MIN_PATHS=${MIN_PATHS:-$NPATHS}
DEV=$(nvme_ns_dev "$NQN") || { dmesg_tail 30; fail multipath_device; exit 1; }
head=${DEV#/dev/}
if wait_paths "$MIN_PATHS" 30; then
    pass multipath_paths dev="$DEV" paths="$(paths | tr ' ' ',')"
else
    capture list-subsys nvme list-subsys; dmesg_tail 30
    fail multipath_paths dev="$DEV" paths="$(paths | tr ' ' ',')"; exit 1
fi
nvme list-subsys "$DEV" > /tmp/subsys 2>&1
sed 's/^/INFO list-subsys| /' /tmp/subsys
if [ "$NPATHS" -ge 2 ] && [ "${NEED_ANA:-1}" = 1 ]; then
    # One subsystem, a controller per processor node: one optimized, the rest inaccessible.
    n_opt=$(grep -c 'live optimized' /tmp/subsys); n_ina=$(grep -c 'live inaccessible' /tmp/subsys)
    [ "$n_opt" = 1 ] && [ "$n_ina" = $((NPATHS - 1)) ] &&
        [ "$(ls /sys/class/nvme-subsystem | wc -l)" = 1 ] &&
        pass list_subsys_ana optimized="$n_opt" inaccessible="$n_ina" ||
        fail list_subsys_ana optimized="$n_opt" inaccessible="$n_ina"
fi
result multipath="$(cat /sys/module/nvme_core/parameters/multipath)" iopolicy="$(cat /sys/class/nvme-subsystem/*/iopolicy 2>/dev/null | head -n1)"
[ "$(ls -d /sys/block/"$head" 2>/dev/null)" ] && pass multipath_head dev="$DEV" || fail multipath_head dev="$DEV"

# --------------------------------------------------------------- calibrate
# Size the jobs so that each write phase lasts about WORK_SECS.
REGION=$(( REGION_MB << 20 ))
t0=$(now)
fio_job calib 0 $(( 16 << 20 )) --do_verify=0 || { sed 's/^/INFO fio| /' /tmp/fio.calib; fail calibrate; exit 1; }
secs=$(since "$t0")
kib_s=$(rate 16384 "$secs")
size=$(awk -v r="$kib_s" -v w="$WORK_SECS" -v max="$REGION" 'BEGIN {
    s = int(r * 1024 * w / 1048576) * 1048576
    if (s < 16777216) s = 16777216; if (s > max) s = max; printf "%d", s }')
pass calibrate secs="$secs" kib_s="$kib_s" job_bytes="$size"
result write_kib_s="$kib_s"

# ---------------------------------------------------------------- scenarios
i=1
for s in $SCENARIOS; do
    off=$(( i * REGION ))
    wait_paths "$MIN_PATHS" 90 || { fail "${s}_paths_before" paths="$(paths | tr ' ' ',')"; dmesg_tail 30; }
    e0=$(io_errors)
    t0=$(now)
    fio_job "$s" "$off" "$size" &
    pid=$!
    sleep "$LEAD_SECS"
    kill -0 "$pid" 2>/dev/null || fail "${s}_workload_too_short" secs="$(since "$t0")"
    host_sync "$s-fault" "paths=$(paths | tr ' ' ',')" > /dev/null
    # The fault happened before this (the test acts, then releases): ms since fio started.
    fault_ms=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%d", (b - a) * 1000 }')
    wait "$pid"; rc=$?
    secs=$(since "$t0")
    e1=$(io_errors)
    set -- $(gap /tmp/lat."$s"_clat.*.log)
    g=$1 at=$2 ios=$3 maxlat=$4
    if [ "$rc" = 0 ] && [ "$e1" = "$e0" ]; then
        pass "${s}_workload" secs="$secs" gap_ms="$g" ios="$ios"
    else
        sed 's/^/INFO fio| /' "/tmp/fio.$s"; dmesg_tail 40
        fail "${s}_workload" rc="$rc" io_errors=$((e1 - e0)) secs="$secs" gap_ms="$g"
    fi
    result "${s}_gap_ms=$g" "${s}_gap_at_ms=$at" "${s}_fault_at_ms=$fault_ms" "${s}_ios=$ios" "${s}_max_clat_ms=$maxlat" "${s}_secs=$secs"
    host_sync "$s-done" "rc=$rc gap_ms=$g gap_at_ms=$at fault_at_ms=$fault_ms ios=$ios max_clat_ms=$maxlat io_errors=$((e1 - e0)) secs=$secs paths=$(paths | tr ' ' ',')" > /dev/null
    i=$((i + 1))
done

# ------------------------------------------- everything written, read again
wait_paths "$MIN_PATHS" 90 || fail final_paths paths="$(paths | tr ' ' ',')"
host_sync final "paths=$(paths | tr ' ' ',')" > /dev/null
i=1
for s in $SCENARIOS; do
    check "${s}_reverify" reverify $(( i * REGION )) "$size"
    i=$((i + 1))
done
e=$(io_errors)
[ "$e" = 0 ] && pass no_io_errors || { dmesg_tail 40; fail no_io_errors count="$e"; }
out=$(nvme disconnect -n "$NQN" 2>&1); info "disconnect: $out"
echo "$out" | grep -q "disconnected $NPATHS" && pass disconnect || fail disconnect
kill "$KMSG_PID" 2>/dev/null
