#!/usr/bin/env python3
"""rdcp against what users would pick instead, same data, same run.

  make bench                          the full run (minutes)
  benchmarks/bench.py --scale 0.001   a tiny smoke run (seconds)

Data sets (deterministic; --scale multiplies file counts and sizes):
  model  a Hugging Face hub cache: 4 x 1 GiB blobs, 2,000 small json/txt
         files, a snapshot of relative symlinks per model
  small  50,000 files of 100 B-16 KiB in 200 directories
  video  8 x 512 MiB files, then each grows by 64 MiB
  real   a tree nobody generated: this machine's installed files under
         /usr/include, /usr/share/{doc,perl,zoneinfo,locale,man} and
         /usr/lib/modules (headers, docs, man pages, locales, kernel
         modules: ~44,000 files of every size, ~3,800 symlinks), copied
         once; below --scale 0.1 only /usr/share/zoneinfo
  entries  1,000,000 empty files in 1,000 directories: what an entry
         costs, in memory on each end and in time (issue 33)

Scenarios: full (empty destination), noop (re-sync, nothing changed),
mod1 (1% of the files rewritten in place) for model, small and real, grown (each
video file appended to) for video.

Change-driven sets (benchmarks/delta.py, issue 13; wire bytes and time):
  grown-xfs, grown-ext4  video growth into a loop-mounted XFS / ext4
  image      4 GiB file, 200 scattered 4 KiB writes
  resume     kill -9 at half of a 4 GiB file, then --partial
  fullcopy   4 x 1 GiB tmpfs to tmpfs vs iperf3
  sparse     4 GiB file with 64 MiB of data, -S
('grown' selects both grown sets.)

Contenders, all pushing to 127.0.0.1 through one private sshd:
  rdcp        rdcp --sync -r --transport tcp (indexes of earlier runs kept)
  rdcp-cold   the same, first run ever: both index caches deleted first
  rsync       rsync -a
  tar-ssh     tar c | ssh tar x
  tar-nc      tar c | nc, nc -l | tar x
  tar-tar     tar c | tar x, locally
  cp          cp -a, locally
  iperf3      iperf3 -n BYTES on loopback: the wire, no files at all
  login+find  noop and mod1 only, a floor: ssh 127.0.0.1 true, then
              find -printf %s (one stat per entry) of rsync's copy, cold

Before every timed run: sync, drop the page cache, read the source back in
(warm source, cold destination). Runs alternate contenders; the order flips
every repetition. Medians of --reps. Peak RSS of both rdcp and rsync ends
comes from /usr/bin/time -v. Every rdcp result is compared with the source
(rsync -anciH --delete) outside the timing; a difference fails the run.

Results: RESULTS/bench.csv (every run), bench.json (medians, ratios,
targets), bench.md (the tables), where RESULTS is --results or
$RDCP_BENCH_RESULTS or benchmarks/results.
"""
import argparse
import fcntl
import json
import os
import platform
import random
import shutil
import socket
import statistics
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
BUILD = os.environ.get("RDCP_BUILD", os.path.join(TOP, "build"))
RDCP = os.path.join(BUILD, "rdcp")
MiB = 1 << 20

SCENARIOS = {"model": ["full", "noop", "mod1"], "small": ["full", "noop", "mod1"],
             "video": ["full", "noop", "grown"], "real": ["full", "noop", "mod1"],
             "entries": ["full", "noop"]}
FULL_ONLY = ["tar-ssh", "tar-nc", "tar-tar", "cp", "iperf3"]
# the floor of a re-sync that checks every destination entry: the login,
# then one stat of each entry (find -printf %s) of rsync's copy, cold
RESYNC_ONLY = ["login+find"]
CONTENDERS = ["rdcp", "rdcp-cold", "rsync"] + FULL_ONLY + RESYNC_ONLY

# (set, scenario, contender, limit, what): rdcp time / contender time <= limit
TARGETS = [
    ("model", "full", "rsync", 0.25), ("model", "full", "cp", 1.3),
    ("small", "full", "rsync", 0.4), ("small", "full", "tar-tar", 1.15),
    ("small", "full", "tar-nc", 1.0),
    ("small", "noop", "rsync", 0.6),
    ("small", "mod1", "rsync", 0.6), ("model", "mod1", "rsync", 0.5),
    ("real", "full", "tar-tar", 1.15),
    ("entries", "full", "rsync", 0.6),
]
# peak RSS on each end (MiB) where a set has a limit of its own, not the
# 64 MiB + 300 B per file of the others
RSS_LIMIT_MIB = {"entries": 128}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


# ---------------------------------------------------------------- data sets

def stream_bytes(path, n, seed, mode="wb"):
    """n pseudo-random bytes (AES-CTR keyed by seed) to path: fast, incompressible."""
    key = "%032x" % (hash_seed(seed))
    with open(path, mode) as f:
        p = subprocess.Popen(["openssl", "enc", "-aes-128-ctr", "-nosalt", "-K", key,
                              "-iv", "0"], stdin=open("/dev/zero", "rb"),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        left = n
        while left:
            b = p.stdout.read(min(left, 4 * MiB))
            f.write(b)
            left -= len(b)
        p.kill()
        p.wait()


def hash_seed(s):
    h = 1469598103934665603
    for c in s.encode():
        h = ((h ^ c) * 1099511628211) & ((1 << 128) - 1)
    return h


def gen_model(root, scale):
    """HF hub cache: models--org--nameK/{blobs,snapshots/REV,refs}."""
    r = random.Random(1)
    nblob, bsize = 4, max(MiB, int(1024 * MiB * scale))
    nsmall = max(2, int(2000 * scale))
    words = ("vocab merges token model config hidden layer head rope theta attention "
             "dropout bias weight norm eps float16 bfloat16 architectures").split()
    for m in range(nblob):
        top = f"{root}/models--org--model{m}"
        rev = "%040x" % r.getrandbits(160)
        os.makedirs(f"{top}/blobs")
        os.makedirs(f"{top}/snapshots/{rev}")
        os.makedirs(f"{top}/refs")
        with open(f"{top}/refs/main", "w") as f:
            f.write(rev)
        big = "%064x" % r.getrandbits(256)
        stream_bytes(f"{top}/blobs/{big}", bsize, f"model{m}")
        os.symlink(f"../../blobs/{big}", f"{top}/snapshots/{rev}/model.safetensors")
        for i in range(m, nsmall, nblob):
            name = "%064x" % r.getrandbits(256)
            n = r.randint(100, 32768)
            text = " ".join(r.choice(words) for _ in range(n // 6 + 1))[:n]
            with open(f"{top}/blobs/{name}", "w") as f:
                f.write(text)
            ext = "json" if i % 2 else "txt"
            sub = f"{top}/snapshots/{rev}/d{i % 10}"
            os.makedirs(sub, exist_ok=True)
            os.symlink(f"../../../blobs/{name}", f"{sub}/file{i}.{ext}")


def gen_small(root, scale):
    r = random.Random(2)
    n = max(50, int(50000 * scale))
    for d in range(200):
        os.makedirs(f"{root}/pkg{d:03d}/lib")
    for i in range(n):
        with open(f"{root}/pkg{i % 200:03d}/lib/file{i:06d}.js", "wb") as f:
            f.write(r.randbytes(r.randint(100, 16384)))


def gen_entries(root, scale):
    n = max(1000, int(1000000 * scale))
    for d in range(1000):
        os.makedirs(f"{root}/d{d:03d}")
    for i in range(n):
        open(f"{root}/d{i % 1000:03d}/f{i:07d}", "w").close()


def gen_video(root, scale):
    os.makedirs(root)
    for i in range(8):
        stream_bytes(f"{root}/cam{i}.mxf", max(MiB, int(512 * MiB * scale)), f"video{i}")


REAL_DIRS = ["/usr/include", "/usr/share/doc", "/usr/share/perl", "/usr/share/zoneinfo",
             "/usr/share/locale", "/usr/share/man", "/usr/lib/modules"]


def gen_real(root, scale):
    """This machine's installed package files, as they are (tar keeps
    symlinks and hard links); the small runs take zoneinfo alone."""
    os.makedirs(root)
    dirs = REAL_DIRS if scale >= 0.1 else ["/usr/share/zoneinfo"]
    rel = " ".join(sq(d.lstrip("/")) for d in dirs if os.path.isdir(d))
    if not rel:
        sys.exit("bench: none of " + ", ".join(dirs) + " exists on this machine")
    sh(f"tar -C / -cf - {rel} | tar -C {sq(root)} -xf -")


def files_of(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return sorted(out)


def tree_stats(root):
    fs = files_of(root)
    return len(fs), sum(os.path.getsize(p) for p in fs)


def modify_1pct(root, rep):
    """Rewrite 4 KiB (or the whole file if smaller) of 1% of the files."""
    fs = files_of(root)
    r = random.Random(100 + rep)
    pick = r.sample(fs, max(1, len(fs) // 100))
    for p in pick:
        size = os.path.getsize(p)
        n = min(4096, size)
        off = r.randint(0, size - n) if size > n else 0
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(r.randbytes(n))
    return len(pick), sum(min(4096, os.path.getsize(p)) for p in pick)


def grow_video(root, scale, rep):
    for i, p in enumerate(files_of(root)):
        stream_bytes(p, max(MiB // 8, int(64 * MiB * scale)), f"grow{rep}-{i}", "ab")


# ---------------------------------------------------------------- running

class Bench:
    def __init__(self, a):
        self.a = a
        self.w = a.work
        self.results = a.results
        self.runs = []          # dicts: set scenario contender rep seconds rss_*
        self.rsh = None
        self.csv = None

    # sshd, wrappers
    def start_sshd(self):
        # the remote side logs in with a HOME of its own, without the shell
        # start-up files of whoever runs the bench: bash run by sshd reads
        # ~/.bashrc, and one that started pyenv made every login 0.9 s
        # instead of 0.25 s, a cost of that account, not of the tools
        home = f"{self.w}/home"
        os.makedirs(home, exist_ok=True)
        out = subprocess.run(
            ["bash", "-c", f'source "{TOP}/tests/lib/sshd.sh" && HOME={sq(home)} sshd_start '
             f'"{self.w}/sshd" >/dev/null && echo "$RSH"'], capture_output=True, text=True)
        if out.returncode:
            sys.exit("bench: could not start a private sshd on 127.0.0.1:\n" + out.stderr)
        self.rsh = out.stdout.strip()
        # remote ends report their peak RSS through /usr/bin/time
        for name, prog, cache in (("rdcp-remote", RDCP, "cache-server"),
                                  ("rdcp-cold-remote", RDCP, "cache-cold-server"),
                                  ("rsync-remote", shutil.which("rsync"), None)):
            path = f"{self.w}/{name}"
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
                if cache:
                    f.write(f'export XDG_CACHE_HOME="{self.w}/{cache}"\n')
                f.write(f'exec /usr/bin/time -v -o "{self.w}/{name}.time" {prog} "$@"\n')
            os.chmod(path, 0o755)

    def stop_sshd(self):
        subprocess.run(["bash", "-c", f'source "{TOP}/tests/lib/sshd.sh" && '
                        f'sshd_stop "{self.w}/sshd"'])

    @staticmethod
    def peak_rss_kb(path):
        try:
            with open(path) as f:
                for line in f:
                    if "Maximum resident set size" in line:
                        return int(line.split(":")[1])
        except OSError:
            pass
        return None

    def settle(self, src):
        """Flush dirty pages, drop the page cache, read the source back in."""
        sh("sync")
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
            self.dropped = True
        except OSError:
            self.dropped = False
        sh(f"tar -C '{src}' -cf - . | cat >/dev/null")

    def port(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        return p

    def timed(self, cmd, env=None):
        """Run cmd (a shell line) once; returns (seconds, client peak RSS kB)."""
        tf = f"{self.w}/client.time"
        for f in (tf, f"{self.w}/rdcp-remote.time", f"{self.w}/rdcp-cold-remote.time",
                  f"{self.w}/rsync-remote.time"):
            if os.path.exists(f):
                os.unlink(f)
        line = f"/usr/bin/time -v -o '{tf}' bash -c {sq(cmd)}"
        t0 = time.monotonic()
        p = subprocess.run(line, shell=True, env=env, capture_output=True, text=True)
        dt = time.monotonic() - t0
        if p.returncode:
            sys.exit(f"bench: this run failed (exit {p.returncode}):\n  {cmd}\n{p.stderr[-2000:]}")
        return dt, self.peak_rss_kb(tf)

    def run_one(self, dset, sc, c, src, dst, nbytes):
        w, rsh = self.w, self.rsh
        env = dict(os.environ, XDG_CACHE_HOME=f"{w}/cache-client")
        rss_srv = None
        if c in ("rdcp", "rdcp-cold"):
            if c == "rdcp-cold":
                # its own index caches, deleted: the first run ever, on both sides
                shutil.rmtree(f"{w}/cache-cold-client", ignore_errors=True)
                shutil.rmtree(f"{w}/cache-cold-server", ignore_errors=True)
                env["XDG_CACHE_HOME"] = f"{w}/cache-cold-client"
            cmd = (f"{RDCP} --sync -r --transport tcp -e '{rsh}' --rdcp-path {w}/{c}-remote "
                   f"'{src}/' '127.0.0.1:{dst}/'")
            dt, rss = self.timed(cmd, env)
            rss_srv = self.peak_rss_kb(f"{w}/{c}-remote.time")
            d = subprocess.run(["rsync", "-anciH", "--delete", f"{src}/", f"{dst}/"],
                               capture_output=True, text=True).stdout
            if d.strip():
                sys.exit(f"bench: rdcp's copy of {dset} ({sc}) differs from the source:\n{d[:2000]}")
        elif c == "rsync":
            cmd = (f"rsync -a -e '{rsh}' --rsync-path {w}/rsync-remote '{src}/' '127.0.0.1:{dst}/'")
            dt, rss = self.timed(cmd)
            rss_srv = self.peak_rss_kb(f"{w}/rsync-remote.time")
        elif c == "tar-ssh":
            os.makedirs(dst)
            dt, rss = self.timed(f"set -o pipefail; tar -C '{src}' -cf - . | "
                                 f"{rsh} 127.0.0.1 \"tar -C '{dst}' -xf -\"")
        elif c == "tar-tar":
            os.makedirs(dst)
            dt, rss = self.timed(f"set -o pipefail; tar -C '{src}' -cf - . | tar -C '{dst}' -xf -")
        elif c == "cp":
            dt, rss = self.timed(f"cp -a '{src}' '{dst}'")
        elif c == "tar-nc":
            os.makedirs(dst)
            port = self.port()
            rx = subprocess.Popen(f"nc -l 127.0.0.1 {port} | tar -C '{dst}' -xf -", shell=True)
            time.sleep(0.3)
            t0 = time.monotonic()
            sh(f"tar -C '{src}' -cf - . | nc -N 127.0.0.1 {port}")
            if rx.wait():
                sys.exit("bench: nc | tar x failed")
            dt, rss = time.monotonic() - t0, None
        elif c == "login+find":
            dt, rss = self.timed(f"{rsh} 127.0.0.1 true && find '{dst}' -printf '%s' >/dev/null")
        elif c == "iperf3":
            port = self.port()
            srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-n",
                                  str(max(nbytes, 1 << 20)), "-J"],
                                 capture_output=True, text=True)
            srv.wait()
            dt, rss = json.loads(out.stdout)["end"]["sum_received"]["seconds"], None
        else:
            raise ValueError(c)
        return dt, rss, rss_srv

    def record(self, **r):
        self.runs.append(r)
        with open(self.csv, "a") as f:
            f.write(",".join(str(r.get(k, "")) for k in
                             ("set", "scenario", "contender", "rep", "seconds",
                              "rss_client_kb", "rss_server_kb")) + "\n")

    def do_set(self, dset, contenders, step):
        a, w = self.a, self.w
        src = f"{w}/src-{dset}"
        if not os.path.exists(f"{src}/.done"):
            shutil.rmtree(src, ignore_errors=True)
            log(f"bench: generating {dset} (scale {a.scale}) in {src} ...")
            os.makedirs(src)
            {"model": gen_model, "small": gen_small, "video": gen_video,
             "real": gen_real, "entries": gen_entries}[dset](
                f"{src}/tree" if dset != "video" else f"{src}/tree", a.scale)
            open(f"{src}/.done", "w").close()
        src = f"{src}/tree"
        nfiles, nbytes = tree_stats(src)
        self.sets[dset] = {"files": nfiles, "bytes": nbytes}
        log(f"bench: {dset}: {nfiles} files, {nbytes / MiB:.1f} MiB")
        cs = [c for c in CONTENDERS if c in contenders]
        keep = [c for c in cs if c in ("rdcp", "rsync")]
        resync = keep + [c for c in cs if c in RESYNC_ONLY and "rsync" in cs]
        # Every full run writes into a directory never used before. A tree of
        # many files deleted just before would slow the next one's creates
        # (ext4 skips recently freed inodes: measured as 37% of a receiver's
        # time), so such trees are deleted only when the set is done.
        trash = []
        # copies are named for this run: a --work directory kept from an
        # interrupted run holds copies under its names, and a "full" run
        # into one of them would be a re-sync
        tag = os.getpid()

        def discard(path):
            if nfiles > 10000:
                trash.append(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
        if "rdcp" in cs:
            # "rdcp" is the steady state: the indexes of an earlier run exist
            # (rdcp-cold measures the first run ever)
            log(f"bench: {dset}: one untimed rdcp run to build its indexes ...")
            self.run_one(dset, "prime", "rdcp", src, f"{w}/dst-{dset}-prime-{tag}", nbytes)
            discard(f"{w}/dst-{dset}-prime-{tag}")
        for rep in range(1, a.reps + 1):
            order = cs if rep % 2 else cs[::-1]
            dsts = {c: f"{w}/dst-{dset}-{c}-{rep}-{tag}" for c in cs}
            for sc in SCENARIOS[dset]:
                if sc == "mod1":
                    n, b = modify_1pct(src, rep)
                    self.sets[dset]["mod1"] = f"{n} files, {b} bytes rewritten"
                elif sc == "grown":
                    grow_video(src, a.scale, rep)
                    self.sets[dset]["grown"] = "each file +%d MiB" % max(1, 64 * a.scale)
                for c in (order if sc == "full" else [x for x in order if x in resync]):
                    if (c == "rdcp-cold" and sc != "full") or (c in RESYNC_ONLY and sc == "full"):
                        continue
                    dst = dsts["rsync" if c in RESYNC_ONLY else c]
                    step[0] += 1
                    msg = f"[{step[0]}/{step[1]}] {dset} {sc} {c} rep {rep}/{a.reps}"
                    log(msg + " ...")
                    self.settle(src)
                    s, rss, rss_srv = self.run_one(dset, sc, c, src, dst, nbytes)
                    log(f"{msg}: {s:.3f} s")
                    self.record(set=dset, scenario=sc, contender=c, rep=rep, seconds=round(s, 4),
                                rss_client_kb=rss or "", rss_server_kb=rss_srv or "")
                    if sc == "full" and c not in keep:
                        discard(dst)
            for c in keep:
                discard(dsts[c])
        log(f"bench: {dset}: removing the copies ...")
        for t in trash:
            shutil.rmtree(t, ignore_errors=True)

    # ------------------------------------------------------------ report
    def medians(self):
        m = {}
        for r in self.runs:
            m.setdefault((r["set"], r["scenario"], r["contender"]), []).append(r)
        out = {}
        for k, rs in m.items():
            def med(key):
                v = [x[key] for x in rs if x.get(key) not in (None, "")]
                return statistics.median(v) if v else None
            out[k] = {"seconds": med("seconds"), "rss_client_kb": max(
                [x["rss_client_kb"] for x in rs if x.get("rss_client_kb")], default=None),
                "rss_server_kb": max(
                [x["rss_server_kb"] for x in rs if x.get("rss_server_kb")], default=None),
                "reps": len(rs)}
        return out

    def report(self, vm):
        med = self.medians()
        lines = []
        lines.append("| set | scenario | contender | median s | rdcp ÷ it | rdcp-cold ÷ it "
                     "| peak RSS client / server MiB |")
        lines.append("|---|---|---|---:|---:|---:|---|")
        for dset in SCENARIOS:
            for sc in SCENARIOS[dset]:
                base = med.get((dset, sc, "rdcp"))
                cold = med.get((dset, sc, "rdcp-cold"))
                for c in CONTENDERS:
                    x = med.get((dset, sc, c))
                    if not x:
                        continue
                    r1 = f"{base['seconds'] / x['seconds']:.2f}" if base else ""
                    r2 = f"{cold['seconds'] / x['seconds']:.2f}" if cold else ""
                    rss = " / ".join("%.1f" % (v / 1024) if v else "-" for v in
                                     (x["rss_client_kb"], x["rss_server_kb"]))
                    if rss == "- / -":
                        rss = ""
                    lines.append(f"| {dset} | {sc} | {c} | {x['seconds']:.3f} | {r1} | {r2} | {rss} |")
        targets = []
        for dset, sc, c, lim in TARGETS:
            x, y = med.get((dset, sc, c)), med.get((dset, sc, "rdcp"))
            yc = med.get((dset, sc, "rdcp-cold"))
            if not x or not y:
                continue
            r = y["seconds"] / x["seconds"]
            t = {"target": f"{dset} {sc}: rdcp ≤ {lim} × {c}", "ratio": round(r, 3),
                 "met": r <= lim}
            if yc:
                t["ratio_cold"] = round(yc["seconds"] / x["seconds"], 3)
                t["met_cold"] = t["ratio_cold"] <= lim
            targets.append(t)
        for dset, sc, c, lim in TARGETS:
            f, x = med.get((dset, sc, "login+find")), med.get((dset, sc, c))
            if f and x:
                r = f["seconds"] / x["seconds"]
                targets.append({"target": f"{dset} {sc}: the floor (login+find) ÷ {c}, "
                                "not a target", "ratio": round(r, 3), "floor": True,
                                "met": r <= lim})
        for dset, info in self.sets.items():
            lim_kb = 64 * 1024 + 300 * info["files"] / 1024
            what = f"64 MiB + 300 B × {info['files']} files = {lim_kb / 1024:.1f} MiB"
            if dset in RSS_LIMIT_MIB:
                lim_kb = RSS_LIMIT_MIB[dset] * 1024
                what = f"{RSS_LIMIT_MIB[dset]} MiB on each end"
            worst = max([v for (s, _, c), x in med.items() if s == dset and c.startswith("rdcp")
                         for v in (x["rss_client_kb"], x["rss_server_kb"]) if v], default=None)
            if worst:
                targets.append({"target": f"{dset}: rdcp peak RSS ≤ {what}",
                                "value_mib": round(worst / 1024, 1), "met": worst <= lim_kb})
        if vm:
            for k, what in (("ib_write_bw -R", "its own figure"),
                            ("ib_write_bw -R (wall clock, as rdcp)", "both timed start to exit")):
                if vm.get("rdcp-rdma") and vm.get(k):
                    r = vm["rdcp-rdma"] / vm[k]
                    targets.append({"target": f"VM: rdcp (rdma) throughput ≥ 0.9 × ib_write_bw -R "
                                    f"({what})", "ratio": round(r, 3), "met": r >= 0.9})
        tl = ["| target | measured | met |", "|---|---|---|"]
        for t in targets:
            v = t.get("ratio", t.get("value_mib"))
            v = f"{v}" + (" MiB" if "value_mib" in t else "")
            if "ratio_cold" in t:
                v += f" (first run, no index: {t['ratio_cold']})"
            if t.get("floor"):
                tl.append(f"| {t['target']} | {v} | "
                          f"{'-' if t['met'] else 'the target is under this floor'} |")
                continue
            tl.append(f"| {t['target']} | {v} | {'yes' if t['met'] else 'NO'} |")
        vl = []
        if vm:
            vl = ["| contender (inside the VM) | MiB/s | rdcp (rdma) ÷ it |", "|---|---:|---:|"]
            for k, v in vm.items():
                if isinstance(v, float):
                    vl.append(f"| {k} | {v:.1f} | {vm['rdcp-rdma'] / v:.2f} |")
        return lines, tl, vl, targets, med


def sq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    fs = subprocess.run(["findmnt", "-no", "FSTYPE,SOURCE", "-T", "/tmp"],
                        capture_output=True, text=True).stdout.strip()

    def ver(cmd):
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr) else "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / (1 << 30), 1),
            "kernel": platform.release(), "filesystem": fs,
            "rdcp": ver(f"{RDCP} --version"), "rsync": ver("rsync --version"),
            "tar": ver("tar --version"), "ssh": ver("ssh -V"), "iperf3": ver("iperf3 --version")}


def run_vm(a):
    """rdcp --sync over RDMA and TCP inside the soft-RoCE VM, vs ib_write_bw -R."""
    mb = a.vm_mb
    guest = f"""set -u
modprobe -a ib_uverbs rdma_ucm rdma_rxe dummy
ip link add rdma0 type dummy; ip addr add 169.254.77.1/16 dev rdma0; ip link set rdma0 up
rdma link add rxe0 type rxe netdev rdma0
A=169.254.77.1 R={RDCP} L={TOP}/tests/e2e/local-rsh
export XDG_CACHE_HOME=/tmp/cache
mkdir -p /tmp/src/blobs /tmp/src/small
for i in 1 2; do head -c $(( ({mb} / 2 - 1) << 20 )) /dev/urandom >/tmp/src/blobs/b$i; done
for i in $(seq 200); do head -c 5000 /dev/urandom >/tmp/src/small/f$i; done
bytes=$(du -sb /tmp/src | cut -f1)
echo "bytes $bytes"
$R --scan /tmp/src >/dev/null
for r in $(seq {a.reps}); do
    ib_write_bw -R -d rxe0 -s 1048576 -n {mb} >/dev/null 2>&1 & sleep 1
    a=$(date +%s.%N)
    bw=$(ib_write_bw -R -d rxe0 -s 1048576 -n {mb} $A 2>/dev/null | awk '$1 == 1048576 {{print $4}}')
    wait
    b=$(date +%s.%N)
    # perftest's own figure leaves out its start-up and connection set-up;
    # the wall figure is timed as rdcp is, start to both ends exited
    echo "ib_write_bw_-R $r $bw"
    echo "ib_write_bw_-R_wall $r $(echo "{mb} / ($b - $a)" | bc -l)"
    for t in rdma tcp; do
        rm -rf /tmp/dst; sync; echo 3 >/proc/sys/vm/drop_caches; cat /tmp/src/blobs/* >/dev/null
        a=$(date +%s.%N)
        $R --sync -r --transport $t --data-addr $A -e $L --rdcp-path $R /tmp/src/ vm:/tmp/dst/ || echo FAILED
        b=$(date +%s.%N)
        echo "rdcp-$t $r $(echo "$bytes / ($b - $a) / 1048576" | bc -l)"
        d=$(rsync -anci --delete /tmp/src/ /tmp/dst/); [ -z "$d" ] || echo "FAILED: the copy differs: $d"
    done
done
"""
    gpath = f"{a.work}/guest.sh"
    with open(gpath, "w") as f:
        f.write(guest)
    log(f"bench: booting the soft-RoCE VM ({mb} MiB per run, {a.reps} reps) ...")
    p = subprocess.run([f"{TOP}/tests/rdma/vm.sh", gpath], capture_output=True, text=True)
    out = p.stdout
    if p.returncode or "FAILED" in out:
        sys.exit("bench: the VM part failed:\n" + out[-3000:] + p.stderr[-2000:])
    vals = {}
    for line in out.splitlines():
        f = line.split()
        names = {"ib_write_bw_-R": "ib_write_bw -R",
                 "ib_write_bw_-R_wall": "ib_write_bw -R (wall clock, as rdcp)",
                 "rdcp-rdma": "rdcp-rdma",
                 "rdcp-tcp": "rdcp-tcp"}
        if len(f) == 3 and f[0] in names:
            try:
                vals.setdefault(names[f[0]], []).append(float(f[2]))
            except ValueError:
                pass
    # perftest's MB/sec is 2^20 bytes/s, the same unit as ours
    for k, v in vals.items():
        log(f"bench: VM {k}: " + ", ".join(f"{x:.1f}" for x in v) + " MiB/s")
    res = {k: statistics.median(v) for k, v in vals.items()}
    if "rdcp-rdma" not in res or "ib_write_bw -R" not in res:
        sys.exit("bench: the VM printed no results:\n" + out[-3000:])
    res["vm_mib"] = mb
    return res


PAGE_REPORTING = "/sys/module/page_reporting/parameters"


def hold_memory():
    """Hold back the guest's free page reporting, if it has one, for the run.

    On the paravirtualized machines these benchmarks run on, the guest hands
    memory it frees back to its host almost at once (min_free_ms 0), and the
    next write into such memory costs several times one into memory freed a
    moment ago: a 4 GiB copy within a tmpfs took 0.84 s or 5.7 s depending on
    it. Whichever contender starts writing later, or writes more slowly,
    gets more of those pages. Free memory now stays with the guest for a
    minute (and up to all of RAM waits); returns (what was changed, undo)."""
    want = {"min_free_ms": "60000",
            "max_waiting_mib": str(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MiB)}
    old = {}
    for k, v in want.items():
        try:
            with open(f"{PAGE_REPORTING}/{k}") as f:
                old[k] = f.read().strip()
            with open(f"{PAGE_REPORTING}/{k}", "w") as f:
                f.write(v)
        except OSError:
            pass

    def undo():
        for k, v in old.items():
            with open(f"{PAGE_REPORTING}/{k}", "w") as f:
                f.write(v)
    return {k: (old[k], want[k]) for k in old}, undo


def one_at_a_time():
    """Wait until no other bench runs on this machine. Two at once measure
    each other, and the second would save the first one's held page
    reporting (hold_memory()) as the values to put back at its end, leaving
    memory held after both. The lock goes with the process."""
    d = "/run/lock" if os.path.isdir("/run/lock") else "/tmp"
    f = open(os.path.join(d, "rdcp-bench.lock"), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        other = f.read().strip() or "?"
        log(f"bench: another bench run (pid {other}) is in progress; waiting for it to end ...")
        fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def main():
    sys.dont_write_bytecode = True      # no __pycache__ in the source tree
    import delta            # here: delta.py imports this file's helpers
    DELTA_SETS = delta.SETS
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="data set size factor (1 = full)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per contender (median)")
    ap.add_argument("--sets", default="model,small,real,video,entries," + ",".join(DELTA_SETS),
                    help="comma list of data sets and change-driven scenarios")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma list")
    ap.add_argument("--no-vm", action="store_true", help="skip the soft-RoCE VM part")
    ap.add_argument("--let-memory-go", action="store_true",
                    help="leave the guest's free page reporting as it is (default: held "
                    "back for the run, see hold_memory())")
    ap.add_argument("--vm-mb", type=int, default=256, help="bytes per VM run, MiB")
    ap.add_argument("--work", help="scratch directory (default: a new one under $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--results", default=os.environ.get("RDCP_BENCH_RESULTS",
                                                        os.path.join(HERE, "results")))
    a = ap.parse_args()
    for tool in ("rsync", "tar", "nc", "iperf3", "openssl", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing; `make deps` installs it")
    if not os.access(RDCP, os.X_OK):
        sys.exit(f"bench: {RDCP} is not built; run `make` first")
    sets = []
    for s in a.sets.split(","):
        sets += ["grown-xfs", "grown-ext4"] if s == "grown" else [s] if s else []
    for s in sets:
        if s not in SCENARIOS and s not in DELTA_SETS:
            sys.exit(f"bench: unknown data set '{s}' "
                     f"({', '.join(list(SCENARIOS) + DELTA_SETS)}, grown)")
    contenders = a.contenders.split(",")
    for c in contenders:
        if c not in CONTENDERS:
            sys.exit(f"bench: unknown contender '{c}' ({', '.join(CONTENDERS)})")
    lock = one_at_a_time()   # noqa: F841 (held until the process ends)
    made = False
    if not a.work:
        a.work = subprocess.run(["mktemp", "-d", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                               "rdcp-bench-XXXXXX")],
                                capture_output=True, text=True, check=True).stdout.strip()
        made = True
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    b = Bench(a)
    b.sets = {}
    b.csv = os.path.join(a.results, "bench.csv")
    with open(b.csv, "w") as f:
        f.write("set,scenario,contender,rep,seconds,rss_client_kb,rss_server_kb\n")
    steps = 0
    for s in [x for x in sets if x in SCENARIOS]:
        for sc in SCENARIOS[s]:
            steps += a.reps * len([c for c in contenders
                                   if (sc == "full" and c not in RESYNC_ONLY)
                                   or (sc != "full" and (c in ("rdcp", "rsync") or (
                                       c in RESYNC_ONLY and "rsync" in contenders)))])
    step = [0, steps]
    t0 = time.monotonic()
    # SIGTERM and SIGINT (even when started in the background, where SIGINT
    # comes ignored) unwind: the finally blocks unmount and detach
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: terminated"))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    held, unhold = hold_memory() if not a.let_memory_go else ({}, lambda: None)
    b.start_sshd()
    d = delta.Delta(b)
    try:
        for s in sets:
            if s in SCENARIOS:
                b.do_set(s, contenders, step)
            else:
                d.run_set(s)
        vm = None if a.no_vm else run_vm(a)
    finally:
        unhold()
        b.stop_sshd()
        if made and not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    lines, tl, vl, targets, med = b.report(vm)
    dl, dtargets, dmed = d.report()
    mach = machine()
    hdr = [f"rdcp benchmarks, {time.strftime('%Y-%m-%d')}, scale {a.scale}, {a.reps} reps, "
           f"{time.monotonic() - t0:.0f} s in all",
           "",
           f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gib']} GiB, "
           f"Linux {mach['kernel']}, {mach['filesystem']}; {mach['rsync']}; {mach['ssh']}; "
           f"{mach['tar']}.",
           "",
           "Page cache: before every run `sync`, " +
           ({True: "all caches dropped", False: "caches NOT dropped (no permission)",
             None: "caches dropped where a set needs it (none of these did)"}
            [getattr(b, "dropped", None)]) +
           ", then the source read back in: warm source, cold destination.",
           ("Free page reporting to the host held back during the run ("
            + ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in held.items()) + "; restored after)."
            if held else "Free page reporting: " + ("left as it is (--let-memory-go)."
                                                     if a.let_memory_go else "none here.")),
           "Everything runs on this one machine: remote contenders push to 127.0.0.1 "
           "through one private sshd, whose logins have a HOME of their own (no shell "
           "start-up files).",
           ""] + (["Data sets: " + "; ".join(
               f"{k}: {v['files']} files, {v['bytes'] / MiB:.0f} MiB"
               + (f", 1% = {v['mod1']}" if "mod1" in v else "")
               + (f", {v['grown']}" if "grown" in v else "") for k, v in b.sets.items()),
           ""] if b.sets else [])
    md = hdr
    if lines[2:]:
        md += lines + ["", "Targets (rdcp time ÷ contender time):", ""] + tl
    if dl:
        md += [""] + dl
    if vl:
        md += ["", f"Inside the soft-RoCE VM (rxe, QEMU TCG, 2 vCPUs), {vm['vm_mib']} MiB per "
               "run (2 blobs + 200 small files), medians (MiB/s):", ""] + vl
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.results, "bench.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.results, "bench.json"), "w") as f:
        json.dump({"machine": mach, "scale": a.scale, "reps": a.reps, "sets": b.sets,
                   "medians": [dict(set=k[0], scenario=k[1], contender=k[2], **v)
                               for k, v in med.items()],
                   "targets": targets, "vm": vm,
                   "change_driven": {"medians": dmed, "targets": dtargets}}, f, indent=1)
    print(text)
    print(f"raw runs: {b.csv}; medians and targets: {a.results}/bench.json")


if __name__ == "__main__":
    main()
