"""make bench's change-driven scenarios (issue 13): bytes on the wire and time.

Imported by bench.py; selected with --sets (names in SETS). Each scenario
runs rdcp and its peer in the same run, alternating (the order flips every
repetition), and records wire bytes from `rdcp --json` (bytes_total_sent +
bytes_total_received) and `rsync --stats` (Total bytes sent + received).

  grown-xfs   video: 8 x 512 MiB, each +64 MiB per repetition; rdcp (default
              mode) vs rsync -a, destination on a loop-mounted XFS (reflink=1)
  grown-ext4  the same on a loop-mounted ext4: rdcp, rdcp --append, rsync,
              rsync --append, and the floors (cp of the old files on that fs;
              dd of the appended bytes and the ssh login, both in the
              contenders' turn, and their sum: what a tool that logs in
              and appends must spend at least)
  image       one 4 GiB file, 200 scattered 4 KiB writes per repetition: rdcp,
              rdcp --inplace, rsync, rsync --inplace, and the floor of the
              default mode (cp of the old file); destination on this disk
  image-xfs   the same, rdcp vs rsync, destination on a loop-mounted XFS
  resume      rdcp --partial killed (-9, the sender) at half of a 4 GiB file,
              then run again; and without --partial: no temp file left
  fullcopy    4 x 1 GiB, tmpfs to tmpfs over TCP, vs iperf3 -n on loopback,
              rdsend FILE -> rdrecv FILE of the same bytes, and the floor
              (cp -r on the tmpfs)
  sparse      a 4 GiB file with 64 MiB of data: rdcp -S vs rsync -S

A flag today's rdcp refuses ("not implemented yet") is recorded as
"n/a: refused", not as a failure: the scenario measures the feature once it
is merged. Loop images and tmpfs mounts are removed in finally blocks (also
on Ctrl-C and SIGTERM). Mounting needs root; without it those scenarios say
"n/a: not root".
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import time

from bench import MiB, RDCP, log, sh, stream_bytes

KiB = 1024
CHUNK = 4 * MiB          # docs/index.md: chunk digests per 4 MiB
BLOCK = 64 * KiB         # the block delta's block size (issue 13, item 2)
SETS = ["grown-xfs", "grown-ext4", "image", "image-xfs", "resume", "fullcopy", "sparse"]
REFUSED = ("not implemented yet", "not supported yet")


class NotApplicable(Exception):
    pass


def med3(v):
    """(min, median, max) of the numbers in v, or None."""
    v = [x for x in v if x is not None]
    return (min(v), statistics.median(v), max(v)) if v else None


def fmt3(t, f="%.3f"):
    if not t:
        return "-"
    return (f % t[1]) + " (" + (f % t[0]) + "-" + (f % t[2]) + ")"


def mib(x):
    return None if x is None else x / MiB


class Delta:
    def __init__(self, b):
        self.b, self.a, self.w = b, b.a, b.w
        self.runs = []          # one dict per timed run
        self.facts = {}         # set -> text for the report
        self.csv = os.path.join(self.a.results, "bench-delta.csv")
        with open(self.csv, "w") as f:
            f.write("set,contender,rep,status,seconds,wire_bytes,payload_bytes,extra\n")
        self.env = dict(os.environ, XDG_CACHE_HOME=f"{self.w}/cache-client")

    # ------------------------------------------------------------ helpers
    def record(self, **r):
        r.setdefault("status", "ok")
        self.runs.append(r)
        with open(self.csv, "a") as f:
            f.write(",".join(str(r.get(k, "") if r.get(k) is not None else "") for k in
                             ("set", "contender", "rep", "status", "seconds", "wire",
                              "payload")) + "," + json.dumps(r.get("extra", "")).replace(",", ";")
                    + "\n")

    def rdcp_cmd(self, flags, src, dst, remote="rdcp-remote"):
        return [RDCP, "--sync", "-r", "--transport", "tcp", "--json", "-e", self.b.rsh,
                "--rdcp-path", f"{self.w}/{remote}"] + flags + [src, f"127.0.0.1:{dst}"]

    def rdcp(self, flags, src, dst, check=True, cache=None):
        """One rdcp push; returns (seconds, json dict); raises NotApplicable when refused.
        cache: the sender's index directory (XDG_CACHE_HOME), when not the run's."""
        env = dict(self.env, XDG_CACHE_HOME=cache) if cache else self.env
        t0 = time.monotonic()
        p = subprocess.run(self.rdcp_cmd(flags, src, dst), env=env,
                           capture_output=True, text=True)
        dt = time.monotonic() - t0
        if p.returncode and any(x in p.stderr for x in REFUSED):
            raise NotApplicable("refused: " + p.stderr.strip().splitlines()[-1])
        if p.returncode and check:
            raise SystemExit(f"bench: rdcp {' '.join(flags)} failed (exit {p.returncode}):\n"
                             f"{p.stderr[-2000:]}")
        j = {}
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
        return dt, j

    @staticmethod
    def wire(j):
        if "bytes_total_sent" not in j:
            return None
        return j["bytes_total_sent"] + j.get("bytes_total_received", 0)

    def rsync(self, flags, src, dst):
        """One rsync -a push through the same sshd; returns (seconds, wire bytes)."""
        cmd = ["rsync", "-a", "--stats", "-e", self.b.rsh, "--rsync-path",
               f"{self.w}/rsync-remote"] + flags + [src, f"127.0.0.1:{dst}"]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.monotonic() - t0
        if p.returncode:
            raise SystemExit(f"bench: rsync {' '.join(flags)} failed:\n{p.stderr[-2000:]}")
        n = 0
        for k in ("Total bytes sent", "Total bytes received"):
            m = re.search(k + r": ([\d,.]+)", p.stdout)
            n += int(m.group(1).replace(",", "").replace(".", "")) if m else 0
        return dt, n

    def verify(self, src, dst):
        d = subprocess.run(["rsync", "-anci", "--delete", f"{src}/", f"{dst}/"],
                           capture_output=True, text=True).stdout
        if d.strip():
            raise SystemExit(f"bench: rdcp's copy {dst} differs from {src}:\n{d[:2000]}")

    def step(self, name, c, rep):
        log(f"bench: {name} {c} rep {rep}/{self.a.reps} ...")

    def need_root(self):
        if os.geteuid() != 0:
            raise NotApplicable("not root (loop and tmpfs mounts)")

    def mount_image(self, fs, size, where, undo):
        """A sparse image file of `size` bytes formatted as fs, loop-mounted at where."""
        self.need_root()
        if fs == "xfs" and not shutil.which("mkfs.xfs"):
            log("bench: installing xfsprogs (mkfs.xfs) ...")
            subprocess.run("apt-get install -y -q xfsprogs >/dev/null", shell=True)
        img = where + ".img"
        os.makedirs(where, exist_ok=True)
        with open(img, "wb") as f:
            f.truncate(size)
        undo.append(lambda: os.unlink(img))
        mk = (["mkfs.xfs", "-q", "-f", "-m", "reflink=1", img] if fs == "xfs" else
              ["mkfs.ext4", "-q", "-F", img])
        try:
            subprocess.run(mk, check=True, capture_output=True, text=True)
            subprocess.run(["mount", "-o", "loop", img, where], check=True,
                           capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise NotApplicable(f"no loop-mounted {fs}: {getattr(e, 'stderr', '') or e}".strip())
        undo.append(lambda: umount(where))

    def mount_tmpfs(self, size, where, undo):
        self.need_root()
        os.makedirs(where, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where],
                           capture_output=True, text=True)
        if p.returncode:
            raise NotApplicable("no tmpfs: " + p.stderr.strip())
        undo.append(lambda: umount(where))

    def run_set(self, name):
        undo = []
        try:
            getattr(self, "set_" + name.replace("-", "_"))(undo)
        except NotApplicable as e:
            log(f"bench: {name}: n/a: {e}")
            self.record(set=name, contender="*", rep=0, status=f"n/a: {e}")
        finally:
            for u in reversed(undo):
                try:
                    u()
                except Exception as e:          # keep undoing the rest
                    log(f"bench: cleanup: {e}")

    def floor(self, name, rep, src, old, fl, what):
        """The floor of rdcp's default mode without reflinks: the old copy's
        bytes copied once within the destination's filesystem."""
        self.b.settle(src)
        t0 = time.monotonic()
        sh(f"cp -r --reflink=never '{old}' '{fl}'")
        self.record(set=name, contender=f"floor: cp of the old {what}", rep=rep,
                    seconds=time.monotonic() - t0)
        shutil.rmtree(fl)

    # ------------------------------------------------------------ grown
    def set_grown_xfs(self, undo):
        self.grown("xfs", undo)

    def set_grown_ext4(self, undo):
        self.grown("ext4", undo)

    def grown(self, fs, undo):
        s, w = self.a.scale, self.w
        name = f"grown-{fs}"
        n, base = 8, max(MiB, int(512 * MiB * s))
        grow = max(MiB // 8, int(64 * MiB * s))
        src = f"{w}/src-{name}"
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        undo.append(lambda: shutil.rmtree(src, ignore_errors=True))
        log(f"bench: {name}: generating {n} x {base / MiB:.1f} MiB ...")
        for i in range(n):
            stream_bytes(f"{src}/cam{i}.mxf", base, f"video{i}")
        cs = ({"rdcp": [], "rsync": []} if fs == "xfs" else
              {"rdcp": [], "rdcp --append": ["--append"], "rsync": [], "rsync --append": ["--append"]})
        final = n * (base + self.a.reps * grow)
        mnt = f"{w}/mnt-{name}"
        # every destination, plus one file's temp copy, plus the floors' copies, plus room
        floors = 2 if fs == "ext4" else 1
        size = (len(cs) + floors) * final + base + self.a.reps * grow + 512 * MiB
        self.mount_image(fs, size, mnt, undo)
        dst = {c: f"{mnt}/{c.replace(' --', '-')}" for c in cs}
        # each rdcp mode has SRC's index to itself, as a user who runs one
        # mode: a default run reads again a file whose old part --append
        # took unread, and would pay for the other mode's shortcut
        cache = {c: f"{w}/cache-{name}-{c.replace(' --', '-')}" for c in cs}
        log(f"bench: {name}: seeding {len(cs)} destinations on {fs} (untimed) ...")
        for c in cs:
            if c.startswith("rdcp"):
                shutil.rmtree(cache[c], ignore_errors=True)
                undo.append(lambda d=cache[c]: shutil.rmtree(d, ignore_errors=True))
                # both sides' indexes, as after any earlier run
                self.rdcp([], f"{src}/", dst[c], cache=cache[c])
            else:
                self.rsync([], f"{src}/", dst[c])
        if fs == "ext4":
            # the floor of --append: the new bytes appended by dd, on the same disk
            fa = f"{mnt}/floor-append"
            sh(f"cp -r '{src}' '{fa}'")
        budget = 1.05 * n * (grow + CHUNK)
        self.facts[name] = (f"{n} files of {base / MiB:.1f} MiB, each +{grow / MiB:.2f} MiB per "
                            f"repetition; wire budget 1.05 × ({n} × {grow / MiB:.2f} MiB appended "
                            f"+ {n} × 4 MiB) = {budget / MiB:.1f} MiB; destination on a "
                            f"{size / (1 << 30):.1f} GiB loop-mounted {fs}"
                            + (" (reflink=1)" if fs == "xfs" else ""))
        self.budget = getattr(self, "budget", {})
        self.budget[name] = budget
        refused = set()
        for rep in range(1, self.a.reps + 1):
            for i in range(n):
                stream_bytes(f"{src}/cam{i}.mxf", grow, f"grow{rep}-{i}", "ab")
            # the floor of --append runs in the contenders' turn, after the
            # same settle: on these machines the memory a write lands in is
            # warm or cold depending on what ran just before (docs/benchmarks.md)
            DD, LOGIN = "floor: dd of the appended bytes", "floor: ssh login"
            order = list(cs) + ([DD, LOGIN] if fs == "ext4" else [])
            fl = {}
            order = order if rep % 2 else order[::-1]
            for c in order:
                if c in refused:
                    continue
                self.step(name, c, rep)
                self.b.settle(src)
                if c == DD:
                    at = base + (rep - 1) * grow
                    t0 = time.monotonic()
                    sh(" && ".join(f"dd if='{src}/cam{i}.mxf' of='{fa}/cam{i}.mxf' bs=4M "
                                   f"skip={at} iflag=skip_bytes oflag=append conv=notrunc "
                                   f"status=none" for i in range(n)))
                    dt = fl[c] = time.monotonic() - t0
                    self.record(set=name, contender=DD, rep=rep, seconds=dt)
                elif c == LOGIN:
                    t0 = time.monotonic()
                    sh(f"{self.b.rsh} 127.0.0.1 true")
                    dt = fl[c] = time.monotonic() - t0
                    self.record(set=name, contender=LOGIN, rep=rep, seconds=dt)
                elif c.startswith("rdcp"):
                    try:
                        dt, j = self.rdcp(cs[c], f"{src}/", dst[c], cache=cache[c])
                    except NotApplicable as e:
                        refused.add(c)
                        self.record(set=name, contender=c, rep=rep, status=f"n/a: {e}")
                        continue
                    self.verify(src, dst[c])
                    self.record(set=name, contender=c, rep=rep, seconds=dt, wire=self.wire(j),
                                payload=j.get("bytes_sent"))
                else:
                    dt, nb = self.rsync(cs[c], f"{src}/", dst[c])
                    self.record(set=name, contender=c, rep=rep, seconds=dt, wire=nb)
                log(f"bench: {name} {c} rep {rep}: {dt:.3f} s")
            if fs == "ext4":
                if len(fl) == 2:   # what any tool that logs in must spend
                    self.record(set=name, contender="floor: ssh login + dd", rep=rep,
                                seconds=fl[DD] + fl[LOGIN])
                self.floor(name, rep, src, dst["rsync"], f"{mnt}/floor", "files")

    # ------------------------------------------------------------ image
    def set_image(self, undo):
        self.image("", undo)

    def set_image_xfs(self, undo):
        self.image("xfs", undo)

    def image(self, fs, undo):
        """Nightly replication of a disk image: 200 scattered 4 KiB writes per
        repetition. In the scratch directory (this machine's ext4), where the
        default mode must copy the unchanged chunks into the new file (the
        floor row), with --inplace for both tools; or (fs "xfs") on a
        loop-mounted XFS, where the unchanged chunks are reflinked."""
        s, w = self.a.scale, self.w
        name = f"image-{fs}" if fs else "image"
        size = max(4 * MiB, int(4096 * MiB * s)) // 4096 * 4096
        nw = 200
        src = f"{w}/src-{name}"
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        undo.append(lambda: shutil.rmtree(src, ignore_errors=True))
        log(f"bench: {name}: generating one {size / MiB:.0f} MiB file ...")
        stream_bytes(f"{src}/disk.img", size, "image")
        cs = ({"rdcp": [], "rsync": []} if fs else
              {"rdcp": [], "rdcp --inplace": ["--inplace"], "rsync": [],
               "rsync --inplace": ["--inplace"]})
        if fs:
            base = f"{w}/mnt-{name}"
            self.mount_image(fs, (len(cs) + 2) * size + 512 * MiB, base, undo)
        else:
            base = w
        dst = {c: f"{base}/dst-{name}-{c.replace(' --', '-')}" for c in cs}
        for c in cs:
            shutil.rmtree(dst[c], ignore_errors=True)
            undo.append(lambda d=dst[c]: shutil.rmtree(d, ignore_errors=True))
            if c.startswith("rdcp"):
                self.rdcp([], f"{src}/", dst[c])
            else:
                self.rsync([], f"{src}/", dst[c])
        self.facts[name] = (f"one {size / MiB:.0f} MiB file, {nw} writes of 4 KiB at "
                            f"seeded random offsets per repetition; wire limit 2 × {nw} × "
                            f"64 KiB = {2 * nw * BLOCK / MiB:.1f} MiB; destination "
                            + (f"on a loop-mounted {fs} (reflink=1)" if fs else
                               "in the scratch directory"))
        for rep in range(1, self.a.reps + 1):
            r = random.Random(f"image{rep}")
            with open(f"{src}/disk.img", "r+b") as f:
                for _ in range(nw):
                    f.seek(r.randrange(0, size // 4096) * 4096)
                    f.write(r.randbytes(4096))
            order = list(cs) if rep % 2 else list(cs)[::-1]
            for c in order:
                self.step(name, c, rep)
                self.b.settle(src)
                if c.startswith("rdcp"):
                    dt, j = self.rdcp(cs[c], f"{src}/", dst[c])
                    self.verify(src, dst[c])
                    self.record(set=name, contender=c, rep=rep, seconds=dt, wire=self.wire(j),
                                payload=j.get("bytes_sent"))
                else:
                    dt, nb = self.rsync(cs[c], f"{src}/", dst[c])
                    self.record(set=name, contender=c, rep=rep, seconds=dt, wire=nb)
                log(f"bench: {name} {c} rep {rep}: {dt:.3f} s")
            if not fs:
                self.floor(name, rep, src, dst["rsync"], f"{w}/floor-image", "file")

    # ------------------------------------------------------------ resume
    def landed(self, dst):
        """Bytes allocated so far in the files some process has open under dst
        (the receiver's temp file, named or O_TMPFILE; the size is set up front,
        so allocated blocks tell what landed)."""
        n = 0
        for fd in glob.glob("/proc/[0-9]*/fd/*"):
            try:
                if os.readlink(fd).startswith(dst + "/"):
                    st = os.stat(fd)
                    n = max(n, st.st_blocks * 512)
            except OSError:
                pass
        return n

    def busy(self, dst):
        for fd in glob.glob("/proc/[0-9]*/fd/*"):
            try:
                if os.readlink(fd).startswith(dst):
                    return True
            except OSError:
                pass
        return False

    def kill_at_half(self, flags, src, dst, size, remote="rdcp-remote"):
        """Start rdcp FLAGS, kill -9 the sender (this side's rdcp) at half;
        returns the fraction landed then, or None when it finished first."""
        # the whole file held to ~3 s (1 s for a small one, in smoke runs), so
        # that a poll every few ms sees half
        secs = 3 if size >= 256 * MiB else 1
        bw = ["--bwlimit", str(max(64, size // secs // KiB))]
        p = subprocess.Popen(self.rdcp_cmd(flags + bw, f"{src}/", dst, remote), env=self.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        frac = None
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end:
            if p.poll() is not None:
                break
            got = self.landed(dst)
            if got >= size // 2:
                p.send_signal(signal.SIGKILL)
                frac = got / size
                break
            time.sleep(0.005)
        p.wait()
        # the receiver sees the connection drop and exits
        t_end = time.monotonic() + 30
        while self.busy(dst) and time.monotonic() < t_end:
            time.sleep(0.05)
        return frac

    def set_resume(self, undo):
        s, w = self.a.scale, self.w
        size = max(8 * MiB, int(4096 * MiB * s))
        src = f"{w}/src-resume"
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        undo.append(lambda: shutil.rmtree(src, ignore_errors=True))
        log(f"bench: resume: generating one {size / MiB:.0f} MiB file ...")
        stream_bytes(f"{src}/model.bin", size, "resume")
        self.facts["resume"] = (f"one {size / MiB:.0f} MiB file; the sender (rdcp client, "
                                f"pushing through ssh) killed -9 once half is allocated in the "
                                f"receiver's file; limit for the second run "
                                f"0.55 × {size / MiB:.0f} = {0.55 * size / MiB:.1f} MiB")
        self.resume_size = size
        # the receiver's files unnamed (O_TMPFILE, the default) vanish with it;
        # the named road (filesystems without O_TMPFILE) must clean up too
        named = f"{w}/rdcp-remote-named"
        with open(named, "w") as f:
            f.write(f'#!/bin/sh\nRDCP_TEST_NO_TMPFILE=1 exec "{w}/rdcp-remote" "$@"\n')
        os.chmod(named, 0o755)
        for rep in range(1, self.a.reps + 1):
            cs = ["--partial", "none", "named"]
            for c in (cs if rep % 2 else cs[::-1]):
                dst = f"{w}/dst-resume-{rep}-{c.strip('-')}"
                shutil.rmtree(dst, ignore_errors=True)
                undo.append(lambda d=dst: shutil.rmtree(d, ignore_errors=True))
                self.b.settle(src)
                if c in ("none", "named"):
                    what = "no --partial: temp files left" + (
                        " (named temp files)" if c == "named" else "")
                    self.step("resume", what, rep)
                    frac = self.kill_at_half([], src, dst, size, "rdcp-remote-named"
                                             if c == "named" else "rdcp-remote")
                    left = glob.glob(f"{dst}/**/.rdcp-tmp*", recursive=True)
                    self.record(set="resume", contender=what,
                                rep=rep, status="ok" if frac else "n/a: finished before the kill",
                                wire=None, extra={"killed_at": frac, "left": len(left)},
                                left=len(left), frac=frac)
                    log(f"bench: resume {what} rep {rep}: killed at {frac}, {len(left)}")
                    continue
                self.step("resume", "--partial", rep)
                try:
                    frac = self.kill_at_half(["--partial"], src, dst, size)
                    self.b.settle(src)
                    dt, j = self.rdcp(["--partial"], f"{src}/", dst)
                except NotApplicable as e:
                    self.record(set="resume", contender="--partial, second run", rep=rep,
                                status=f"n/a: {e}")
                    continue
                ok = subprocess.run(["cmp", f"{src}/model.bin", f"{dst}/model.bin"]).returncode == 0
                self.record(set="resume", contender="--partial, second run", rep=rep,
                            status="ok" if frac else "n/a: finished before the kill",
                            seconds=dt, wire=self.wire(j), payload=j.get("bytes_sent"),
                            extra={"killed_at": frac, "cmp": ok}, frac=frac, cmp=ok)
                log(f"bench: resume --partial rep {rep}: killed at {frac}, second run "
                    f"{dt:.3f} s, {self.wire(j)} bytes, cmp {'ok' if ok else 'DIFFERS'}")

    # ------------------------------------------------------------ fullcopy
    def set_fullcopy(self, undo):
        s, w = self.a.scale, self.w
        n, fsize = 4, max(MiB, int(1024 * MiB * s))
        total = n * fsize
        mnt = f"{w}/mnt-fullcopy"
        # the four files, rdsend's one file of the same bytes, one copy
        self.mount_tmpfs(3 * total + 64 * MiB, mnt, undo)
        src = f"{mnt}/src"
        os.makedirs(src)
        log(f"bench: fullcopy: generating {n} x {fsize / MiB:.0f} MiB on tmpfs ...")
        for i in range(n):
            stream_bytes(f"{src}/blob{i}", fsize, f"full{i}")
        one = f"{mnt}/one"
        sh(f"cat '{src}'/blob* >'{one}'")
        self.facts["fullcopy"] = (f"{n} × {fsize / MiB:.0f} MiB, tmpfs to tmpfs, rdcp over TCP "
                                  f"through ssh to 127.0.0.1 vs iperf3 -n {total} on loopback; "
                                  f"rdsend FILE -> rdrecv FILE over TCP of one file of the "
                                  f"same {total / MiB:.0f} MiB; the floor: cp -r of the four "
                                  f"files within the tmpfs (one in-kernel copy, no network)")
        self.rdcp([], f"{src}/", f"{mnt}/prime")       # the indexes, as in the steady state
        shutil.rmtree(f"{mnt}/prime")
        cs = ["rdcp", "iperf3", "rdsend -> rdrecv", "floor: cp -r"]
        outs = [f"{mnt}/dst", f"{mnt}/out", f"{mnt}/cp"]

        def clear():
            # The last writer's copy goes just before the next one writes:
            # this machine's guest hands memory free for 2 s back to its host
            # (page_reporting), and a write into such pages costs several
            # times one into pages freed a moment ago (docs/benchmarks.md)
            for o in outs:
                if os.path.isdir(o):
                    shutil.rmtree(o)
                elif os.path.exists(o):
                    os.unlink(o)
        for rep in range(1, self.a.reps + 1):
            for c in (cs if rep % 2 else cs[::-1]):
                self.step("fullcopy", c, rep)
                if c == "rdsend -> rdrecv":
                    clear()
                    dt = self.rdsend_rdrecv(one, outs[1])
                    self.record(set="fullcopy", contender=c, rep=rep, seconds=dt, wire=total)
                elif c == "floor: cp -r":
                    clear()
                    t0 = time.monotonic()
                    sh(f"cp -r '{src}' '{outs[2]}'")
                    dt = time.monotonic() - t0
                    self.record(set="fullcopy", contender=c, rep=rep, seconds=dt)
                elif c == "rdcp":
                    clear()
                    dt, j = self.rdcp([], f"{src}/", outs[0])
                    self.verify(src, outs[0])
                    self.record(set="fullcopy", contender=c, rep=rep, seconds=dt,
                                wire=self.wire(j), payload=j.get("bytes_sent"))
                else:
                    port = self.b.port()
                    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.3)
                    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-n",
                                          str(total), "-J"], capture_output=True, text=True)
                    srv.wait()
                    dt = json.loads(out.stdout)["end"]["sum_received"]["seconds"]
                    self.record(set="fullcopy", contender=c, rep=rep, seconds=dt, wire=total)
                log(f"bench: fullcopy {c} rep {rep}: {dt:.3f} s")
        clear()

    def rdsend_rdrecv(self, src, out):
        """rdsend src -> rdrecv out over TCP on loopback; seconds from rdsend's
        start to both ends' exit (rdrecv is listening before the clock starts)."""
        d = os.path.dirname(RDCP)
        env = dict(os.environ, RDCP_KEY="bench-" + str(os.getpid()))
        rv = subprocess.Popen([f"{d}/rdrecv", "--transport", "tcp", "--listen", "127.0.0.1",
                               "0", "-", out], env=env, stderr=subprocess.PIPE, text=True)
        port = None
        for line in rv.stderr:
            m = re.search(r"listening on port (\d+)", line)
            if m:
                port = m.group(1)
                break
        if not port:
            rv.kill()
            raise SystemExit("bench: rdrecv did not say its port")
        t0 = time.monotonic()
        p = subprocess.run([f"{d}/rdsend", "--transport", "tcp", "127.0.0.1", port, "-", src],
                           env=env, capture_output=True, text=True)
        rc = rv.wait()
        dt = time.monotonic() - t0
        if p.returncode or rc:
            raise SystemExit(f"bench: rdsend -> rdrecv failed ({p.returncode}, {rc}):\n"
                             f"{p.stderr[-2000:]}")
        if subprocess.run(["cmp", src, out]).returncode:
            raise SystemExit(f"bench: rdrecv's {out} differs from {src}")
        return dt

    # ------------------------------------------------------------ sparse
    def set_sparse(self, undo):
        s, w = self.a.scale, self.w
        size = max(4 * MiB, int(4096 * MiB * s)) // 4096 * 4096
        reg = max(4096, int(MiB * s) // 4096 * 4096)
        src = f"{w}/src-sparse"
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        undo.append(lambda: shutil.rmtree(src, ignore_errors=True))
        # 64 regions, one in each 64th of the file at a seeded offset within it
        r = random.Random("sparse")
        slot = size // 64
        f = f"{src}/vm.img"
        with open(f, "wb") as fh:
            fh.truncate(size)
            for i in range(64):
                off = i * slot + r.randrange(0, (slot - reg) // 4096 + 1) * 4096
                fh.seek(off)
                fh.write(r.randbytes(reg))
        data = 64 * reg
        alloc_src = os.stat(f).st_blocks * 512
        limit = data * 70 / 64
        self.facts["sparse"] = (f"one {size / MiB:.0f} MiB file, 64 regions of "
                                f"{reg / KiB:.0f} KiB = {data / MiB:.2f} MiB of data "
                                f"({alloc_src / MiB:.2f} MiB allocated), the rest holes; "
                                f"limits {limit / MiB:.2f} MiB on the wire and allocated")
        self.sparse_limit = limit
        cs = {"rdcp -S": ["-S"], "rsync -S": ["-S"], "rdcp (no -S)": []}
        refused = set()
        for rep in range(1, self.a.reps + 1):
            for c in (list(cs) if rep % 2 else list(cs)[::-1]):
                dst = f"{w}/dst-sparse"
                shutil.rmtree(dst, ignore_errors=True)
                undo.append(lambda d=dst: shutil.rmtree(d, ignore_errors=True))
                if c in refused:
                    continue
                self.step("sparse", c, rep)
                self.b.settle(src)
                if c.startswith("rdcp"):
                    try:
                        dt, j = self.rdcp(cs[c], f"{src}/", dst)
                    except NotApplicable as e:
                        refused.add(c)
                        self.record(set="sparse", contender=c, rep=rep, status=f"n/a: {e}")
                        continue
                    self.verify(src, dst)
                    nb, pl = self.wire(j), j.get("bytes_sent")
                else:
                    dt, nb = self.rsync(cs[c], f"{src}/", dst)
                    pl = None
                sh("sync")
                alloc = os.stat(f"{dst}/vm.img").st_blocks * 512
                self.record(set="sparse", contender=c, rep=rep, seconds=dt, wire=nb,
                            payload=pl, alloc=alloc, extra={"allocated": alloc})
                log(f"bench: sparse {c} rep {rep}: {dt:.3f} s, {nb} bytes, {alloc} allocated")
                shutil.rmtree(dst)

    # ------------------------------------------------------------ report
    def stats(self, dset, c, key):
        rs = [r for r in self.runs if r["set"] == dset and r["contender"] == c
              and r["status"] == "ok"]
        return med3([r.get(key) for r in rs])

    def status(self, dset, c):
        """'ok' when some run of dset/c has figures, else the n/a text of one
        of its runs (or of the whole set)."""
        rs = [r for r in self.runs if r["set"] == dset and r["contender"] in (c, "*")]
        if any(r["status"] == "ok" for r in rs):
            return "ok"
        return rs[0]["status"] if rs else "n/a: not run"

    def target(self, out, text, dset, c, key, lim, peer=None, peer_key=None,
               invert=False, scale=1.0):
        """ratio = value(c)/value(peer) (or /scale); met when <= lim (>= when invert)."""
        st = self.status(dset, c)
        if st == "ok" and peer:
            st = self.status(dset, peer)
        a = self.stats(dset, c, key)
        b = self.stats(dset, peer, peer_key or key) if peer else (scale, scale, scale)
        if st != "ok" or not a or not b:
            out.append({"target": text, "ratio": None, "met": None,
                        "status": st if st != "ok" else "n/a: no figures"})
            return
        if invert:          # a speed ratio: peer time / our time
            rat = (b[0] / a[2], b[1] / a[1], b[2] / a[0])
            met = rat[1] >= lim
        else:
            rat = (a[0] / b[2], a[1] / b[1], a[2] / b[0])
            met = rat[1] <= lim
        out.append({"target": text, "ratio": round(rat[1], 3), "ratio_min": round(rat[0], 3),
                    "ratio_max": round(rat[2], 3), "met": met, "status": "ok"})

    def targets(self):
        t = []
        for fs in ("xfs", "ext4"):
            d = f"grown-{fs}"
            if not any(r["set"] == d for r in self.runs):
                continue
            bud = getattr(self, "budget", {}).get(d, 1)
            self.target(t, f"{d}: rdcp wire bytes ≤ 1.05 × (appended + 1 chunk per file)",
                        d, "rdcp", "wire", 1.0, scale=bud)
            self.target(t, f"{d}: rdcp ≤ {0.2 if fs == 'xfs' else 0.7} × rsync (time)",
                        d, "rdcp", "seconds", 0.2 if fs == "xfs" else 0.7, peer="rsync")
            if fs == "ext4":
                self.target(t, f"{d}: rdcp --append wire bytes ≤ 1.05 × (appended + 1 chunk "
                            "per file)", d, "rdcp --append", "wire", 1.0, scale=bud)
                self.target(t, f"{d}: rdcp --append ≤ 0.2 × rsync --append (time)",
                            d, "rdcp --append", "seconds", 0.2, peer="rsync --append")
                self.target(t, f"{d}: the floor of --append (dd of the appended bytes) ≤ 0.2 "
                            "× rsync --append? (not a target: where it is not, 0.2 is under "
                            "the floor)", d, "floor: dd of the appended bytes", "seconds", 0.2,
                            peer="rsync --append")
                self.target(t, f"{d}: the floor of --append over ssh (the login + dd) ≤ 0.2 "
                            "× rsync --append? (not a target: where it is not, 0.2 is under "
                            "the floor)", d, "floor: ssh login + dd", "seconds", 0.2,
                            peer="rsync --append")
        for d in ("image", "image-xfs"):
            if not any(r["set"] == d for r in self.runs):
                continue
            self.target(t, f"{d}: rdcp wire bytes ≤ 2 × 200 × 64 KiB", d, "rdcp",
                        "wire", 1.0, scale=2 * 200 * BLOCK)
            self.target(t, f"{d}: rdcp ≤ 0.25 × rsync (time)", d, "rdcp", "seconds",
                        0.25, peer="rsync")
            if d == "image":
                self.target(t, f"{d}: rdcp --inplace ≤ 0.25 × rsync --inplace (time)", d,
                            "rdcp --inplace", "seconds", 0.25, peer="rsync --inplace")
        if any(r["set"] == "resume" for r in self.runs):
            size = getattr(self, "resume_size", 1)
            self.target(t, "resume: second run with --partial, wire bytes ≤ 0.55 × the file",
                        "resume", "--partial, second run", "wire", 0.55, scale=size)
            v = [r.get("cmp") for r in self.runs if r["set"] == "resume"
                 and r["contender"] == "--partial, second run" and r["status"] == "ok"]
            t.append({"target": "resume: the resumed file verifies (cmp)",
                      "ratio": None, "met": all(v) if v else None,
                      "status": "ok" if v else self.status("resume", "--partial, second run"),
                      "value": f"{sum(map(bool, v))}/{len(v)} identical"})
            v = [r.get("left") for r in self.runs if r["set"] == "resume"
                 and r["contender"].startswith("no --partial") and r["status"] == "ok"]
            t.append({"target": "resume: without --partial, no .rdcp-tmp-* left after kill -9",
                      "ratio": None, "met": (max(v) == 0) if v else None,
                      "status": "ok" if v else self.status("resume",
                                                           "no --partial: temp files left"),
                      "value": f"{max(v) if v else '-'} left"})
        if any(r["set"] == "fullcopy" for r in self.runs):
            self.target(t, "fullcopy: rdcp speed ≥ 0.6 × iperf3 (tmpfs, TCP)", "fullcopy",
                        "rdcp", "seconds", 0.6, peer="iperf3", invert=True)
            self.target(t, "fullcopy: the floor's speed (cp -r, no network) ≥ 0.6 × iperf3? "
                        "(not a target: where it is not, 0.6 is under the floor)", "fullcopy",
                        "floor: cp -r", "seconds", 0.6, peer="iperf3", invert=True)
            self.target(t, "fullcopy: rdsend FILE -> rdrecv FILE at least as fast as rdcp "
                        "(the same bytes)", "fullcopy", "rdsend -> rdrecv", "seconds", 1.0,
                        peer="rdcp", invert=True)
        if any(r["set"] == "sparse" for r in self.runs):
            lim = getattr(self, "sparse_limit", 1)
            self.target(t, "sparse: rdcp -S wire bytes ≤ 70/64 × data", "sparse", "rdcp -S",
                        "wire", 1.0, scale=lim)
            self.target(t, "sparse: rdcp -S allocated in DST ≤ 70/64 × data", "sparse",
                        "rdcp -S", "alloc", 1.0, scale=lim)
        return t

    def report(self):
        """(markdown lines, targets, per-contender medians) for bench.md/bench.json."""
        if not self.runs:
            return [], [], []
        lines = ["Change-driven scenarios (issue 13), median (min-max) over "
                 f"{self.a.reps} reps:", ""]
        for d in SETS:
            if d in self.facts:
                lines.append(f"- {d}: {self.facts[d]}")
        lines += ["", "| set | contender | seconds | wire MiB | file data MiB | "
                  "allocated MiB | status |", "|---|---|---:|---:|---:|---:|---|"]
        seen, meds = [], []
        for r in self.runs:
            k = (r["set"], r["contender"])
            if k in seen or k[1] == "*":
                if k[1] == "*":
                    lines.append(f"| {k[0]} | (all) | | | | | {r['status']} |")
                continue
            seen.append(k)
            st = self.status(*k)
            sec, wi = self.stats(*k, "seconds"), self.stats(*k, "wire")
            pl, al = self.stats(*k, "payload"), self.stats(*k, "alloc")
            wi, pl, al = [tuple(map(mib, x)) if x else None for x in (wi, pl, al)]
            extra = ""
            if k[1].startswith("no --partial"):
                extra = "; temp files left: " + ", ".join(
                    str(x.get("left")) for x in self.runs if x["set"] == k[0]
                    and x["contender"] == k[1])
            if k[0] == "resume":
                extra += "; killed at " + ", ".join(
                    "%.2f" % x["frac"] if x.get("frac") else "-" for x in self.runs
                    if x["set"] == k[0] and x["contender"] == k[1])
            lines.append(f"| {k[0]} | {k[1]} | {fmt3(sec)} | {fmt3(wi, '%.2f')} | "
                         f"{fmt3(pl, '%.2f')} | {fmt3(al, '%.2f')} | {st}{extra} |")
            meds.append({"set": k[0], "contender": k[1], "status": st, "seconds": sec,
                         "wire_mib": wi, "payload_mib": pl, "allocated_mib": al})
        tg = self.targets()
        lines += ["", "Targets of the change-driven scenarios (ratio: median (min-max)):", "",
                  "| target | measured | met |", "|---|---|---|"]
        for t in tg:
            if t["status"] != "ok":
                v, m = "", t["status"]
            elif t.get("ratio") is not None:
                v = f"{t['ratio']} ({t['ratio_min']}-{t['ratio_max']})"
                m = "yes" if t["met"] else "NO"
            else:
                v, m = t.get("value", ""), "yes" if t["met"] else "NO"
            lines.append(f"| {t['target']} | {v} | {m} |")
        return lines, tg, meds


def umount(where):
    if subprocess.run(["umount", where], stderr=subprocess.DEVNULL).returncode:
        time.sleep(1)
        subprocess.run(["umount", "-l", where])
    shutil.rmtree(where, ignore_errors=True)
