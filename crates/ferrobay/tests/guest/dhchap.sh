# DH-HMAC-CHAP from the Linux 6.12 host (trixie guest, nvme-cli 2.13) against a
# storage node: driven by crates/ferrobay/tests/linux_dhchap.rs.
# Env: PORT NQN; HOST_A with KEY_A (its secret on the node, from ferrobay
# gen-dhchap-key) and KEY_A2 (the secret the test rotates to); HOST_B (its secret
# is generated here by nvme gen-dhchap-key and handed to the test).

# auth_results NAME : the hash and DH group of the last admin-queue authentication.
auth_results() {
    local l
    l=$(dmesg | grep 'qid 0: authenticated with hash' | tail -n 1)
    result "$1_hash=$(echo "$l" | sed -n 's/.*with hash \([^ ]*\) dhgroup.*/\1/p')" \
           "$1_dhgroup=$(echo "$l" | sed -n 's/.*dhgroup \([^ ]*\).*/\1/p')"
}
# auth_io NAME HOSTNQN nvme-connect-options... : connect as HOSTNQN, write and read
# back data with O_DIRECT (admin and I/O queues authenticated), disconnect.
auth_io() {
    local name=$1 hnqn=$2 dev; shift 2
    dev=$(nvme_connect_tcp "$HOST_ADDR" "$PORT" "$NQN" --hostnqn="$hnqn" --hostid="${hnqn##*:}" "$@") ||
        { fail "${name}_connect"; return 1; }
    pass "${name}_connect" dev="$dev"
    auth_results "$name"
    check "${name}_io" io_verify "$dev" 1048576 1048576 "$name"
    check "${name}_io_small" io_verify "$dev" 3584 4608 "${name}_small"
    LAST_DEV=$dev
}
auth_disconnect() {
    check "${1}_disconnect" nvme disconnect -n "$NQN"
    wait_path_gone "$LAST_DEV" 20 || fail "${1}_gone"
}
# refused NAME HOSTNQN nvme-connect-options... : the connect must fail; prints
# PASS NAME secs=S (how long the refusal took).
refused() {
    local name=$1 hnqn=$2 t; shift 2
    t=$(now)
    if capture "$name" nvme connect -t tcp -a "$HOST_ADDR" -s "$PORT" -n "$NQN" \
            --hostnqn="$hnqn" --hostid="${hnqn##*:}" "$@"; then
        fail "$name" reason=connected
        nvme disconnect -n "$NQN" >/dev/null 2>&1
        return 1
    fi
    pass "$name" secs="$(since "$t")"
    dmesg_tail 6 'nvme|auth'
}

# 1. Host A must authenticate: without a secret it is refused.
refused a_no_secret "$HOST_A"
# 2. With its secret: connect, I/O; re-authentication (the kernel redoes the
#    exchange on every queue when the secret is written again) keeps I/O going.
auth_io a "$HOST_A" --dhchap-secret="$KEY_A" || exit 1
ctrl=$(nvme_ctrl_dev "$NQN")
before=$(dmesg | grep -c 'qid 0: authenticated with hash')
echo "$KEY_A" > "/sys/class/nvme/${ctrl#/dev/}/dhchap_secret"
i=0
while [ "$(dmesg | grep -c 'qid 0: authenticated with hash')" -le "$before" ] && [ $i -lt 100 ]; do
    sleep 0.2; i=$((i + 1))
done
if [ "$(dmesg | grep -c 'qid 0: authenticated with hash')" -gt "$before" ]; then
    pass a_reauthenticated
else
    fail a_reauthenticated; dmesg_tail 10 'nvme|auth'
fi
check a_io_after_reauth io_check "$LAST_DEV" 1048576 1048576 a
# The I/O queues were re-authenticated after the admin queue (the kernel logs only
# their failures).
sleep 1
check a_reauth_io_queues sh -c '! dmesg | grep -E "qid [1-9][0-9]*: authentication failed"'
auth_disconnect a
# 3. The node's secret for A is rotated: the old one is refused now, the new works.
host_sync rotate >/dev/null || exit 1
refused a_old_secret_refused "$HOST_A" --dhchap-secret="$KEY_A"
auth_io a2 "$HOST_A" --dhchap-secret="$KEY_A2" && auth_disconnect a2
# 4. Host B: its key made here by nvme-cli; the test configures the node with it and
#    a controller secret (returned as the payload), and B authenticates the
#    controller too (bidirectional).
key_b=$(nvme gen-dhchap-key --hmac=2 --nqn="$HOST_B") || { fail b_gen_key; exit 1; }
ctrl_b=$(host_sync key-b "$key_b") || exit 1
auth_io b "$HOST_B" --dhchap-secret="$key_b" --dhchap-ctrl-secret="$ctrl_b" || exit 1
if dmesg | grep -q 'qid 0: controller authenticated'; then pass b_controller_authenticated
else fail b_controller_authenticated; fi
auth_disconnect b
# 5. A wrong controller secret: the host refuses the controller (Failure2).
wrong_ctrl=$(nvme gen-dhchap-key --hmac=1 --nqn="$HOST_B")
refused b_wrong_ctrl_refused "$HOST_B" --dhchap-secret="$key_b" --dhchap-ctrl-secret="$wrong_ctrl"
# The node still serves B afterwards.
auth_io b_again "$HOST_B" --dhchap-secret="$key_b" --dhchap-ctrl-secret="$ctrl_b" && auth_disconnect b_again
# 6. A volume exported by a processor node (which itself authenticated to the
#    storage node's drives): host C must authenticate to it (ferrobay volume auth set).
PORT=$PPORT NQN=$VNQN
refused c_no_secret "$HOST_C"
auth_io c "$HOST_C" --dhchap-secret="$KEY_C" && auth_disconnect c
refused c_wrong_secret "$HOST_C" --dhchap-secret="$KEY_A"
