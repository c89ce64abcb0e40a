#!/usr/bin/env python3
"""make_seeds.py: write the hand-made seed inputs of the bootstrap and env fuzz targets.

The seeds are the cases a reader would try first: valid hellos, replies and frames, then each
one broken in one way (truncated, wrong magic, wrong secret, out-of-range rank, a 2^31 length).
Run from anywhere; writes tests/fuzz/corpus/<target>/seed-*. Inputs found by fuzzing (scripts/
fuzz.sh --update) live beside them under their content hash.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x43484F5255530001
SECRET = 0x5EC12E7F00DFACED  # FUZZ_SECRET in fuzz_common.h
NRANKS = 4  # FUZZ_NRANKS
TAG = {"allgather": 1 << 24, "handle": 2 << 24, "ack": 3 << 24, "split": 4 << 24,
       "status": 5 << 24, "control": 6 << 24}


def addr4(port, ip=(127, 0, 0, 1)):
    return struct.pack("<H", 2) + struct.pack(">H", port) + bytes(ip) + bytes(20)


def addr6(port):
    return struct.pack("<H", 10) + struct.pack(">H", port) + bytes(4) + bytes(15) + b"\x01" + bytes(4)


def root_hello(rank=0, nranks=1, magic=MAGIC, secret=SECRET, listen=None):
    listen = addr4(1000 + rank) if listen is None else listen
    return struct.pack("<QQii", magic, secret, rank, nranks) + listen + bytes(4)


def peer_hello(rank=1, magic=MAGIC, secret=SECRET):
    return struct.pack("<QQii", magic, secret, rank, 0)


def root_reply(nranks=NRANKS, status=0, magic=MAGIC):
    return struct.pack("<Qii", magic, nranks, status)


def missing(ranks, n=None):
    n = len(ranks) if n is None else n
    r = list(ranks)[:16] + [0] * (16 - min(16, len(ranks)))
    return struct.pack("<i16i", n, *r)


def frame(tag, payload, nbytes=None):
    return struct.pack("<II", tag, len(payload) if nbytes is None else nbytes) + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def boot_hello():
    m = {"pure": b"\x00", "root": b"\x01", "rdv": b"\x02", "listen": b"\x03"}
    good = root_hello()
    w = lambda name, data: write("fuzz_boot_hello", "pure-" + name, m["pure"] + data)
    w("good-1rank", good)
    w("3-bytes", good[:3])
    w("55-bytes", good[:55])
    w("evictions", bytes((i * 7) & 0x7F for i in range(400)) + b"\xc5\xd3" * 10)
    for mode in ("root",):
        w = lambda name, data: write("fuzz_boot_hello", mode + "-" + name, m[mode] + data)
        w("good-1rank", good)
        w("good-rank2-of-4", root_hello(2, 4) + b"\x05")
        w("good-v6", root_hello(1, 2, listen=addr6(4000)))
        w("good-trailing", good + b"junk after the hello")
        w("empty", b"")
        w("3-bytes", good[:3])
        w("55-bytes", good[:55])
        w("wrong-magic", root_hello(magic=MAGIC ^ 1))
        w("wrong-secret", root_hello(secret=SECRET ^ (1 << 63)))
        w("nranks-0", root_hello(0, 0))
        w("nranks-huge", root_hello(0, (1 << 20) + 1))
        w("rank-neg", root_hello(-1, 4))
        w("rank-eq-nranks", root_hello(4, 4))
        w("family-0", root_hello(listen=bytes(28)))
        w("frame-2g", struct.pack("<II", TAG["allgather"], 1 << 31) + bytes(48))
        w("random", bytes((i * 151 + 7) & 0xFF for i in range(80)))
    w = lambda name, data: write("fuzz_boot_hello", "rdv-" + name, m["rdv"] + data)
    table = b"".join(addr4(2000 + r) for r in range(NRANKS))
    w("good-table", root_reply() + table)
    w("table-truncated", root_reply() + table[:50])
    w("reply-only", root_reply())
    w("5-bytes", root_reply()[:5])
    w("empty", b"")
    w("wrong-magic", root_reply(magic=0) + table)
    w("wrong-nranks", root_reply(nranks=3) + table)
    w("nranks-2g", root_reply(nranks=-(1 << 31)) + table)
    w("status-7", root_reply(status=7) + table)
    w("missing-1", root_reply(status=1) + missing([3]))
    w("missing-16", root_reply(status=1) + missing(range(16), 1000))
    w("missing-neg", root_reply(status=1) + missing([], -5))
    w("missing-truncated", root_reply(status=1) + missing([2])[:9])
    w = lambda name, data: write("fuzz_boot_hello", "listen-" + name, m["listen"] + data)
    w("hello-only", peer_hello())
    w("hello-frames", peer_hello(2) + frame(TAG["allgather"] | 1, b"abcd")
      + frame(TAG["control"] | 2, b"ctl") + frame(TAG["handle"], b""))
    w("hello-self", peer_hello(0) + frame(TAG["ack"] | 5, b"x"))
    w("hello-frame-2g", peer_hello(1) + struct.pack("<II", TAG["allgather"], 1 << 31))
    w("wrong-secret", peer_hello(1, secret=SECRET + 1) + frame(TAG["allgather"], b"abcd"))
    w("wrong-magic", peer_hello(1, magic=0) + frame(TAG["allgather"], b"abcd"))
    w("rank-4", peer_hello(4) + struct.pack("<II", TAG["allgather"], 1 << 31))
    w("rank-neg", peer_hello(-1))
    w("rank-max", peer_hello(0x7FFFFFFF))
    w("hello-23", peer_hello()[:23])
    w("root-hello", root_hello())


def frames():
    w = lambda name, data: write("fuzz_frame", name, data)
    w("empty", b"\x01")
    w("one", b"\x01" + frame(TAG["allgather"] | 7, b"hello"))
    w("all-kinds", b"\x02" + b"".join(frame(t | i, bytes([i]) * i)
                                      for i, t in enumerate(TAG.values())))
    w("control", b"\x03" + frame(TAG["control"] | 1, b"fail") + frame(TAG["status"] | 9, b"ok"))
    w("zero-length", b"\x01" + frame(TAG["ack"], b"") * 5)
    w("len-2g", b"\x01" + frame(TAG["allgather"], b"", 1 << 31))
    w("len-max", b"\x01" + frame(TAG["allgather"], b"", 0xFFFFFFFF))
    w("len-64m-plus-1", b"\x01" + frame(TAG["handle"], b"", (64 << 20) + 1))
    w("len-64m-short", b"\x01" + frame(TAG["handle"], b"abc", 64 << 20))
    w("kind-0", b"\x01" + frame(0x00FFFFFF, b"x"))
    w("kind-7", b"\x01" + frame(7 << 24, b"x"))
    w("kind-ff", b"\x01" + frame(0xFF000000, b"x"))
    w("header-5", b"\x01" + frame(TAG["allgather"], b"abcd")[:5])
    w("payload-short", b"\x01" + frame(TAG["allgather"], b"abcd", 10))
    w("good-then-bad", b"\x00" + frame(TAG["split"] | 3, b"12345678") + frame(9 << 24, b"")
      + frame(TAG["allgather"], b"after"))
    w("same-tag-twice", b"\x01" + frame(TAG["allgather"], b"first") + frame(TAG["allgather"], b"second!"))


NAMES = ["CHORUS_TIMEOUT_MS", "CHORUS_NCHANNELS", "CHORUS_MIN_NCHANNELS", "CHORUS_MAX_NCHANNELS",
         "CHORUS_BUFFSIZE", "CHORUS_P2P_BUFFSIZE", "CHORUS_STEPS", "CHORUS_SPIN",
         "CHORUS_NSOCKS_PERTHREAD", "CHORUS_SOCKET_NTHREADS", "CHORUS_NET_SPEED_MBPS", "CHORUS_RANK",
         "CHORUS_NRANKS", "RANK", "WORLD_SIZE", "MASTER_PORT", "CHORUS_SOCKET_IFNAME",
         "CHORUS_HOSTID", "CHORUS_ALGO", "CHORUS_PROTO", "CHORUS_ROOT", "CHORUS_DEBUG_FILE",
         "NOT_A_CHORUS_VARIABLE"]  # fuzz_env.c's order


def env():
    def w(var, text, ifname=False):
        i = NAMES.index(var)
        b = next(b for b in range(256) if b % len(NAMES) == i and bool(b & 0x40) == ifname)
        name = var.lower().replace("chorus_", "") + "-" + "".join(
            c if c.isalnum() else "_" for c in text)[:24]
        write("fuzz_env", name, bytes([b]) + text.encode())
    for t in ("4M", "64", "1kB", "8Gb", "-1", "99999999999999999999", "1T", " 4M", "08",
              "9007199254740992G"):
        w("CHORUS_BUFFSIZE", t)
    for t in ("600000", "0", "1099511627777", "1e3"):
        w("CHORUS_TIMEOUT_MS", t)
    for t in ("0", "65535", "65536"):
        w("MASTER_PORT", t)
    for t in ("ring", "ring,tree", "^tree", "^ring,tree", "allreduce:tree;broadcast:ring",
              "allreduce:^ring", "collnet", "^nvls", "allreduce:;", "allreduce:tree;allreduce:ring",
              ",", "RING , TREE"):
        w("CHORUS_ALGO", t)
    for t in ("simple", "LL", "^ll,ll128", "allreduce:ll"):
        w("CHORUS_PROTO", t)
    for t in ("lo", "=lo", "^lo", "^=lo", "eth,lo", "nonexistent", "," * 300):
        w("CHORUS_SOCKET_IFNAME", t, ifname=True)
    w("CHORUS_HOSTID", "x" * 255)
    w("CHORUS_HOSTID", "x" * 256)
    w("CHORUS_ROOT", "[::1]:29500")
    w("NOT_A_CHORUS_VARIABLE", "1")


if __name__ == "__main__":
    boot_hello()
    frames()
    env()
