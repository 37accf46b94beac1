#!/usr/bin/env python3
"""A scriptable fake far side of an rdcp sync, for tests/e2e/hostile.bats.

Run as the remote shell's command (tests/lib/fakepeer-rsh SCENARIO): it
speaks docs/protocol.md's control channel on stdin/stdout (frames, HELLO,
READY, MANIFEST, PLAN, CTL_DATA, SENT, DONE), encodes manifests, and opens
the data connection with the transport's handshake (HMAC-SHA-256 under the
key derived from the secret in CTL_DATA), so it can play a sender or a
receiver that knows the key but lies, as the scenario says.

It prints nothing on stderr (the tests count rdcp's lines there) unless
FAKEPEER_LOG names a file, which then gets a trace. It exits 0 when the
real rdcp hangs up.
"""
import ctypes
import hashlib
import hmac
import os
import socket
import struct
import sys
import tarfile
import traceback

# --- control channel (docs/protocol.md, "Control channel") ---

CTL_HELLO, CTL_READY, CTL_ERROR, CTL_MANIFEST, CTL_MANIFEST_END, CTL_PLAN, \
    CTL_DATA, CTL_DONE, CTL_LOG = range(1, 10)
CTL_SENT = 14
CTL_LANDED = 16
CTL_FILES = 17
CTL_ROUND = 23
CTL_RETRY = 24
CTL_ASREAD = 25
CTL_CHUNKS, CTL_CHUNKS_END = 19, 20
ROLE_SENDER, ROLE_RECEIVER = 1, 2
IDX_REG, IDX_DIR, IDX_LNK = 1, 2, 3
CHUNK = 4 << 20
SMALL = 64 << 10
ARCHIVE_ID = (1 << 64) - 1

LOG = None


def log(*a):
    if LOG:
        print(*a, file=LOG, flush=True)


class Hangup(Exception):
    """rdcp closed the control channel (or the data connection)."""


def read_exact(f, n):
    b = b""
    while len(b) < n:
        part = f.read(n - len(b))
        if not part:
            raise Hangup()
        b += part
    return b


def recv_frame():
    h = read_exact(sys.stdin.buffer, 5)
    n, t = struct.unpack(">IB", h)
    payload = read_exact(sys.stdin.buffer, n)
    log("<- frame", t, n)
    return t, payload


def send_frame(t, payload=b""):
    log("-> frame", t, len(payload))
    sys.stdout.buffer.write(struct.pack(">IB", len(payload), t) + payload)
    sys.stdout.buffer.flush()


def decode_hello(p):
    magic, version, role, pl = struct.unpack(">IBBH", p[:8])
    path = p[8:8 + pl]
    return {"magic": magic, "version": version, "role": role, "path": path}


# --- manifests (docs/protocol.md, "Manifest") ---

def xxh3_128(data):
    """XXH3-128 in canonical byte order, from the libxxhash rdcp links."""
    class H(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_128bits.restype = H
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = lib.XXH3_128bits(data, len(data))
    return struct.pack(">QQ", h.high64, h.low64)


def entry(path, type=IDX_REG, content=None, size=None, mode=0o644, mtime_ns=None,
          hlink=0, link=b"", rdev=0, hash=None, xattrs=(), chunks=None):
    if isinstance(path, str):
        path = path.encode()
    if content is not None and size is None:
        size = len(content)
    return {"path": path, "type": type, "content": content, "size": size or 0,
            "mode": mode, "mtime_ns": mtime_ns if mtime_ns is not None else 1500000000 * 10**9,
            "hlink": hlink, "link": link, "rdev": rdev, "hash": hash, "xattrs": xattrs,
            "chunks": chunks}


def encode_manifest(entries, count=None, flags=0, nohash=0):
    """flags: the header's (0x02: xattrs were read, 0x04: of every namespace);
    nohash: files under this many bytes (a multiple of 1024) go without hash."""
    out = bytearray(struct.pack(">IBBHIQ", 0x52444D46, 1, flags, nohash >> 10, CHUNK,
                                len(entries) if count is None else count))
    prev = b""
    for e in entries:
        p = e["path"]
        pre = 0
        while pre < len(prev) and pre < len(p) and prev[pre] == p[pre] and pre < 0xffff:
            pre += 1
        eflags = 0x02 if e["xattrs"] else 0
        out += struct.pack(">BBHH", e["type"], eflags, pre, len(p) - pre) + p[pre:]
        out += struct.pack(">IIIq", e["mode"], os.getuid(), os.getgid(), e["mtime_ns"])
        if e["type"] == IDX_REG:
            size = e["size"]
            content = e["content"] or b""
            if e["chunks"] is not None:   # digests as a liar counts them
                chunks = e["chunks"]
                digest = xxh3_128(b"".join(chunks))
            elif size > CHUNK:
                n = (size + CHUNK - 1) // CHUNK
                chunks = [xxh3_128(content[i * CHUNK:(i + 1) * CHUNK]) for i in range(n)]
                digest = xxh3_128(b"".join(chunks))
            else:
                chunks = []
                digest = xxh3_128(content)
            if e["hash"] is not None:
                digest = e["hash"]
            if size < nohash:
                digest = b""
            out += struct.pack(">Q", size) + digest + struct.pack(">I", e["hlink"])
            out += b"".join(chunks)
        elif e["type"] == IDX_LNK:
            out += struct.pack(">H", len(e["link"])) + e["link"]
        elif e["type"] in (5, 6):
            out += struct.pack(">Q", e["rdev"])
        if e["xattrs"]:
            out += struct.pack(">H", len(e["xattrs"]))
            for name, value in e["xattrs"]:
                out += struct.pack(">B", len(name)) + name + struct.pack(">I", len(value)) + value
        prev = p
    return bytes(out)


def skip_extras(b, pos, fl):
    """Past an entry's xattrs (flag 0x02) and ACLs (0x04, 0x08)."""
    if fl & 0x02:
        n = struct.unpack(">H", b[pos:pos + 2])[0]
        pos += 2
        for _ in range(n):
            pos += 1 + b[pos]
            pos += 4 + struct.unpack(">I", b[pos:pos + 4])[0]
    for bit in (0x04, 0x08):
        if fl & bit:
            pos += 2 + 6 * struct.unpack(">H", b[pos:pos + 2])[0]
    return pos


def decode_manifest(b):
    """Just enough for a receiver: [(path, type, size)]."""
    magic, version, flags, nohash_kib, chunk, count = struct.unpack(">IBBHIQ", b[:20])
    pos, prev, out = 20, b"", []
    if flags & 0x01:   # a table of user and group names
        n = struct.unpack(">I", b[pos:pos + 4])[0]
        pos += 4
        for _ in range(n):
            pos += 6 + b[pos + 5]
    for _ in range(count):
        t, fl, pre, sl = struct.unpack(">BBHH", b[pos:pos + 6])
        pos += 6
        path = prev[:pre] + b[pos:pos + sl]
        pos += sl + 20
        size = 0
        if t == IDX_REG:
            size = struct.unpack(">Q", b[pos:pos + 8])[0]
            n = (size + CHUNK - 1) // CHUNK if size > CHUNK else 0
            pos += 8 + (16 if size >= nohash_kib << 10 else 0) + 4 + 16 * n
        elif t == IDX_LNK:
            pos += 2 + struct.unpack(">H", b[pos:pos + 2])[0]
        elif t in (5, 6):
            pos += 8
        pos = skip_extras(b, pos, fl)
        out.append((path, t, size))
        prev = path
    return out


# --- the data connection (docs/protocol.md, "Transport messages") ---

TP_DATA, TP_END, TP_VERDICT = 1, 3, 4
TP_HELLO, TP_AUTH, TP_AUTH_OK = 16, 17, 18


def tp_header(t, length=0, id=0, off=0):
    return struct.pack(">BBHIQQII", t, 0, 0, length, id, off, 0, 0)


class DataConn:
    """One authenticated stream to the receiver, as a sender that knows the key."""

    def __init__(self, host, port, secret):
        key = hashlib.blake2b(secret, digest_size=32, key=b"rdcp transport key v1").digest()
        self.s = socket.create_connection((host, port), timeout=20)
        h = self.read_msg()
        assert h[0] == TP_HELLO, h
        hello_nonce = h[5][16:48]
        session, streams, index = struct.unpack(">Q", os.urandom(8))[0], 1, 0
        nonce = os.urandom(32)
        ident = struct.pack(">QHH", session, streams, index)
        mac = hmac.new(key, b"rdcp v1 sender\0" + hello_nonce + nonce + ident,
                       hashlib.sha256).digest()
        auth = struct.pack(">HHHHQ", 1, streams, index, 0, session) + nonce + mac
        self.s.sendall(tp_header(TP_AUTH, len(auth)) + auth)
        ok = self.read_msg()
        want = hmac.new(key, b"rdcp v1 receiver\0" + nonce + hello_nonce + ident,
                        hashlib.sha256).digest()
        assert ok[0] == TP_AUTH_OK and hmac.compare_digest(ok[5], want), ok
        self.msgs = self.bytes = 0
        log("data connection authenticated")

    def read_msg(self):
        h = b""
        while len(h) < 32:
            part = self.s.recv(32 - len(h))
            if not part:
                raise Hangup()
            h += part
        t, fl, res, length, id, off, cr, res2 = struct.unpack(">BBHIQQII", h)
        p = b""
        while len(p) < length:
            part = self.s.recv(length - len(p))
            if not part:
                raise Hangup()
            p += part
        return t, length, id, off, cr, p

    def data(self, id, off, payload, length=None):
        """A DATA message; length, if given, is what the header claims."""
        n = len(payload) if length is None else length
        log("-> DATA id", id, "off", off, "len", n, "sent", len(payload))
        self.s.sendall(tp_header(TP_DATA, n, id, off) + payload)
        self.msgs += 1
        self.bytes += len(payload)

    def finish(self):
        """END, then the receiver's verdict (0, or its errno)."""
        try:
            self.s.sendall(tp_header(TP_END, 0, self.msgs, self.bytes))
        except OSError:
            pass
        try:
            while True:
                m = self.read_msg()
                if m[0] == TP_VERDICT:
                    log("<- VERDICT", m[2])
                    return m[2]
        except (OSError, Hangup):
            return -1
        finally:
            self.s.close()


# The run's archive key, as this fake sends it in MANIFEST_END.
AKEY = bytes(range(32))


def entry_tag(index, size, data, key=AKEY):
    """An archive entry's tag (docs/protocol.md): keyed BLAKE2b-128 of the
    file's index, size and XXH3-128."""
    return hashlib.blake2b(struct.pack(">QQ", index, size) + xxh3_128(data),
                           digest_size=16, key=key).digest()


ASREAD = 3 << 62   # a chunk as the sender read it, then its tag


def asread(ident, off, data, key=AKEY):
    """An ASREAD chunk's payload (docs/protocol.md): its bytes, then the
    keyed BLAKE2b-128 of its id, its off with the kind and its XXH3-128."""
    return data + hashlib.blake2b(struct.pack(">QQ", ident, off | ASREAD) + xxh3_128(data),
                                  digest_size=16, key=key).digest()


def tar_entry(name, data, size=None, hash_of=None, key=AKEY):
    """An archive entry: a manifest index is named with the tag of data
    (or of hash_of), as the sender names it."""
    if isinstance(name, int):
        d = data if hash_of is None else hash_of
        name = "%d.%s" % (name, entry_tag(name, len(d), d, key).hex())
    ti = tarfile.TarInfo(str(name))
    ti.size = len(data) if size is None else size
    ti.mode = 0o600
    pad = (-len(data)) % 512
    return ti.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * pad


TAR_END = b"\0" * 1024

# --- the scenarios ---
#
# The tree a lying sender offers (index: id - 1):
#   0 ""  the root       1 "a" 100000 bytes      2 "b" 100000 bytes, which DST
#   3 "c" 65536 bytes    4 "s" 100 bytes         has (same size and mtime):
#   5 "t" 100 bytes                                 not asked for

B_MTIME = 1000000000 * 10**9


def content(tag, n):
    return (tag * (n // len(tag) + 1))[:n]


A = content(b"a-content.", 100000)
C = content(b"c-content.", 65536)
S = content(b"s", 100)
T_ = content(b"t", 100)


BIG4 = content(b"big.", CHUNK)   # one whole chunk


def tree():
    return [entry("", IDX_DIR, mode=0o755), entry("a", content=A),
            entry("b", content=content(b"b", 100000), mtime_ns=B_MTIME),
            entry("c", content=C), entry("s", content=S), entry("t", content=T_)]


def archive(*parts):
    return b"".join(parts)


# name -> what the sender sends in the data session: a list of
# ("chunk", id, off, payload[, claimed len]) and ("archive", bytes)
SPARSE = 2 << 62   # a -S message: its non-zero blocks, then their u64 mask
DATA = {
    "blocks-unasked": [("chunk", 2, 1 << 62, A[:65536] + struct.pack(">Q", 1))],
    "sparse-without-S": [("chunk", 2, SPARSE, A[:65536] + struct.pack(">Q", 1))],
    "sparse-mask-past": [("chunk", 2, SPARSE, A[:65536] + struct.pack(">Q", 1 << 5))],
    "sparse-bad-len": [("chunk", 2, SPARSE, A[:1000] + struct.pack(">Q", 1))],
    "chunk-past-end": [("chunk", 2, 8 * CHUNK, A)],
    "chunk-len-not-chunk": [("chunk", 2, 0, A[:5000])],
    "chunk-len-past-buffer": [("chunk", 2, 0, b"", 5 * CHUNK)],
    "chunk-id-out-of-range": [("chunk", 1000, 0, A)],
    "chunk-not-requested": [("chunk", 3, 0, content(b"b", 100000))],
    "chunk-twice": [("chunk", 2, 0, A), ("chunk", 2, 0, A)],
    **{k: [("chunk", 4, 0, C), ("archive", archive(tar_entry(4, S), tar_entry(5, T_), TAR_END))]
       for k in ("retry-list-not-file", "retry-list-out-of-range", "retry-list-unordered",
                 "retry-list-more-than-unsent", "retry-list-longer", "asread-list-not-file",
                 "asread-list-more-than-planned")},
    "chunk-bad-hash": [("chunk", 2, 0, content(b"evil", 100000)),
                       ("chunk", 4, 0, C), ("archive", archive(tar_entry(4, S),
                                                               tar_entry(5, T_), TAR_END))],
    "sparse-bad-hash": [("chunk", 2, SPARSE, struct.pack(">Q", 0)),
                        ("chunk", 4, 0, C), ("archive", archive(tar_entry(4, S),
                                                                tar_entry(5, T_), TAR_END))],
    # a chunk as read (not the manifest's bytes) with a tag made without the
    # key, as one on the data path would; and one a byte short of its tag
    "asread-forged-tag": [("chunk", 2, ASREAD, asread(2, 0, content(b"evil", 100000),
                                                      key=bytes(32))),
                          ("chunk", 4, 0, C), ("archive", archive(tar_entry(4, S),
                                                                  tar_entry(5, T_), TAR_END))],
    "asread-short": [("chunk", 2, ASREAD, asread(2, 0, content(b"evil", 100000))[:-1])],
    # a hard link's leader as read: its links would keep the list's hash
    "asread-hardlink": [("chunk", 2, ASREAD, asread(2, 0, content(b"evil", 100000)))],
    # a file whose size's chunk count does not fit 32 bits: chunk 100000,
    # past what a 32-bit count of 2 would have allocated
    "manifest-size-wraps": [("chunk", 2, 100000 * CHUNK, BIG4)],
    # 2^60 bytes, whose 32-bit chunk count is 0: "one chunk", 4 MiB of it
    "manifest-size-2p60": [("chunk", 2, 0, BIG4)],
    "archive-absurd-size": [("archive", archive(tar_entry(4, b"", size=1 << 40)))],
    "archive-large-file": [("archive", archive(tar_entry(3, C), TAR_END))],
    "archive-twice": [("archive", archive(tar_entry(4, S), tar_entry(4, S), TAR_END))],
    "archive-truncated": [("archive", archive(tar_entry(4, S))[:512 + 50])],
    "archive-not-requested": [("archive", archive(tar_entry(2, content(b"b", 100000)[:100]),
                                                  TAR_END))],
    "archive-bad-name": [("archive", archive(tar_entry("../../x", S), TAR_END))],
    "archive-no-hash": [("archive", archive(tar_entry("4", S), TAR_END))],
    "archive-bad-hash": [("chunk", 2, 0, A), ("chunk", 4, 0, C),
                         ("archive", archive(tar_entry(4, S),
                                             tar_entry(5, content(b"evil", 100), hash_of=T_),
                                             TAR_END))],
    # what one on the data path could do: a tag for its data, without the key
    "archive-forged-tag": [("chunk", 2, 0, A), ("chunk", 4, 0, C),
                           ("archive", archive(tar_entry(4, S),
                                               tar_entry(5, content(b"evil", 100),
                                                         key=bytes(32)), TAR_END))],
    "archive-lied-hash": [("chunk", 2, 0, A), ("chunk", 4, 0, C),
                          ("archive", archive(tar_entry(4, S),
                                              tar_entry(5, content(b"evil", 100)), TAR_END))],
}

# name -> (READY payload, manifest bytes)
def ready(named, is_dir, name, length=None):
    return struct.pack(">BBH", named, is_dir, len(name) if length is None else length) + name


CONTENTS = ready(0, 1, b"")


def mf(*entries, **kw):
    return encode_manifest(list(entries), **kw)


ROOT = entry("", IDX_DIR, mode=0o755)
MANIFEST = {
    "manifest-dotdot": mf(ROOT, entry("../x", content=b"x")),
    "manifest-nohash-large": mf(ROOT, entry("a", content=A), nohash=128 << 10),
    # small files without their hash, as a sender sends them, but the data
    # of t differs from what the manifest says; and from its entry's hash
    "archive-bad-hash": encode_manifest(tree(), nohash=64 << 10),
    "archive-forged-tag": encode_manifest(tree(), nohash=64 << 10),
    "manifest-absolute": mf(ROOT, entry("/tmp/x", content=b"x")),
    "manifest-duplicate": mf(ROOT, entry("a", content=b"x"), entry("a", content=b"x")),
    "manifest-unsorted": mf(ROOT, entry("b", content=b"x"), entry("a", content=b"x")),
    "manifest-absurd-count": mf(ROOT, entry("a", content=b"x"), count=1 << 62),
    "manifest-size-wraps": mf(ROOT, entry("a", size=(1 << 54) + (8 << 20),
                                          chunks=[xxh3_128(BIG4)] * 2)),
    "manifest-size-2p60": mf(ROOT, entry("a", size=1 << 60, chunks=[],
                                         hash=xxh3_128(BIG4))),
    "manifest-trailing-junk": mf(ROOT, entry("a", content=b"x")) + b"JUNK",
    # xattrs (-X): a value over Linux's largest, to make the receiver
    # allocate; a namespace the sender says it did not read (trusted.* from
    # a sender that read user.* only, for a root receiver to set)
    "manifest-xattr-oversized": mf(ROOT, entry("a", content=b"x",
                                               xattrs=[(b"user.big", b"v" * 65537)]), flags=0x02),
    "manifest-xattr-namespace": mf(ROOT, entry("a", content=b"x",
                                               xattrs=[(b"trusted.x", b"v")]), flags=0x02),
    "manifest-symlink-parent": mf(ROOT, entry("l", IDX_LNK, link=b"/tmp"),
                                  entry("l/x", content=b"x")),
    "manifest-parent-not-dir": mf(ROOT, entry("f", content=b"x"), entry("f/x", content=b"x")),
    "manifest-parent-missing": mf(ROOT, entry("d/x", content=b"x")),
    "manifest-hardlink-forward": mf(ROOT, entry("a", content=b"x", hlink=3),
                                    entry("b", content=b"x")),
    "asread-hardlink": mf(ROOT, entry("a", content=A, hlink=2), entry("b", content=A, hlink=2)),
    "manifest-hardlink-not-leader": mf(ROOT, entry("a", content=b"x"),
                                       entry("b", content=b"x", hlink=2)),
}

READY = {
    "ready-dotdot": ready(1, 1, b".."),
    "ready-slash": ready(1, 1, b"a/b"),
    "ready-empty-named": ready(1, 1, b""),
    "ready-overlong": ready(1, 1, b"x" * 300),
    "ready-length-lies": ready(1, 1, b"x", length=1000),
    "ready-kind-3": ready(3, 1, b"x"),
    "ready-mirror-dotdot": ready(2, 1, b".."),
    "ready-mirror-empty": ready(2, 1, b""),
}


def drain():
    """Read (and ignore) until rdcp hangs up."""
    try:
        while True:
            recv_frame()
    except Hangup:
        pass


def play_sender(scenario):
    if scenario == "error-escapes":
        # an ERROR whose text would retitle (and bell) the user's terminal
        send_frame(CTL_ERROR, struct.pack(">I", 23) + b"\x1b]0;pwned\x07 no such file")
        return await_round()
    # pulled, the client offers rounds of changed files (--rounds): the same
    # lies again in each, of the round's files, as a lying sender would
    files = None
    while True:
        files = sender_round(scenario, files)
        if files is None:
            return


def await_round():
    """After a round: the next round's paths when the client asks for one
    (ROUND, then its FILES parts), None when it hangs up."""
    try:
        while True:
            t, p = recv_frame()
            if t != CTL_ROUND:
                continue   # the receiver's DONE, its LOG lines
            log("round", p)
            files = set()
            while True:
                t, p = recv_frame()
                count, at = struct.unpack(">I", p[:4])[0], 4
                if t == CTL_FILES and count == 0:
                    return files
                for _ in range(count):
                    n = struct.unpack(">H", p[at:at + 2])[0]
                    files.add(p[at + 2:at + 2 + n].rstrip(b"/"))
                    at += 2 + n
    except Hangup:
        return None


def round_view(scenario, files):
    """A round of the default tree's listed files: its manifest, and the
    scenario's chunks of those files with their ids in it (the archive's
    small files are left out)."""
    old = tree()
    keep = [0] + [i for i in range(1, len(old)) if old[i]["path"] in files]
    ids = {k + 1: n + 1 for n, k in enumerate(keep)}
    steps = [("chunk", ids[st[1]]) + tuple(st[2:]) for st in DATA.get(scenario, [])
             if st[0] == "chunk" and st[1] in ids]
    return encode_manifest([old[k] for k in keep]), steps


def sender_round(scenario, files=None):
    r = READY.get(scenario, CONTENTS)
    send_frame(CTL_READY, r)
    m = MANIFEST.get(scenario, encode_manifest(tree()))
    steps = DATA.get(scenario, [])
    if files is not None and scenario not in MANIFEST:
        m, steps = round_view(scenario, files)
    send_frame(CTL_MANIFEST, m)
    # unreadable entries, the archive key, list generation and transfer times (us)
    send_frame(CTL_MANIFEST_END, struct.pack(">Q", 0) + AKEY + struct.pack(">QQQ", 1500, 20, 0))
    t, p = recv_frame()
    if t != CTL_PLAN:
        return await_round()
    count = struct.unpack(">I", p[:4])[0]
    plan = struct.unpack(">%dI" % count, p[4:4 + 4 * count])
    log("plan", plan)
    while t != CTL_CHUNKS_END:   # which chunks of files DST has (none here)
        t, p = recv_frame()
    if not count:
        return await_round()
    t, p = recv_frame()
    if t != CTL_DATA:
        return await_round()
    port, secret, addr = struct.unpack(">H", p[:2])[0], p[2:34], p[34:]
    conn = DataConn(addr.decode() or "127.0.0.1", port, secret)
    try:
        for step in steps:
            if step[0] == "chunk":
                conn.data(step[1], step[2], step[3], *step[4:])
                if len(step) > 4:
                    break   # the header lied about the length: nothing more
            else:
                conn.data(ARCHIVE_ID, 0, step[1])
    except OSError:
        pass
    verdict = conn.finish()
    if verdict == 0 and scenario in SENT_RETRY:
        # pulled with rounds: a list of files to send again that lies
        unsent, retried, frames = SENT_RETRY[scenario]
        send_frame(CTL_SENT, struct.pack(">QQQQ", unsent, 0, retried, 0))
        for idx in frames:
            send_frame(CTL_RETRY, struct.pack(">I%dI" % len(idx), len(idx), *idx))
    elif verdict == 0 and scenario in SENT_ASREAD:
        count, frames = SENT_ASREAD[scenario]
        send_frame(CTL_SENT, struct.pack(">QQQQ", 0, 0, 0, count))
        for idx in frames:
            send_frame(CTL_ASREAD, struct.pack(">I%dI" % len(idx), len(idx), *idx))
    elif verdict == 0:
        # unsent, of them unreadable, retried; sent as read
        send_frame(CTL_SENT, struct.pack(">QQQQ", 0, 0, 0, 0))
    return await_round()


# name -> (unsent, retried, CTL_RETRY frames of manifest indices) after the
# data of "chunk-bad-hash"'s tree (a, index 1, was sent; c, s, t too)
SENT_RETRY = {
    "retry-list-not-file": (1, 1, [[0]]),          # the root directory
    "retry-list-out-of-range": (1, 1, [[99]]),
    "retry-list-unordered": (2, 2, [[3, 1]]),
    "retry-list-more-than-unsent": (1, 2, [[1, 3]]),
    "retry-list-longer": (1, 1, [[1, 3]]),
}
# name -> (as read, CTL_ASREAD frames), likewise
SENT_ASREAD = {
    "asread-list-not-file": (1, [[0]]),
    "asread-list-more-than-planned": (9, [[1]]),
}


def play_receiver(scenario):
    m = b""
    while True:
        t, p = recv_frame()
        if t == CTL_MANIFEST:
            m += p
        elif t == CTL_MANIFEST_END:
            break
    entries = decode_manifest(m)
    files = [i for i, e in enumerate(entries) if e[1] == IDX_REG]
    if scenario == "plan-out-of-range":
        send_frame(CTL_PLAN, struct.pack(">II", 1, len(entries) + 1000))
        send_frame(CTL_CHUNKS_END)
    elif scenario == "plan-not-a-file":
        send_frame(CTL_PLAN, struct.pack(">II", 1, 0))
        send_frame(CTL_CHUNKS_END)
    elif scenario == "plan-twice":
        send_frame(CTL_PLAN, struct.pack(">III", 2, files[0], files[0]))
        send_frame(CTL_CHUNKS_END)
    elif scenario == "log-escapes":
        send_frame(CTL_PLAN, struct.pack(">I", 0))
        send_frame(CTL_CHUNKS_END)
        send_frame(CTL_LOG, b"\x1b[2J>f+++++++++ f\n")
        send_frame(CTL_DONE, struct.pack(">IQQQQQ", 0, 0, 0, 0, 0, 0) + bytes(88))
    elif scenario.startswith("landed-"):
        # --remove-source-files: an empty plan, then a list of what
        # "landed" that lies (sync/send/remove.c must refuse it, removing nothing)
        dirs = [i for i, e in enumerate(entries) if e[1] == IDX_DIR]
        idx = {"landed-dir": [dirs[0]], "landed-out-of-range": [len(entries) + 7],
               "landed-twice": [files[-1], files[-1]],
               "landed-unasked": [files[0]]}[scenario]
        send_frame(CTL_PLAN, struct.pack(">I", 0))
        send_frame(CTL_CHUNKS_END)
        send_frame(CTL_LANDED, struct.pack(">I%dI" % len(idx), len(idx), *idx))
        send_frame(CTL_DONE, struct.pack(">IQQQQQ", 0, 0, 0, 0, 0, 0) + bytes(88))
    elif scenario.startswith("retry-"):
        # RETRY (files to send again) that lies: the sender must refuse it
        dirs = [i for i, e in enumerate(entries) if e[1] == IDX_DIR]
        idx = {"retry-dir": [dirs[0]], "retry-out-of-range": [len(entries) + 7],
               "retry-twice": [files[-1], files[-1]], "retry-unoffered": [files[0]]}[scenario]
        send_frame(CTL_PLAN, struct.pack(">I", 0))
        send_frame(CTL_CHUNKS_END)
        send_frame(CTL_RETRY, struct.pack(">I%dI" % len(idx), len(idx), *idx))
        send_frame(CTL_DONE, struct.pack(">IQQQQQ", 0, 0, 0, 0, 0, 0) + bytes(88))
    elif scenario.startswith("chunks-"):
        # a lying list of chunks: the sender must refuse it (exit 12)
        big = [i for i, e in enumerate(entries) if e[1] == IDX_REG and e[2] >= SMALL]
        small = [i for i, e in enumerate(entries) if e[1] == IDX_REG and e[2] < SMALL]
        f = big[0]
        send_frame(CTL_PLAN, struct.pack(">III", 2, *sorted((small[0], f))))
        one = struct.pack(">III", f, 0, 1)
        frames = {"chunks-unplanned": [struct.pack(">III", 0, 0, 1) + b"\x01"],
                  "chunks-small": [struct.pack(">III", small[0], 0, 1) + b"\x01"],
                  "chunks-twice": [one + b"\x01", one + b"\x01"],
                  "chunks-bad-kind": [one + b"\x07"],
                  "chunks-overlong": [one + b"\x01" + b"x" * 9],
                  "chunks-missing-end": []}[scenario]
        for fr in frames:
            send_frame(CTL_CHUNKS, fr)
        if scenario != "chunks-missing-end":
            send_frame(CTL_CHUNKS_END)
        else:
            send_frame(CTL_DONE, struct.pack(">IQQQQQ", 0, 0, 0, 0, 0, 0) + bytes(88))
    elif scenario == "done-bad-code":
        send_frame(CTL_PLAN, struct.pack(">I", 0))
        send_frame(CTL_CHUNKS_END)
        send_frame(CTL_DONE, struct.pack(">IQQQQQ", 256, 0, 0, 0, 0, 0) + bytes(88))
    else:
        send_frame(CTL_PLAN, struct.pack(">II", 1, files[0]))
        send_frame(CTL_CHUNKS_END)
        secret = b"0123456789abcdef0123456789abcdef"
        if scenario == "data-overlong-addr":
            send_frame(CTL_DATA, struct.pack(">H", 9) + secret + b"h" * 300)
        elif scenario == "data-port-zero":
            send_frame(CTL_DATA, struct.pack(">H", 0) + secret)
        elif scenario == "data-then-die":
            # a port nobody listens on, then the end a receiver killed -9
            # just after it answered has: the sender's connects are refused
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            send_frame(CTL_DATA, struct.pack(">H", port) + secret + b"127.0.0.1")
            os.kill(os.getpid(), 9)
    drain()


def main():
    global LOG
    if os.environ.get("FAKEPEER_LOG"):
        LOG = open(os.environ["FAKEPEER_LOG"], "a")
    scenario = sys.argv[1]
    log("scenario", scenario)
    try:
        if scenario.startswith("banner"):
            # what a chatty .bashrc does, before the real rdcp would start
            sys.stdout.buffer.write(b"Welcome to fakehost!\n\x1b[1mHave a nice day\n")
            sys.stdout.buffer.flush()
        t, p = recv_frame()
        h = decode_hello(p)
        log("hello", h)
        if h["role"] == ROLE_SENDER:
            play_sender(scenario)
        else:
            play_receiver(scenario)
    except (Hangup, BrokenPipeError, ConnectionError):
        log("hangup")
    except Exception:
        log(traceback.format_exc())
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
