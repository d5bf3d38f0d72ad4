"""Writes log_root_v1.bin and log_root_v2.bin from the log root offsets in docs/volume-format.md."""
import os
import struct
HERE = os.path.dirname(os.path.abspath(__file__))
def crc32c(data, crc=0):
    poly=0x82F63B78
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc>>1) ^ (poly if crc & 1 else 0)
    return crc ^ 0xffffffff
b = bytearray(4096)
b[0:8]=b"FBLOGRT1"
struct.pack_into("<I", b, 8, 1)
b[16:32]=bytes([0xA5]*16)
struct.pack_into("<Q", b, 32, 7)
struct.pack_into("<Q", b, 40, 4096+3*32)
struct.pack_into("<I", b, 48, 0x1234ABCD)
struct.pack_into("<I", b, 12, crc32c(bytes(b)))
open(os.path.join(HERE, "log_root_v1.bin"), "wb").write(b)
b = bytearray(4096)
b[0:8]=b"FBLOGRT1"
struct.pack_into("<I", b, 8, 2)
b[16:32]=bytes([0xA5]*16)
struct.pack_into("<Q", b, 32, 8)
struct.pack_into("<Q", b, 40, 4096+5*32)
struct.pack_into("<I", b, 48, 0x0BADF00D)
head=[17,3,250]
deltas=[(8192, 4096+2*32, 0x11112222), (16384, 4096+32, 0x33334444)]
struct.pack_into("<I", b, 52, len(head))
struct.pack_into("<I", b, 56, len(deltas))
struct.pack_into("<I", b, 60, 0)  # slot of the base
for i,(off,ln,crc) in enumerate(deltas): struct.pack_into("<QQI", b, 64+24*i, off, ln, crc)
for i,h in enumerate(head): struct.pack_into("<I", b, 832+4*i, h)
struct.pack_into("<I", b, 12, crc32c(bytes(b)))
open(os.path.join(HERE, "log_root_v2.bin"), "wb").write(b)
