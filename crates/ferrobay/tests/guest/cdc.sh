# Linux kernel host (nvme-cli 2.3, nvme-tcp) against `ferrobay up` through its central
# discovery controller only: discover, connect-all --persistent, I/O; a new volume
# announced by the discovery log change AEN (a uevent on the CDC's controller) and
# connected over the persistent discovery connection, as udev's nvmf-autoconnect rule
# would (`nvme connect-all --device=nvmeX`); the storage nodes' drives stay hidden.
# Env from the test: CDC_PORT (the CDC on the host's 127.0.0.1), VOL0, VOL1 (volume
# NQNs; the test creates VOL1 at host_sync "connected").

CDC=127.0.0.1
# The cluster publishes 127.0.0.1 addresses (one machine): reach them from here.
check host_loopback host_loopback_routed || exit 1

# --- one-shot discovery -------------------------------------------------------------
nvme discover -t tcp -a "$CDC" -s "$CDC_PORT" > /tmp/disc 2>&1 ||
    { capture disc cat /tmp/disc; fail discover; exit 1; }
sed 's/^/INFO discover| /' /tmp/disc
grep -q "subnqn:  $VOL0\$" /tmp/disc && pass discover_lists_vol0 || fail discover_lists_vol0
# Access control: the drives under the volumes (nqn....:nX:d0) serve the processor
# node only, so this host does not find them.
if grep -qE 'subnqn: +nqn\.2026-01\.io\.ferrobay:n[0-9]+:' /tmp/disc; then
    fail drives_hidden
else
    pass drives_hidden
fi
# The CDC's own entry (current discovery subsystem, duplicate information, explicit
# persistent connections) and one referral per node (n1..n3, p1).
cur=$(grep -c '^subtype: current discovery subsystem' /tmp/disc)
refs=$(grep -c '^subtype: discovery subsystem referral' /tmp/disc)
if [ "$cur" = 1 ] && [ "$refs" = 4 ] &&
    grep -q '^eflags:  explicit discovery connections, duplicate discovery information' /tmp/disc; then
    pass cdc_entry_and_referrals current="$cur" referrals="$refs"
else
    fail cdc_entry_and_referrals current="$cur" referrals="$refs"
fi

# --- connect-all, persistent ----------------------------------------------------------
uevent_log /tmp/uevents && UEVENTS=1 || { UEVENTS=0; info "no uevent listener: re-reading the log instead"; }
out=$(nvme connect-all -t tcp -a "$CDC" -s "$CDC_PORT" --persistent 2>&1); rc=$?
info "connect-all rc=$rc: $(echo "$out" | tr '\n' ' ')"
dev0=$(nvme_ns_dev "$VOL0" 30) && pass connect_all dev="$dev0" || { fail connect_all; dmesg_tail 30; exit 1; }
capture list-subsys nvme list-subsys
check vol0_io io_verify "$dev0" 1048576 196608 cdc.vol0
# The CDC's discovery controller stays (persistent), and says what it is.
cdc_ctrl=$(nvme_disc_ctrl "$CDC" "$CDC_PORT")
if [ -n "$cdc_ctrl" ] && [ "$(cat /sys/class/nvme/$cdc_ctrl/dctype 2>/dev/null)" = cdc ]; then
    pass persistent_cdc_dctype ctrl="$cdc_ctrl" kato="$(cat /sys/class/nvme/$cdc_ctrl/kato 2>/dev/null)"
else
    fail persistent_cdc_dctype ctrl="$cdc_ctrl" dctype="$(cat /sys/class/nvme/$cdc_ctrl/dctype 2>&1)"
    exit 1
fi

# --- a new volume -------------------------------------------------------------------
host_sync connected "ctrl=$cdc_ctrl" > /dev/null || exit 1
# The kernel turns the discovery log change event (type 2 notice, info F0h, log 70h)
# into a uevent NVME_AEN=0x70f002 on the discovery controller: udev's rule would now run
# nvme connect-all --device=nvmeX. Busybox has no udev: the uevent helper logged it.
if [ "$UEVENTS" = 1 ]; then
    i=0
    while ! grep "DEVNAME=$cdc_ctrl " /tmp/uevents | grep -q 'NVME_AEN=0x70f002'; do
        [ $i -ge 300 ] && break
        sleep 0.1; i=$((i + 1))
    done
    sed 's/^/INFO uevent| /' /tmp/uevents | grep -i nvme_aen
    if grep "DEVNAME=$cdc_ctrl " /tmp/uevents | grep -q 'NVME_AEN=0x70f002'; then
        pass aen_uevent ctrl="$cdc_ctrl" after_s="$((i / 10))"
    else
        fail aen_uevent ctrl="$cdc_ctrl"
    fi
else
    # Without uevents: re-read the log over the persistent connection until it changes.
    i=0
    until nvme discover -d "$cdc_ctrl" 2>/dev/null | grep -q "subnqn:  $VOL1\$"; do
        [ $i -ge 60 ] && break
        sleep 0.5; i=$((i + 1))
    done
    nvme discover -d "$cdc_ctrl" | grep -q "subnqn:  $VOL1\$" &&
        pass aen_uevent via=reread || fail aen_uevent via=reread
fi
out=$(nvme connect-all --device="$cdc_ctrl" --quiet 2>&1); rc=$?
info "connect-all --device=$cdc_ctrl rc=$rc: $(echo "$out" | tr '\n' ' ')"
dev1=$(nvme_ns_dev "$VOL1" 30) && pass vol1_connected dev="$dev1" || { fail vol1_connected; dmesg_tail 30; }
[ -n "$dev1" ] && check vol1_io io_verify "$dev1" 0 65536 cdc.vol1
# vol0 is untouched.
check vol0_recheck io_check "$dev0" 1048576 196608 cdc.vol0
capture list-subsys-after nvme list-subsys

out=$(nvme disconnect-all 2>&1); info "disconnect-all: $out"
if wait_path_gone "$dev0" 15 && wait_path_gone "${dev1:-/nonexistent}" 15; then
    pass disconnect_all
else
    fail disconnect_all
fi
