# NVMe/TCP over TLS from the Linux 6.12 host (trixie guest: nvme-cli 2.13 with libnvme
# 1.13, tlshd from ktls-utils 1.0.0) against a storage node's TLS listener: driven by
# crates/ferrobay/tests/linux_tls.rs.
# Env: TLS_PORT PLAIN_PORT NQN; HOST_A KEY_A ID_A (SHA-256 key, identity version 0),
# HOST_C KEY_C ID_C (SHA-256, version 1), HOST_B KEY_B ID_B (SHA-384, version 0),
# HOST_W KEY_W (a key the node does not have for W). ID_* is the identity the node
# derives, which nvme-cli must insert the key under.

# 1. tlshd, the user-space handshake agent the kernel hands the TLS handshake to (over
#    the handshake netlink family): it must run, and see the kernel's .nvme keyring.
# loglevel 2 logs each handshake's identity and the keyring link.
sed -i 's/^#\{0,1\}keyrings=.*/keyrings=.nvme/; s/^loglevel=.*/loglevel=2/' /etc/tlshd.conf
tlshd -s > /tmp/tlshd.log 2>&1 &
sleep 0.5
check tlshd_running kill -0 $!

# 2. The derived TLS PSKs into .nvme: nvme check-tls-key --insert (what nvme connect
#    --tls then finds by identity).
# insert NAME KEY HOSTNQN VERSION EXPECTED_IDENTITY
insert() {
    local out serial desc
    out=$(nvme check-tls-key --keydata="$2" --hostnqn="$3" --subsysnqn="$NQN" --identity="$4" --insert 2>&1) ||
        { fail "${1}_insert" out="$(echo "$out" | tr ' \n' '_ ')"; return 1; }
    serial=$(echo "$out" | sed -n 's/^Inserted TLS key \([0-9a-f]*\)$/\1/p')
    desc=$(grep "^$serial " /proc/keys | sed -n 's/.* psk *\(.*\): [0-9]*$/\1/p')
    if [ -n "$serial" ] && [ "$desc" = "$5" ]; then
        pass "${1}_insert" serial="$serial"
    else
        fail "${1}_insert" serial="$serial"; info "${1}| keyring has '$desc', node derives '$5'"
        return 1
    fi
}
insert a "$KEY_A" "$HOST_A" 0 "$ID_A"
insert c "$KEY_C" "$HOST_C" 1 "$ID_C"
insert b "$KEY_B" "$HOST_B" 0 "$ID_B"
insert w "$KEY_W" "$HOST_W" 0 "NVMe0R01 $HOST_W $NQN"

# tls_io NAME HOSTNQN : connect with --tls, write and read back data with O_DIRECT,
# disconnect.
tls_io() {
    local name=$1 hnqn=$2 dev ctrl t
    t=$(now)
    dev=$(nvme_connect_tcp "$HOST_ADDR" "$TLS_PORT" "$NQN" --hostnqn="$hnqn" --hostid="${hnqn##*:}" --tls) ||
        { fail "${name}_connect"; return 1; }
    ctrl=$(nvme_ctrl_dev "$NQN")
    pass "${name}_connect" dev="$dev" secs="$(since "$t")" \
        tls_key="$(cat "/sys/class/nvme/${ctrl#/dev/}/tls_key" 2>/dev/null)" \
        queues="$(cat "/sys/class/nvme/${ctrl#/dev/}/queue_count" 2>/dev/null)"
    check "${name}_io" io_verify "$dev" 1048576 1048576 "$name"
    check "${name}_io_small" io_verify "$dev" 3584 4608 "${name}_small"
    check "${name}_disconnect" nvme disconnect -n "$NQN"
    wait_path_gone "$dev" 20 || fail "${name}_gone"
}
# refused NAME HOSTNQN PORT nvme-connect-options... : the connect must fail.
refused() {
    local name=$1 hnqn=$2 port=$3 t; shift 3
    t=$(now)
    if capture "$name" nvme connect -t tcp -a "$HOST_ADDR" -s "$port" -n "$NQN" \
            --hostnqn="$hnqn" --hostid="${hnqn##*:}" "$@"; then
        fail "$name" reason=connected
        nvme disconnect -n "$NQN" >/dev/null 2>&1
        return 1
    fi
    pass "$name" secs="$(since "$t")"
    dmesg_tail 3 'nvme|tls'
}

# 3. SHA-256 keys, identity versions 0 and 1: TLS, I/O.
tls_io a "$HOST_A"
check tlshd_keyring grep -q "Keyring '.nvme' linked" /tmp/tlshd.log
tls_io c "$HOST_C"
# 4. A without TLS on the plain listener: refused (the node requires TLS for A).
refused a_plain_refused "$HOST_A" "$PLAIN_PORT"
# 5. The wrong key: the node's binder check fails, the host gets no controller.
refused w_wrong_key_refused "$HOST_W" "$TLS_PORT" --tls
# 6. A SHA-384 key: tlshd 1.0.0 computes the binder with SHA-256 (ktls-utils fixed
#    it in 1.3.0), so the node refuses it; with a fixed tlshd it connects.
if capture b_try nvme connect -t tcp -a "$HOST_ADDR" -s "$TLS_PORT" -n "$NQN" \
        --hostnqn="$HOST_B" --hostid="${HOST_B##*:}" --tls; then
    dev=$(nvme_ns_dev "$NQN") && pass b_connect dev="$dev" || fail b_connect
    check b_io io_verify "$dev" 1048576 1048576 b
    nvme disconnect -n "$NQN" >/dev/null
else
    pass b_refused
fi
# 7. A still works after the refusals.
tls_io a_again "$HOST_A"
# 8. nvme connect-all through the node's discovery controller on the plain port: the
#    TLS listener's entry (TREQ required, TSAS TLS 1.3) makes nvme-cli connect with
#    TLS by itself, no --tls given. The node publishes 127.0.0.1: reach the host's.
if check host_loopback host_loopback_routed; then
    t=$(now)
    out=$(nvme connect-all -t tcp -a 127.0.0.1 -s "$PLAIN_PORT" \
        --hostnqn="$HOST_A" --hostid="${HOST_A##*:}" 2>&1); rc=$?
    info "connect-all rc=$rc: $(echo "$out" | tr '\n' ' ')"
    if dev=$(nvme_ns_dev "$NQN" 30); then
        ctrl=$(nvme_ctrl_dev "$NQN")
        sys=/sys/class/nvme/${ctrl#/dev/}
        key=$(cat "$sys/tls_key" 2>/dev/null)
        if [ -n "$key" ] && grep -q "trsvcid=$TLS_PORT" "$sys/address"; then
            pass connect_all_tls dev="$dev" secs="$(since "$t")" tls_key="$key" \
                queues="$(cat "$sys/queue_count" 2>/dev/null)"
        else
            fail connect_all_tls address="$(cat "$sys/address" 2>&1 | tr ' ,' '__')" tls_key="$key"
        fi
        check connect_all_io io_verify "$dev" 1048576 1048576 connect_all
        nvme disconnect -n "$NQN" >/dev/null
    else
        fail connect_all_tls
        dmesg_tail 20 'nvme|tls'
    fi
fi
dmesg_tail 12 'nvme|tls'
result "tls_handshakes_ok=$(grep -c 'was successful' /tmp/tlshd.log)" \
       "tls_handshakes_failed=$(grep -c 'failed' /tmp/tlshd.log)"
sed 's/^/INFO tlshd| /' /tmp/tlshd.log | grep -vE 'priority string|Built from'
