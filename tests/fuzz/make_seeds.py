#!/usr/bin/python3
"""Writes the seed corpus for the fuzz targets (tests/fuzz/corpus/<target>/): one well-formed input
per target, plus a few near misses, laid out as each target's header comment describes. The
structures mirror src/core/bootstrap_wire.h, src/core/unique_id.cc, the socket frame header in
transport/socket/socket_connection.h and the slot header in transport/shm/shm_ring.h (x86-64
layout). Run it again after changing any of them."""

import os
import socket
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = bytes((i * 7 + 1) & 0xFF for i in range(32))
PROTOCOL = 8  # kProtocolVersion


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def wire_address(port=29500, addr="127.0.0.1"):
    return struct.pack("<HH16s", socket.AF_INET, socket.htons(port), socket.inet_aton(addr))


def unique_id():
    body = struct.pack("<IHH", 0x44494657, 1, 0) + wire_address() + SECRET
    body += bytes(128 - 8 - len(body))
    return body + struct.pack("<Q", fnv1a64(body))


def placement(numa=0, gpu=-1, nic=0, nics=1, cpus=2, cache_kib=32768, l2_kib=1024, cores=2):
    return struct.pack("<hhhhhhIIhh", numa, gpu, nic, nics, cpus, 0, cache_kib, l2_kib, cores, 0)


def rails(port):
    # kMaxRails (8) addresses: one per NIC; family 0 where the NIC has none
    return wire_address(port + 1, "127.0.0.2") + wire_address(port + 2, "127.0.0.3") + bytes(6 * 20)


def rank_hello(rank=1, nranks=4):
    host = b"seed-host".ljust(64, b"\0")
    return (struct.pack("<IHH", 0x4C454857, PROTOCOL, 0) + SECRET +  # magic, version, settings digest
            struct.pack("<iiiIQ", rank, nranks, 30000, 1234, 0xABCDEF) + wire_address(40000) + rails(40000) +
            host + placement(nics=2) + struct.pack("<I", 0xEFFFFFFC))  # pid namespace


def root_reply(nranks, result=0, message=b""):
    return struct.pack("<IiiI", 0x50455257, result, nranks, 0) + message.ljust(256, b"\0")


def peer_record(port):
    # listen (20 bytes), rails (160), pid, settings digest, pid namespace, hostHash, hostName
    return (wire_address(port) + rails(port) + struct.pack("<IIIQ", 99, 0, 0xEFFFFFFC, 7) + b"peer".ljust(64, b"\0") +
            placement(nics=2))


def peer_hello(from_rank=1, to_rank=3, stream=1, streams=2):
    return struct.pack("<IHH", 0x48505746, PROTOCOL, stream) + SECRET + struct.pack("<iiiI", from_rank, to_rank, streams, 0)


def socket_frame(payload, tag, parts=1, total=None):
    total = len(payload) if total is None else total
    return struct.pack("<IIQII", 0x57465431, parts, total, tag, 0) + payload


def slot(kind, message_bytes, piece, tag, payload=b"", remote=0):
    header = struct.pack("<IIQQQ", kind, tag, message_bytes, piece, remote).ljust(64, b"\0")
    return header + payload.ljust(256, b"\0")


def write(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def main():
    write("unique_id", "valid", unique_id())
    write("unique_id", "bad-checksum", unique_id()[:-1] + b"\x00")

    records = b"".join(peer_record(40000 + r) for r in range(4))
    write("bootstrap", "valid", b"\x01" + rank_hello() + root_reply(4) + records + peer_hello())
    write("bootstrap", "root-error", b"\x01" + rank_hello() + root_reply(4, 8, b"rank 2 never arrived") + peer_hello())
    write("bootstrap", "wrong-secret", b"\x00" + rank_hello(7, 4) + root_reply(0) + peer_hello(5, 3))

    tag = 0x1234
    control = struct.pack("<HHI", 100, 20, tag)
    write("socket_stream", "valid", control + socket_frame(bytes(range(100)), tag) + socket_frame(b"x" * 20, tag))
    write("socket_stream", "size-mismatch", control + socket_frame(b"y" * 40, tag))
    write("socket_stream", "wrong-tag", control + socket_frame(bytes(100), tag + 1))

    control = struct.pack("<HHBBxx", 300, 10, 3, 7)
    ring = slot(1, 300, 256, 7, b"a" * 256) + slot(1, 300, 44, 7, b"b" * 44) + slot(1, 10, 10, 7, b"c" * 10)
    write("shm_ring", "valid", control + ring)
    write("shm_ring", "remote", struct.pack("<HHBBxx", 64, 0, 1, 7) + slot(2, 64, 64, 7, remote=0x1000))
    write("shm_ring", "oversized-piece", struct.pack("<HHBBxx", 300, 0, 1, 7) + slot(1, 300, 4096, 7))
    # Mode byte: 1 forwards each receive out through the connection's own ring, 3 also reduces.
    write("shm_ring", "forward", struct.pack("<HHBBBx", 300, 10, 3, 7, 1) + ring)
    ring = slot(1, 300, 256, 7, b"a" * 256) + slot(1, 300, 44, 7, b"b" * 44) + slot(1, 12, 12, 7, b"c" * 12)
    write("shm_ring", "forward-reduce", struct.pack("<HHBBBx", 300, 12, 3, 7, 3) + ring)


if __name__ == "__main__":
    main()
