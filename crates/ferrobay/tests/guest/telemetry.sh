# Linux kernel host (nvme-cli 2.3, nvme-tcp) reads the telemetry log pages of
# `ferrobay node`: the vendor extended SMART page (C0h, docs/wire/telemetry.md) with
# `nvme get-log`, and the Telemetry Host-Initiated log (07h) with `nvme telemetry-log`,
# after it wrote and read 2 MiB through the namespace.
# Env: PORT (NVMe/TCP), NQN (subsystem of drive d0: namespace 1).
A=$HOST_ADDR
dev=$(nvme_connect_tcp "$A" "$PORT" "$NQN") || { dmesg_tail; fail connect; exit 1; }
pass connect dev="$dev"
ctrl=$(nvme_ctrl_dev "$NQN") || { fail ctrl_dev; exit 1; }

# 32 writes and 16 reads of 64 KiB, O_DIRECT: each one NVMe command.
dd if=/dev/urandom of="$dev" bs=64k count=32 oflag=direct 2>/dev/null && pass io_write || fail io_write
dd if="$dev" of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null && pass io_read || fail io_read

u16() { od -An -tu2 -j "$2" -N2 "$1" | tr -d ' '; }
u64() { od -An -tu8 -j "$2" -N8 "$1" | tr -d ' '; }

# --- vendor page C0h: a 64-byte header and two 256-byte records (drive, namespace) ----
nvme get-log "$ctrl" --log-id=0xc0 --log-len=576 --raw-binary > /tmp/c0.bin 2> /tmp/c0.err ||
    { capture get-log cat /tmp/c0.err; fail ext_smart_get_log; }
sig=$(head -c 4 /tmp/c0.bin)
[ "$sig" = FBXS ] && pass ext_smart_signature || fail ext_smart_signature sig="$sig"
n=$(u16 /tmp/c0.bin 10)
[ "$n" = 2 ] && pass ext_smart_records count="$n" || fail ext_smart_records count="$n"
# Record 1 (the namespace) at 320: kind 2, NSID 1, its write count at +80 (ops[1]).
kind=$(od -An -tu1 -j 320 -N1 /tmp/c0.bin | tr -d ' ')
writes=$(u64 /tmp/c0.bin $((320 + 80)))
reads=$(u64 /tmp/c0.bin $((320 + 72)))
[ "$kind" = 2 ] && [ "$writes" -ge 32 ] && [ "$reads" -ge 16 ] &&
    pass ext_smart_counts writes="$writes" reads="$reads" ||
    fail ext_smart_counts kind="$kind" writes="$writes" reads="$reads"
# Per-class latency of the namespace's writes: count at 136+28, p99 at 136+28+16.
lat_count=$(u64 /tmp/c0.bin $((320 + 136 + 28)))
[ "$lat_count" -ge 32 ] && pass ext_smart_latency count="$lat_count" ||
    fail ext_smart_latency count="$lat_count"

# --- Telemetry Host-Initiated (07h): header, data area 1 = the C0h page -------------
nvme telemetry-log "$ctrl" --output-file=/tmp/tel.bin > /tmp/tel.out 2>&1 ||
    { capture telemetry-log cat /tmp/tel.out; fail telemetry_log; }
lid=$(od -An -tu1 -j 0 -N1 /tmp/tel.bin | tr -d ' ')
da1=$(u16 /tmp/tel.bin 8)
sig=$(dd if=/tmp/tel.bin bs=1 skip=512 count=4 2>/dev/null)
size=$(stat -c %s /tmp/tel.bin)
[ "$lid" = 7 ] && [ "$da1" -ge 1 ] && [ "$sig" = FBXS ] &&
    pass telemetry_log size="$size" da1_last_block="$da1" ||
    { capture telemetry-log cat /tmp/tel.out; fail telemetry_log lid="$lid" da1="$da1" sig="$sig" size="$size"; }

check disconnect nvme disconnect -n "$NQN"
