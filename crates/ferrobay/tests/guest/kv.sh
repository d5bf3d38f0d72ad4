# Linux kernel host (nvme-cli 2.3, nvme-tcp) against `ferrobay node` with a Key Value
# namespace beside an NVM one: the kernel identifies the KV namespace and exposes it as a
# generic char device only; nvme io-passthru stores, retrieves, checks, lists and
# deletes values; bad input gets its status and the connection keeps working; values
# survive the node being killed (the test restarts it at host_sync restart-node);
# Namespace Management creates another KV namespace (nvme create-ns --csi 1).
# Env: PORT (NVMe/TCP), NQN (subsystem of d0: NVM namespace 1, KV namespace 2 with values
# up to 1 MiB), MAX_VALUE (1048576).
A=$HOST_ADDR
KV_NSID=2

# kv DEV OPCODE NSID KEY CDW11_HIGH CDW10 [io-passthru args...]: a KV command with KEY in
# CDW2-3 and CDW14-15 (KV 1.0 "Key", little-endian words) and KL in CDW11 bits 7:0;
# CDW11_HIGH is OR-ed into CDW11 (store option << 8, or a bad key length).
kv() {
    _dev=$1 _op=$2 _ns=$3 _key=$4 _hi=$5 _cdw10=$6; shift 6
    # shellcheck disable=SC2046
    set -- $({ printf '%s' "$_key"; head -c 16 /dev/zero; } | head -c 16 | od -An -tx4 -v) "$@"
    _w2=$1 _w3=$2 _w14=$3 _w15=$4; shift 4
    nvme io-passthru "$_dev" --opcode="$_op" --namespace-id="$_ns" \
        --cdw2="0x$_w2" --cdw3="0x$_w3" --cdw14="0x$_w14" --cdw15="0x$_w15" \
        --cdw10="$_cdw10" --cdw11=$(( ${#_key} | _hi )) "$@"
}
# kv_store DEV NSID KEY FILE [OPTION]
kv_store() {
    _n=$(stat -c %s "$4")
    kv "$1" 0x01 "$2" "$3" $(( ${5:-0} << 8 )) "$_n" --data-len="$_n" --write --input-file="$4"
}
# kv_retrieve DEV NSID KEY HBS OUT : the host buffer to OUT, the status line to OUT.err.
kv_retrieve() {
    kv "$1" 0x02 "$2" "$3" 0 "$4" --data-len="$4" --read --raw-binary > "$5" 2> "$5.err"
}
# kv_result FILE.err : the completion's DW0 nvme-cli printed (hex), e.g. 00100000.
kv_result() { sed -n 's/.*result[: ]*\(0x\)\{0,1\}\([0-9a-fA-F]\{1,8\}\).*/\2/p' "$1" | tail -n1; }
# status_of CMD... : run CMD, print its exit status and output (the NVMe status text).
status_of() { "$@" 2>&1; echo "rc=$?"; }
# expect_status NAME CODE CMD... : CMD must fail with NVMe status CODE, as nvme-cli
# prints it: SCT/SC with DNR (bit 14), e.g. 0x4087 for KV Key Does Not Exist.
expect_status() {
    _name=$1 _code=$2; shift 2
    _out=$(status_of "$@")
    case $_out in
        *"rc=0") info "$_name: $_out"; fail "$_name" want="$_code" got=success ;;
        *"($_code)"*) pass "$_name" status="$_code" ;;
        *) info "$_name: $_out"; fail "$_name" want="$_code" ;;
    esac
}
# pattern FILE BYTES : random bytes (kept in FILE to compare with).
pattern() { head -c "$2" /dev/urandom > "$1"; }
# same A B LEN : the first LEN bytes of A and B are equal.
same() { cmp -n "$3" "$1" "$2" > /dev/null; }

# --- connect: the NVM namespace as a block device, the KV one as /dev/ngXnY only ------
check connect nvme connect -t tcp -a "$A" -s "$PORT" -n "$NQN" -l 60 -c 1 || { dmesg_tail; exit 1; }
ctrl=$(nvme_ctrl_dev "$NQN") || { fail ctrl_dev; exit 1; }
cntlid=$(cat "/sys/class/nvme/${ctrl#/dev/}/cntlid")
nvm=$(nvme_ns_dev "$NQN") || { dmesg_tail; fail nvm_blockdev; exit 1; }
pass nvm_blockdev dev="$nvm"
ng=
i=0
while [ $i -lt 100 ] && [ -z "$ng" ]; do
    for d in /dev/ng*n$KV_NSID; do [ -c "$d" ] && ng=$d; done
    [ -n "$ng" ] || { sleep 0.2; i=$((i + 1)); }
done
[ -n "$ng" ] && pass kv_chardev dev="$ng" || { capture ls ls -l /dev; dmesg_tail; fail kv_chardev; exit 1; }
blk=$(echo "$nvm" | sed "s/n[0-9]*\$/n$KV_NSID/")
[ ! -e "$blk" ] && pass kv_no_blockdev || fail kv_no_blockdev dev="$blk"
# Linux 6.1 sets up namespaces of other command sets as generic devices only.
dmesg | grep -q "nsid $KV_NSID not supported (csi 1)" && pass kernel_identifies_kv ||
    { dmesg_tail; fail kernel_identifies_kv; }
capture list nvme list -v

# --- identify: command set, descriptor, KV format --------------------------------------
nvme ns-descs "$ctrl" -n $KV_NSID > /tmp/descs 2>&1; capture ns-descs cat /tmp/descs
grep -Eiq 'csi *: *(0x)?0*1$' /tmp/descs && pass ns_descs_csi_kv || fail ns_descs_csi_kv
nvme cmdset-ind-id-ns "$ctrl" -n $KV_NSID > /tmp/indep 2>&1; capture cmdset-ind-id-ns cat /tmp/indep
grep -Eiq 'nstat *: *(0x)?1' /tmp/indep && pass cs_indep_ready || fail cs_indep_ready
nvme id-iocs "$ctrl" > /tmp/iocs 2>&1; capture id-iocs head -n 3 /tmp/iocs
grep -Eiq 'combination\[0\] *: *(0x)?3$' /tmp/iocs && pass id_iocs_nvm_kv || fail id_iocs_nvm_kv
# KV Identify Namespace (CNS 05h, CSI 01h): KVKML at 72, KVVML at 76.
nvme admin-passthru "$ctrl" --opcode=0x06 --namespace-id=$KV_NSID --cdw10=5 \
    --cdw11=0x01000000 --data-len=4096 --read --raw-binary > /tmp/idkv 2>/dev/null
kvkml=$(od -An -tu2 -j72 -N2 /tmp/idkv | tr -d ' ')
kvvml=$(od -An -tu4 -j76 -N4 /tmp/idkv | tr -d ' ')
nsze=$(od -An -tu8 -j0 -N8 /tmp/idkv | tr -d ' ')
[ "$kvkml" = 16 ] && [ "$kvvml" = "$MAX_VALUE" ] && [ "${nsze:-0}" -gt 0 ] &&
    pass id_ns_kv kvkml="$kvkml" kvvml="$kvvml" nsze="$nsze" ||
    fail id_ns_kv kvkml="$kvkml" kvvml="$kvvml" nsze="$nsze"

# --- store, retrieve (bytes compared), exist, list, delete -------------------------------
pattern /tmp/v1 3000
pattern /tmp/vbig "$MAX_VALUE"
check store_small kv_store "$ng" $KV_NSID kvkey001 /tmp/v1
check store_1mib kv_store "$ng" $KV_NSID "bucket/object-1" /tmp/vbig
if kv_retrieve "$ng" $KV_NSID kvkey001 3000 /tmp/r1 && same /tmp/v1 /tmp/r1 3000; then
    pass retrieve_small result="$(kv_result /tmp/r1.err)"
else
    capture retrieve cat /tmp/r1.err; fail retrieve_small
fi
if kv_retrieve "$ng" $KV_NSID "bucket/object-1" "$MAX_VALUE" /tmp/rbig && same /tmp/vbig /tmp/rbig "$MAX_VALUE"; then
    pass retrieve_1mib
else
    capture retrieve cat /tmp/rbig.err; fail retrieve_1mib
fi
# A buffer smaller than the value: its first bytes, and DW0 = the whole size.
if kv_retrieve "$ng" $KV_NSID "bucket/object-1" 4096 /tmp/rpart && same /tmp/vbig /tmp/rpart 4096; then
    r=$(kv_result /tmp/rpart.err)
    [ "$((0x${r:-0}))" = "$MAX_VALUE" ] && pass retrieve_short_buffer dw0="$r" ||
        { capture retrieve cat /tmp/rpart.err; fail retrieve_short_buffer dw0="$r"; }
else
    capture retrieve cat /tmp/rpart.err; fail retrieve_short_buffer
fi
check exist kv "$ng" 0x14 $KV_NSID kvkey001 0 0
kv "$ng" 0x06 $KV_NSID "" 0 4096 --data-len=4096 --read --raw-binary > /tmp/list 2>/dev/null
nrk=$(od -An -tu4 -N4 /tmp/list | tr -d ' ')
[ "$nrk" = 2 ] && pass list nrk="$nrk" || fail list nrk="$nrk"
check delete kv "$ng" 0x10 $KV_NSID kvkey001 0 0
expect_status exist_after_delete 0x4087 kv "$ng" 0x14 $KV_NSID kvkey001 0 0
expect_status retrieve_after_delete 0x4087 kv "$ng" 0x02 $KV_NSID kvkey001 0 64 --data-len=64 --read
check delete_absent_is_ok kv "$ng" 0x10 $KV_NSID kvkey001 0 0

# --- bad input: the status the specification gives, and the connection keeps working ---
# Key length 17 (> 16): Invalid Field; key length 0: Invalid Key Size.
expect_status key_length_17 0x4002 kv "$ng" 0x14 $KV_NSID 0123456789abcdef 0x1 0
expect_status key_length_0 0x4086 nvme io-passthru "$ng" --opcode=0x14 --namespace-id=$KV_NSID --cdw11=0
head -c 16 /tmp/v1 > /tmp/v16
expect_status store_create_only_exists 0x4089 kv_store "$ng" $KV_NSID "bucket/object-1" /tmp/v16 2
expect_status store_overwrite_only_absent 0x4087 kv_store "$ng" $KV_NSID nokey /tmp/v16 1
pattern /tmp/vover $((MAX_VALUE + 4096))
expect_status value_above_max 0x4085 kv_store "$ng" $KV_NSID toolarge /tmp/vover
expect_status list_buffer_too_small 0x4002 kv "$ng" 0x06 $KV_NSID "" 0 0
# NVM Read on the KV namespace is a Retrieve with KL 0.
expect_status nvm_read_on_kv 0x4086 nvme io-passthru "$ng" --opcode=0x02 --namespace-id=$KV_NSID \
    --cdw12=7 --data-len=4096 --read
check still_works kv_store "$ng" $KV_NSID after-bad /tmp/v1
kv_retrieve "$ng" $KV_NSID after-bad 3000 /tmp/r2 && same /tmp/v1 /tmp/r2 3000 &&
    pass still_reads || fail still_reads
# The NVM namespace beside it still reads and writes (O_DIRECT, bytes compared).
check nvm_io io_verify "$nvm" 4096 65536 nvm1

# --- the node is killed and restarted: the values come back from its log --------------
host_sync restart-node "stored"
wait_ctrl_state "$NQN" live 60 && pass reconnected || { dmesg_tail; fail reconnected; }
if kv_retrieve "$ng" $KV_NSID "bucket/object-1" "$MAX_VALUE" /tmp/rbig2 && same /tmp/vbig /tmp/rbig2 "$MAX_VALUE"; then
    pass recovered_after_kill
else
    capture retrieve cat /tmp/rbig2.err; fail recovered_after_kill
fi
kv_retrieve "$ng" $KV_NSID after-bad 3000 /tmp/r3 && same /tmp/v1 /tmp/r3 3000 &&
    pass recovered_small || fail recovered_small
expect_status deleted_stays_deleted 0x4087 kv "$ng" 0x14 $KV_NSID kvkey001 0 0

# --- Namespace Management: a KV namespace from the host ---------------------------------
out=$(nvme create-ns "$ctrl" --csi=1 --nsze=$((64 << 20)) --ncap=$((64 << 20)) --flbas=0 2>&1); rc=$?
info "create-ns: $out"
nsid=$(echo "$out" | sed -n 's/.*nsid: *\([0-9]*\).*/\1/p')
if [ $rc = 0 ] && [ -n "$nsid" ]; then pass create_ns_kv nsid="$nsid"; else fail create_ns_kv; fi
if [ -n "$nsid" ]; then
    check attach_ns_kv nvme attach-ns "$ctrl" -n "$nsid" -c "$cntlid"
    ng3=
    i=0
    while [ $i -lt 100 ] && [ -z "$ng3" ]; do
        for d in /dev/ng*n"$nsid"; do [ -c "$d" ] && ng3=$d; done
        [ -n "$ng3" ] || { sleep 0.2; i=$((i + 1)); }
    done
    [ -n "$ng3" ] && pass new_kv_chardev dev="$ng3" || { dmesg_tail; fail new_kv_chardev; }
    if [ -n "$ng3" ]; then
        check new_kv_store kv_store "$ng3" "$nsid" fresh /tmp/v1
        kv_retrieve "$ng3" "$nsid" fresh 3000 /tmp/r4 && same /tmp/v1 /tmp/r4 3000 &&
            pass new_kv_retrieve || fail new_kv_retrieve
    fi
    check delete_ns_kv nvme delete-ns "$ctrl" -n "$nsid"
    [ -z "$ng3" ] || { wait_path_gone "$ng3" 15 && pass new_kv_gone || fail new_kv_gone; }
fi

out=$(nvme disconnect -n "$NQN" 2>&1); info "disconnect: $out"
echo "$out" | grep -q 'disconnected 1' && pass disconnect || fail disconnect
