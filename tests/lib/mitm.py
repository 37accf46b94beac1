#!/usr/bin/env python3
"""A man in the middle between rdsend and rdrecv, for the tests.

Listens on 127.0.0.1 (a port the kernel picks, written to --port-file),
forwards each connection to 127.0.0.1:--upstream, and reads the transport's
framing on the way (docs/protocol.md: a 32-byte header, the payload, and a
16-byte tag after DATA, END and VERDICT when the receiver's HELLO has the
ENCRYPT flag). It serves --conns connections (rdsend's streams, accepted in
stream order), then writes --report and exits; it gives up after --timeout s.

Attacks, on DATA message number K (counted from 0) of stream 0:
  --flip K:OFF      flip the low bit of payload byte OFF
  --flip-header K   flip the low bit of the header's `off` field
  --dup K           send it twice (a replay within the stream)
  --swap K          send K+1 before K
  --drop K          never send it
  --steal K         take it out of stream 0 and send it on stream 1 before
                    that stream's message K (a splice across streams)
  --forge-verdict K drop stream 0's messages from K on and its END, and
                    answer the sender with a forged VERDICT 0 (a tag of
                    random bytes when sealed); the receiver is cut off
  --record FILE     save what stream 0 sends after AUTH
  --replay FILE     send FILE (a recording of another session) instead of
                    what stream 0 sends after AUTH
The report: `marker_hits N` (occurrences of --marker in every byte the
sender sent through us, across message boundaries), `sealed 0|1`,
`attacked 0|1` (whether the attack found its message).
"""
import argparse
import os
import queue
import socket
import struct
import sys
import threading
import time

HDR, TAG = 32, 16
DATA, END, VERDICT, HELLO, AUTH, AUTH_OK = 1, 3, 4, 16, 17, 18
ENCRYPT = 1

lock = threading.Lock()
stats = {"marker_hits": 0, "sealed": 0, "attacked": 0}
stolen = queue.Queue()


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return bytes(b)


def read_msg(s, sealed):
    """One message: header + payload (+ tag for sealed DATA/END/VERDICT)."""
    h = recv_exact(s, HDR)
    t, n = h[0], struct.unpack(">I", h[4:8])[0]
    if sealed and t in (DATA, END, VERDICT):
        n += TAG
    return t, h + recv_exact(s, n)


class Conn:
    def __init__(self, idx, client, up, a):
        self.idx, self.client, self.up, self.a = idx, client, up, a
        self.sealed = False
        self.hello = threading.Event()
        self.forged = False
        self.tail = b""

    def scan(self, b):
        m = self.a.marker.encode()
        if not m:
            return
        buf = self.tail + b
        hits = buf.count(m)
        self.tail = buf[-(len(m) - 1):] if len(m) > 1 else b""
        with lock:
            stats["marker_hits"] += hits

    def send_up(self, b):
        self.scan(b)
        self.up.sendall(b)

    def s2c(self):
        """Receiver to sender: note the HELLO's flags; in --forge-verdict mode
        nothing after AUTH_OK reaches the sender from the receiver."""
        try:
            t, m = read_msg(self.up, False)
            if t == HELLO:
                self.sealed = bool(struct.unpack(">H", m[HDR + 6:HDR + 8])[0] & ENCRYPT)
                with lock:
                    stats["sealed"] = int(self.sealed)
            self.hello.set()
            self.client.sendall(m)
            t, m = read_msg(self.up, False)   # AUTH_OK (or AUTH_FAIL)
            self.client.sendall(m)
            while True:
                b = self.up.recv(65536)
                if not b:
                    break
                if self.forged or (self.a.forge_verdict is not None and self.idx == 0):
                    continue   # the real verdict never arrives
                self.client.sendall(b)
            self.client.shutdown(socket.SHUT_WR)
        except (OSError, EOFError):
            self.close()
        finally:
            self.hello.set()

    def c2s(self):
        try:
            t, m = read_msg(self.client, False)   # AUTH
            self.hello.wait(10)
            self.send_up(m)
            if self.idx == 0 and self.a.replay:
                with lock:
                    stats["attacked"] = 1
                with open(self.a.replay, "rb") as f:
                    self.send_up(f.read())
                while self.client.recv(65536):
                    pass
                self.up.shutdown(socket.SHUT_WR)
                return
            rec = open(self.a.record, "wb") if self.idx == 0 and self.a.record else None
            self.pump(rec)
            if rec:
                rec.close()
            self.up.shutdown(socket.SHUT_WR)
        except (OSError, EOFError):
            self.close()

    def pump(self, rec):
        a, k, held = self.a, 0, None
        while True:
            try:
                t, m = read_msg(self.client, self.sealed)
            except EOFError:
                return
            if rec:
                rec.write(m)
            if self.idx == 1 and a.steal is not None and t == DATA and k == a.steal:
                self.send_up(stolen.get(timeout=10))
            if self.idx == 0 and a.forge_verdict is not None and (
                    t == END or (t == DATA and k >= a.forge_verdict)):
                if t == END:
                    v = bytes([VERDICT]) + bytes(HDR - 1)
                    if self.sealed:
                        v += os.urandom(TAG)
                    self.forged = True
                    with lock:
                        stats["attacked"] = 1
                    self.client.sendall(v)
                    self.up.close()   # the receiver is cut off
                    while self.client.recv(65536):
                        pass
                    return
                k += 1
                continue
            if self.idx == 0 and t == DATA and held is not None:
                self.send_up(m)      # K+1 first,
                self.send_up(held)   # then K
                held = None
                k += 1
                continue
            if self.idx == 0 and t == DATA and a.swap is not None and k == a.swap:
                held = m
                with lock:
                    stats["attacked"] = 1
                k += 1
                continue
            if self.idx == 0 and t == DATA and self.attack(k, m):
                k += 1
                continue
            self.send_up(m)
            if t == DATA:
                k += 1

    def attack(self, k, m):
        """Do this stream-0 DATA message's attack, if it is the one; True if
        the message was dealt with here."""
        a = self.a
        kinds = [(a.flip and k == a.flip[0], "flip"),
                 (a.flip_header == k, "flip_header"), (a.dup == k, "dup"),
                 (a.drop == k, "drop"), (a.steal == k, "steal")]
        kind = next((n for hit, n in kinds if hit), None)
        if kind is None:
            return False
        with lock:
            stats["attacked"] = 1   # before sending: the receiver may hang up
        b = bytearray(m)
        if kind == "flip":
            b[HDR + a.flip[1]] ^= 1
        elif kind == "flip_header":
            b[23] ^= 1   # the last byte of `off`
        if kind in ("flip", "flip_header", "dup"):
            self.send_up(bytes(b))
        if kind == "dup":
            self.send_up(bytes(b))
        if kind == "steal":
            stolen.put(m)
        return True

    def close(self):
        for s in (self.client, self.up):
            try:
                s.close()
            except OSError:
                pass


def serve(conn):
    ts = [threading.Thread(target=conn.s2c), threading.Thread(target=conn.c2s)]
    for t in ts:
        t.start()
    return ts


def connect_up(port, deadline):
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--marker", default="")
    p.add_argument("--flip", type=lambda s: tuple(int(x) for x in s.split(":")))
    p.add_argument("--flip-header", type=int)
    p.add_argument("--dup", type=int)
    p.add_argument("--swap", type=int)
    p.add_argument("--drop", type=int)
    p.add_argument("--steal", type=int)
    p.add_argument("--forge-verdict", type=int)
    p.add_argument("--record")
    p.add_argument("--replay")
    a = p.parse_args()
    deadline = time.time() + a.timeout
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    ls.settimeout(a.timeout)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(tmp, a.port_file)
    threads = []
    try:
        for i in range(a.conns):
            c, _ = ls.accept()
            c.settimeout(max(1.0, deadline - time.time()))
            u = connect_up(a.upstream, deadline)
            threads += serve(Conn(i, c, u, a))
    except OSError as e:
        print(f"mitm: {e}", file=sys.stderr)
    for t in threads:
        t.join(max(0.1, deadline - time.time()))
    with open(a.report, "w") as f:
        for k, v in stats.items():
            f.write(f"{k} {v}\n")


if __name__ == "__main__":
    main()
