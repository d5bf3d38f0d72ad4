# Linux kernel host (nvme-cli, nvme-tcp) against `ferrobay node`, one guest boot.
# Env from the test: PORT (NVMe/TCP), DPORT (discovery), NQN0 (file drive d0),
# NQN1 (file drive d1, used for namespace management).
A=$HOST_ADDR

# smart_field CTRL NAME : a counter from `nvme smart-log` ("host_write_commands",
# "data units written", ...: the label, lower case).
smart_field() {
    nvme smart-log "$1" 2>/dev/null | awk -F: -v k="$2" '
        { label = tolower($1); gsub(/[ \t]+$/, "", label) }
        label == k { v = $2; gsub(/^[ \t]+/, "", v); split(v, a, /[ (]/); print a[1]; exit }'
}

# --- discovery: on the discovery port and on the I/O listener -----------------
for p in "$DPORT" "$PORT"; do
    if nvme discover -t tcp -a "$A" -s "$p" > /tmp/disc 2>&1 &&
       grep -q "subnqn: *$NQN0" /tmp/disc && grep -q "subnqn: *$NQN1" /tmp/disc &&
       grep -q "trsvcid: *$PORT" /tmp/disc; then
        pass discover_port_$p entries=$(grep -c '^=====Discovery Log Entry' /tmp/disc)
    else
        capture disc cat /tmp/disc; fail discover_port_$p
    fi
done

# --- connect with header+data digests and 2 I/O queues -------------------------
dev=$(nvme_connect_tcp "$A" "$PORT" "$NQN0" -g -G -i 2 -l 60 -c 1) || { dmesg_tail; fail connect_digests; exit 1; }
pass connect_digests dev=$dev
ctrl=$(nvme_ctrl_dev "$NQN0"); sys=/sys/class/nvme/${ctrl#/dev/}
qc=$(cat "$sys/queue_count")
[ "$qc" = 3 ] && pass io_queues_2 || fail io_queues_2 queue_count=$qc

# --- identify ---------------------------------------------------------------
nvme id-ctrl "$ctrl" > /tmp/idc 2>&1 || fail id_ctrl_cmd
capture id-ctrl grep -E '^(vid|sn|mn|fr|mdts|cntlid|ver|kas|sqes|cqes|maxcmd|nn|oncs|vwc|sgls|ioccsz|iorcsz|icdoff|cntrltype|subnqn|oacs) ' /tmp/idc
cntlid=$(cat "$sys/cntlid")
if grep -q "^subnqn *: $NQN0" /tmp/idc && grep -Eq "^mdts *: [1-9]" /tmp/idc &&
   [ "$(printf %d "$(sed -n 's/^cntlid *: *//p' /tmp/idc)")" = "$cntlid" ]; then
    pass id_ctrl cntlid=$cntlid
else
    fail id_ctrl
fi
nvme id-ns "$dev" > /tmp/idn 2>&1 || fail id_ns_cmd
capture id-ns grep -E '^(nsze|ncap|nuse|nlbaf|flbas|nmic|rescap|noiob|nguid|eui64|lbaf)' /tmp/idn
nsze=$(printf %d "$(sed -n 's/^nsze *: *//p' /tmp/idn)")
[ $((nsze * 512)) = "$(dev_size "$dev")" ] && pass id_ns nsze=$nsze || fail id_ns nsze=$nsze size=$(dev_size "$dev")

# --- O_DIRECT write + read-back, 512 B .. 1 MiB at unaligned offsets -----------
w0=$(smart_field "$ctrl" host_write_commands)
io_matrix "$dev" 0 dg || true
w1=$(smart_field "$ctrl" host_write_commands)
du=$(smart_field "$ctrl" "data units written")
if [ -n "$w1" ] && [ "${w1:-0}" -gt "${w0:-0}" ] && [ "${du:-0}" -gt 0 ]; then
    pass smart_log_moved host_write_commands=$w0..$w1 data_units_written=$du
else
    capture smart nvme smart-log "$ctrl"; fail smart_log_moved before=$w0 after=$w1 du=$du
fi

# --- reservations ------------------------------------------------------------
check resv_register nvme resv-register "$dev" -n 1 --nrkey=0xfeed --rrega=0
check resv_acquire nvme resv-acquire "$dev" -n 1 --crkey=0xfeed --rtype=1 --racqa=0
nvme resv-report "$dev" -n 1 --numd=1023 --eds > /tmp/rr 2>&1
capture resv-report cat /tmp/rr
if grep -Eiq 'rtype *: *1' /tmp/rr && grep -Eiq 'regctl *: *1' /tmp/rr && grep -Eiq 'rkey *: *(0x)?0*feed' /tmp/rr; then
    pass resv_report
else
    fail resv_report
fi
check resv_release nvme resv-release "$dev" -n 1 --crkey=0xfeed --rtype=1 --rrela=0
check resv_unregister nvme resv-register "$dev" -n 1 --crkey=0xfeed --rrega=1

# --- namespace management on d1: split the drive into two namespaces ----------
dev1=$(nvme_connect_tcp "$A" "$PORT" "$NQN1" -i 1 -l 60 -c 1) || { fail connect_d1; exit 1; }
ctrl1=$(nvme_ctrl_dev "$NQN1"); cntlid1=$(cat /sys/class/nvme/${ctrl1#/dev/}/cntlid)
check delete_ns nvme delete-ns "$ctrl1" -n 1
wait_path_gone "$dev1" 15 && pass ns1_gone || fail ns1_gone dev=$dev1
for want in 1 2; do
    out=$(nvme create-ns "$ctrl1" --nsze=65536 --ncap=65536 --flbas=0 2>&1); rc=$?
    info "create-ns: $out"
    nsid=$(echo "$out" | sed -n 's/.*nsid: *\([0-9]*\).*/\1/p')
    [ $rc = 0 ] && [ -n "$nsid" ] && pass create_ns_$want nsid=$nsid || { fail create_ns_$want; continue; }
    check attach_ns_$want nvme attach-ns "$ctrl1" -n "$nsid" -c "$cntlid1"
    newdev=${ctrl1}n$nsid
    if wait_path "$newdev" 20; then
        pass new_blockdev_$want dev=$newdev size=$(dev_size "$newdev")
        [ "$(dev_size "$newdev")" = $((65536 * 512)) ] && pass new_ns_size_$want || fail new_ns_size_$want
        check new_ns_io_$want io_verify "$newdev" 4096 65536 newns$want
    else
        capture ls ls /dev; dmesg_tail; fail new_blockdev_$want dev=$newdev
    fi
done
check disconnect_d1 nvme disconnect -n "$NQN1"

# --- node restart while connected: the kernel reconnects, data intact ---------
unsafe0=$(smart_field "$ctrl" unsafe_shutdowns)
host_sync restart-node "connected"
wait_ctrl_state "$NQN0" live 60 && pass reconnected_after_restart || { dmesg_tail; fail reconnected_after_restart state=$(nvme_ctrl_state "$NQN0"); }
io_matrix_check "$dev" 0 dg || true
unsafe1=$(smart_field "$ctrl" unsafe_shutdowns)
[ "${unsafe1:-0}" -gt "${unsafe0:-0}" ] && pass unsafe_shutdown_counted before=$unsafe0 after=$unsafe1 ||
    fail unsafe_shutdown_counted before=$unsafe0 after=$unsafe1

out=$(nvme disconnect -n "$NQN0" 2>&1); info "disconnect: $out"
echo "$out" | grep -q 'disconnected 1' && pass disconnect_digests || fail disconnect_digests

# --- connect without digests, 1 I/O queue; data still there; disconnect -------
dev=$(nvme_connect_tcp "$A" "$PORT" "$NQN0" -i 1 -l 60 -c 1) || { fail connect_plain; exit 1; }
ctrl=$(nvme_ctrl_dev "$NQN0")
qc=$(cat /sys/class/nvme/${ctrl#/dev/}/queue_count)
[ "$qc" = 2 ] && pass io_queues_1 || fail io_queues_1 queue_count=$qc
io_matrix_check "$dev" 0 dg || true
io_matrix "$dev" $((64 << 20)) plain || true
out=$(nvme disconnect -n "$NQN0" 2>&1); info "disconnect: $out"
echo "$out" | grep -q 'disconnected 1' && pass disconnect || fail disconnect
