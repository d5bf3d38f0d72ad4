# Linux kernel host (nvme-cli, nvme-tcp) against `ferrobay up`: connect to the sample
# volume with the printed `nvme connect` line, O_DIRECT writes read back at a few offsets
# and sizes, the path live and ANA optimized, disconnect.
# Env from the test: PORT (the processor node's NVMe/TCP port on the host's 127.0.0.1),
# NQN (the volume's subsystem, as printed).

dev=$(nvme_connect_tcp "$HOST_ADDR" "$PORT" "$NQN" -i 2 -l 30 -c 1) || { fail connect; exit 1; }
size=$(dev_size "$dev"); lbs=$(blockdev --getss "$dev")
pass connect dev="$dev" size="$size" lbs="$lbs"
[ "$size" -ge $((64 << 20)) ] && pass volume_size || fail volume_size size="$size"

# OFFSET SIZE, multiples of 4 KiB (the volume's block size), RAID-5 over three members
# with 64 KiB stripe units (128 KiB of data per row): one block at the start, across a
# stripe-unit boundary, one and a half rows from an odd block, 1 MiB across several
# rows, and the last 64 KiB of the volume.
CASES="0 4096
61440 8192
1052672 196608
5230592 1048576
$((size - 65536)) 65536"
i=0
while read -r off len; do
    check "io_${len}_at_${off}" io_verify "$dev" "$off" "$len" "up.$i"
    i=$((i + 1))
done <<EOF
$CASES
EOF
# Every pattern is still where it was written (no write landed on another's blocks).
i=0
while read -r off len; do
    check "recheck_${len}_at_${off}" io_check "$dev" "$off" "$len" "up.$i"
    i=$((i + 1))
done <<EOF
$CASES
EOF
# A region nobody wrote reads back as zeros (the volume was zeroed when created).
nz=$(dd if="$dev" bs=65536 count=4 skip=$((32 << 20)) iflag=skip_bytes,direct 2>/dev/null |
     tr -d '\000' | wc -c)
[ "$nz" = 0 ] && pass unwritten_reads_zeros || fail unwritten_reads_zeros nonzero_bytes="$nz"

# One path, live and ANA optimized (the processor node owns the volume).
nvme list-subsys "$dev" > /tmp/subsys 2>&1
sed 's/^/INFO list-subsys| /' /tmp/subsys
if grep -q "NQN=$NQN" /tmp/subsys && [ "$(grep -c 'live optimized' /tmp/subsys)" = 1 ]; then
    pass path_live_optimized
else
    fail path_live_optimized
fi

out=$(nvme disconnect -n "$NQN" 2>&1); info "disconnect: $out"
if echo "$out" | grep -q 'disconnected 1' && wait_path_gone "$dev" 15; then
    pass disconnect
else
    fail disconnect
fi
