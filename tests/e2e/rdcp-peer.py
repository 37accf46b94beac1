#!/usr/bin/env python3
"""Hostile and friendly peers of an rdcp TCP data port, for the tests.

  rdcp-peer.py idle HOST PORT N [SECONDS]      N connections that say nothing
  rdcp-peer.py garbage HOST PORT N             N connections that send junk: half
                                               of them a whole burst, half a few
                                               bytes, then nothing for 10 s
  rdcp-peer.py wrongkey HOST PORT N            N senders with a wrong key
  rdcp-peer.py flood HOST PORT SECONDS         all three, interleaved, for SECONDS
  rdcp-peer.py send HOST PORT KEY FILE [--bind ADDR] [--streams N]
                                               a real sender (protocol v1, see
                                               docs/protocol.md); exit 0 on a 0 verdict
  rdcp-peer.py silent-listen PORT SECONDS      accept, never answer (PORT 0: the
                                               kernel picks; "listening on port N")
  rdcp-peer.py attack-rdcp TAG SECONDS         wrong-key connections to every TCP
                                               port an `rdcp --server` whose
                                               environment has RDCP_ATTACK_TAG=TAG
                                               listens on (only this test's)

Exit status 0 unless said otherwise; prints one line of counts.
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

HDR = struct.Struct(">BBHIQQII")
DATA, END, VERDICT, HELLO, AUTH, AUTH_OK, AUTH_FAIL = 1, 3, 4, 16, 17, 18, 19


def derive(secret):
    return hashlib.blake2b(secret.encode(), digest_size=32,
                           key=b"rdcp transport key v1").digest()


def hdr(t, length=0, ident=0, off=0):
    return HDR.pack(t, 0, 0, length, ident, off, 0, 0)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionError("closed")
        b += c
    return b


def recv_msg(s):
    t, _, _, length, ident, off, _, _ = HDR.unpack(recv_exact(s, HDR.size))
    return t, ident, off, recv_exact(s, length) if length else b""


def mac(key, label, n1, n2, session, streams, index):
    ident = struct.pack(">QHH", session, streams, index)
    return hmac.new(key, label + b"\0" + n1 + n2 + ident, hashlib.sha256).digest()


def handshake(s, key, session, streams, index):
    """The sender's half; True if the receiver took us."""
    t, _, _, hello = recv_msg(s)
    if t != HELLO or len(hello) != 48:
        raise ValueError("no HELLO")
    n_r = hello[16:48]
    n_s = os.urandom(32)
    m = mac(key, b"rdcp v1 sender", n_r, n_s, session, streams, index)
    auth = struct.pack(">HHHHQ", 1, streams, index, 0, session) + n_s + m
    s.sendall(hdr(AUTH, len(auth)) + auth)
    t, _, _, ok = recv_msg(s)
    if t == AUTH_FAIL:
        return False
    want = mac(key, b"rdcp v1 receiver", n_s, n_r, session, streams, index)
    return t == AUTH_OK and hmac.compare_digest(ok, want)


def connect(host, port, bind=None):
    s = socket.create_connection((host, port), timeout=10,
                                 source_address=(bind, 0) if bind else None)
    return s


def one_idle(host, port, held, seconds):
    try:
        held.append(connect(host, port))
    except OSError:
        pass


def one_garbage(host, port, trickle=False):
    try:
        s = connect(host, port)
        if trickle:   # less than a header, then silence: holds a handshake
            s.sendall(b"GET / HTTP/1.0\r\n")
            time.sleep(10)
            s.close()
            return
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(200))
        s.settimeout(2)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
    except OSError:
        pass


def one_wrongkey(host, port, counts):
    try:
        s = connect(host, port)
        ok = handshake(s, derive("not-the-key-%d" % os.getpid()),
                       int.from_bytes(os.urandom(8), "big"), 1, 0)
        counts["refused" if not ok else "accepted"] += 1
        s.close()
    except (OSError, ValueError, ConnectionError):
        counts["cut"] += 1


def burst(kind, host, port, n, seconds=30):
    held, counts, threads = [], {"refused": 0, "accepted": 0, "cut": 0}, []
    for i in range(n):
        if kind == "idle":
            th = threading.Thread(target=one_idle, args=(host, port, held, seconds))
        elif kind == "garbage":
            th = threading.Thread(target=one_garbage, args=(host, port, i % 2 == 1))
        else:
            th = threading.Thread(target=one_wrongkey, args=(host, port, counts))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    if kind == "idle":
        print("idle: %d connections held" % len(held), flush=True)
        time.sleep(seconds)
    elif kind == "wrongkey":
        print("wrongkey: %(refused)d refused, %(accepted)d accepted, %(cut)d cut" % counts)
        return 1 if counts["accepted"] else 0
    else:
        print("garbage: %d sent" % n)
    return 0


def flood(host, port, seconds):
    """Idle, garbage and wrong-key connections, interleaved, until the time is
    up or the port is closed."""
    end = time.time() + seconds
    held, counts, n = [], {"refused": 0, "accepted": 0, "cut": 0}, 0
    while time.time() < end:
        k = n % 3
        try:
            if k == 0:
                held.append(connect(host, port))
                if len(held) > 40:
                    held.pop(0).close()
            elif k == 1:
                threading.Thread(target=one_garbage, args=(host, port, n % 2 == 1),
                                 daemon=True).start()
            else:
                threading.Thread(target=one_wrongkey, args=(host, port, counts),
                                 daemon=True).start()
        except OSError:
            break   # the listener is gone: the transfer is over
        n += 1
        time.sleep(0.01)
    print("flood: %d connections, wrong keys %s" % (n, counts))
    return 1 if counts["accepted"] else 0


def send(host, port, secret, path, bind=None, streams=1):
    key = derive(secret)
    session = int.from_bytes(os.urandom(8), "big")
    socks = []
    for i in range(streams):
        s = connect(host, port, bind)
        if not handshake(s, key, session, streams, i):
            print("send: authentication refused")
            return 15
        socks.append(s)
    data = open(path, "rb").read()
    counts = [[0, 0] for _ in socks]
    off, i = 0, 0
    while off < len(data):
        chunk = data[off:off + 65536]
        socks[i].sendall(hdr(DATA, len(chunk), 0, off) + chunk)
        counts[i][0] += 1
        counts[i][1] += len(chunk)
        off += len(chunk)
        i = (i + 1) % len(socks)
    for s, (msgs, nbytes) in zip(socks, counts):
        s.sendall(hdr(END, 0, msgs, nbytes))
    t, status, _, _ = recv_msg(socks[0])
    print("send: verdict %d" % status)
    return 0 if t == VERDICT and status == 0 else 11


def silent_listen(port, seconds):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    if port == 0:
        print("listening on port %d" % ls.getsockname()[1], flush=True)
    ls.settimeout(seconds)
    held, end = [], time.time() + seconds
    try:
        while time.time() < end:
            c, _ = ls.accept()
            held.append(c)
    except OSError:
        pass
    return 0


def rdcp_server_ports(tag):
    """TCP ports in LISTEN of this test's `rdcp --server` processes (never
    another run's on the same machine)."""
    mark = b"RDCP_ATTACK_TAG=" + tag.encode()
    inodes = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            if not cmd or not cmd[0].endswith(b"rdcp") or b"--server" not in cmd:
                continue
            if mark not in open("/proc/%s/environ" % pid, "rb").read().split(b"\0"):
                continue
            for fd in os.listdir("/proc/%s/fd" % pid):
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:   # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def attack_rdcp(tag, seconds):
    end, hit = time.time() + seconds, set()
    counts = {"refused": 0, "accepted": 0, "cut": 0}
    while time.time() < end:
        for p in rdcp_server_ports(tag) - hit:
            hit.add(p)
            one_wrongkey("127.0.0.1", p, counts)
            print("attack-rdcp: ports %s, wrong keys %s" % (sorted(hit), counts), flush=True)
        time.sleep(0.005)
    return 0 if hit and not counts["accepted"] else 1


def main(a):
    if a[0] in ("idle", "garbage", "wrongkey"):
        return burst(a[0], a[1], int(a[2]), int(a[3]), float(a[4]) if len(a) > 4 else 30)
    if a[0] == "flood":
        return flood(a[1], int(a[2]), float(a[3]))
    if a[0] == "send":
        bind = a[a.index("--bind") + 1] if "--bind" in a else None
        streams = int(a[a.index("--streams") + 1]) if "--streams" in a else 1
        try:
            return send(a[1], int(a[2]), a[3], a[4], bind, streams)
        except (OSError, ConnectionError, ValueError) as e:
            print("send: %s" % e)
            return 10
    if a[0] == "silent-listen":
        return silent_listen(int(a[1]), float(a[2]))
    if a[0] == "attack-rdcp":
        return attack_rdcp(a[1], float(a[2]))
    print(__doc__, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
