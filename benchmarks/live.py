#!/usr/bin/env python3
"""Live mirroring: how far behind a live tree each way of mirroring stays.

  benchmarks/live.py                    the issue's run: 60 s per contender
  benchmarks/live.py --secs 10 --small 2000   a quick one

The source: three recordings inside a tree of --small small files. While a
contender runs, for --secs seconds: each recording is appended 1 MiB every
1/15 s (15 MiB/s each); 15 small files are made and 5 appended to a second;
one small file is renamed a second. A sampler on DST (every 5 ms) notes
when each write's bytes are there: a recording once DST's copy is at least
that long, a new or appended file once it has its new size, a rename once
the new name is there. Lag = that moment - the write's end.

Contenders, all pushing to 127.0.0.1 through one private sshd (each starts
with an empty DST and is timed from when its first whole sync is done):
  watch       rdcp --sync -a --append --delete --watch
  lsyncd      lsyncd, rsync backend over the same ssh, delay = 0 (its fastest)
  rsync-loop  while :; do rsync -a --append --delete ...; done
  rdcp-loop   while :; do rdcp --sync -a --append --delete ...; done

Printed and written to RESULTS/live.json and live.md: each contender's lag
p50 / p99 / max, the bytes on the loopback (all of it: ssh, data) over the
bytes written, and how long after the writers stop DST is identical.

Then, unless --idle 0, the watch on a still tree of --idle files (100k):
its start-up (from the command to a file made at that moment landing on
DST, against a no-op `rdcp --sync` of the same tree), and its cost while
nothing changes, over --idle-secs: CPU (% of a core) and RSS of each end.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
RDCP = os.path.join(os.environ.get("RDCP_BUILD", os.path.join(TOP, "build")), "rdcp")
MiB = 1 << 20
RECS = 3


def log(msg):
    print(f"live: {msg}", file=sys.stderr, flush=True)


def lo_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                return int(line.split(":")[1].split()[8])   # transmitted bytes
    return 0


def make_source(src, nsmall):
    os.makedirs(src)
    for i in range(nsmall):
        d = f"{src}/d{i % 200}"
        if i < 200:
            os.mkdir(d)
        with open(f"{d}/f{i}", "wb") as f:
            f.write(os.urandom(100 + (i * 7919) % 4000))
    os.mkdir(f"{src}/rec")
    for r in range(RECS):
        with open(f"{src}/rec/r{r}.ts", "wb") as f:
            f.write(os.urandom(16 * MiB))


def identical(src, dst):
    out = subprocess.run(["rsync", "-anciH", "--delete", src + "/", dst + "/"],
                         capture_output=True, text=True)
    return out.returncode == 0 and not out.stdout.strip()


class Run:
    """One contender's timed part: writers, sampler, lags."""

    def __init__(self, src, dst, secs):
        self.src, self.dst, self.secs = src, dst, secs
        self.pending = []          # (t_done, kind, path, size)
        self.lags = []
        self.mu = threading.Lock()
        self.stop = threading.Event()
        self.written = 0
        self.seq = 0

    def note(self, kind, rel, size):
        with self.mu:
            self.pending.append((time.monotonic(), kind, rel, size))

    def recorder(self, r):
        rel = f"rec/r{r}.ts"
        chunk = os.urandom(MiB)
        t = time.monotonic()
        while not self.stop.is_set():
            with open(f"{self.src}/{rel}", "ab") as f:
                f.write(chunk)
                size = f.tell()
            self.written += MiB
            self.note("rec", rel, size)
            t += 1 / 15
            time.sleep(max(0, t - time.monotonic()))

    def smalls(self):
        t = time.monotonic()
        k = 0
        while not self.stop.is_set():
            k += 1
            self.seq += 1
            d = f"d{self.seq % 200}"
            if k % 20 < 15:            # 15 new files a second
                rel = f"{d}/new{self.seq}"
                data = os.urandom(200 + self.seq % 3000)
                with open(f"{self.src}/{rel}", "wb") as f:
                    f.write(data)
                self.written += len(data)
                self.note("new", rel, len(data))
            else:                      # 5 appended
                rel = f"{d}/f{self.seq % 200}"
                with open(f"{self.src}/{rel}", "ab") as f:
                    f.write(b"x" * 100)
                    size = f.tell()
                self.written += 100
                self.note("app", rel, size)
            if k % 20 == 0:            # one rename a second
                old = f"{d}/new{self.seq - 1}"
                if os.path.exists(f"{self.src}/{old}"):
                    rel = f"{d}/moved{self.seq}"
                    os.rename(f"{self.src}/{old}", f"{self.src}/{rel}")
                    self.note("mv", rel, os.path.getsize(f"{self.src}/{rel}"))
            t += 1 / 20
            time.sleep(max(0, t - time.monotonic()))

    def sampler(self):
        while not self.stop.is_set() or self.pending:
            now = time.monotonic()
            with self.mu:
                todo, self.pending = self.pending, []
            keep = []
            sizes = {}
            for item in todo:
                t, kind, rel, size = item
                if rel not in sizes:
                    try:
                        sizes[rel] = os.path.getsize(f"{self.dst}/{rel}")
                    except OSError:
                        sizes[rel] = -1
                if sizes[rel] >= size:
                    self.lags.append(now - t)
                else:
                    keep.append(item)
            with self.mu:
                self.pending = keep + self.pending
            if self.stop.is_set() and now > self.deadline:
                self.missed = len(self.pending)
                return
            time.sleep(0.005)

    def go(self):
        self.missed = 0
        self.deadline = float("inf")
        threads = [threading.Thread(target=self.recorder, args=(r,)) for r in range(RECS)]
        threads += [threading.Thread(target=self.smalls)]
        samp = threading.Thread(target=self.sampler)
        for th in threads + [samp]:
            th.start()
        time.sleep(self.secs)
        self.stop.set()
        for th in threads:
            th.join()
        t_end = time.monotonic()
        self.deadline = t_end + 30
        samp.join()
        # identical once every write is there: the moment the first check
        # that finds it so began (a check, rsync -n over the tree, takes
        # ~0.5 s on 50k files: that is this figure's resolution)
        self.settle = None
        for _ in range(300):
            t_check = time.monotonic()
            if identical(self.src, self.dst):
                self.settle = t_check - t_end
                break
            time.sleep(0.1)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else None


def start(name, src, dst, rsh, work):
    os.makedirs(dst, exist_ok=True)
    target = f"127.0.0.1:{dst}"
    if name == "watch":
        cmd = [RDCP, "--sync", "-a", "--append", "--delete", "--watch", "--json",
               "-e", rsh, "--rdcp-path", RDCP, src + "/", target]
        return subprocess.Popen(cmd, stdout=open(f"{work}/{name}.out", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
    if name == "lsyncd":
        conf = f"{work}/lsyncd.conf"
        with open(conf, "w") as f:
            f.write(f"""settings {{ nodaemon = true, logfile = "{work}/lsyncd.log" }}
sync {{ default.rsync, source = "{src}", target = "{target}", delay = 0,
       delete = true,
       rsync = {{ archive = true, append = true, rsh = "{rsh}" }} }}
""")
        return subprocess.Popen(["lsyncd", conf], stdout=subprocess.DEVNULL,
                                stderr=open(f"{work}/lsyncd.err", "w"), start_new_session=True)
    one = {"rsync-loop": f"rsync -a --append --delete -e '{rsh}' {src}/ {target}/",
           "rdcp-loop": f"{RDCP} --sync -a --append --delete -e '{rsh}' --rdcp-path {RDCP} "
                        f"{src}/ {target}"}[name]
    return subprocess.Popen(["bash", "-c", f"while :; do {one} >/dev/null 2>&1; done"],
                            start_new_session=True)


def proc_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])        # utime + stime, every thread


def proc_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def idle_part(a, rsh):
    """The watch on a still tree: start-up, then CPU and RSS at rest."""
    src, dst = f"{a.work}/idle-src", f"{a.work}/idle-dst"
    log(f"idle: a tree of {a.idle} files")
    os.makedirs(src)
    for i in range(a.idle):
        d = f"{src}/d{i % 100}"
        if i < 100:
            os.mkdir(d)
        with open(f"{d}/f{i}", "wb") as f:
            f.write(b"x" * (100 + i % 900))
    one = [RDCP, "--sync", "-a", "--delete", "-e", rsh, "--rdcp-path", RDCP, src + "/",
           f"127.0.0.1:{dst}"]
    subprocess.run(one, check=True)
    noops = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run(one, check=True)
        noops.append(time.monotonic() - t)
    noop = statistics.median(noops)
    # start-up: the watch started, a file made at once, until it lands
    t0 = time.monotonic()
    p = subprocess.Popen(one[:3] + ["--watch"] + one[3:], stdout=subprocess.DEVNULL,
                         start_new_session=True)
    with open(f"{src}/new", "w") as f:
        f.write("new\n")
    while not os.path.exists(f"{dst}/new"):
        if p.poll() is not None or time.monotonic() - t0 > 300:
            sys.exit("live: idle: the watch did not land its first change")
        time.sleep(0.005)
    startup = time.monotonic() - t0
    try:
        time.sleep(2)                      # its first round's tail
        srv = subprocess.run(["pgrep", "-f", "-n", f"^{RDCP} --server"],
                             capture_output=True, text=True).stdout.split()
        if not srv:
            sys.exit("live: idle: the watch's far side is not found")
        ends = {"client": p.pid, "server": int(srv[0])}
        t0, k0 = time.monotonic(), {n: proc_ticks(q) for n, q in ends.items()}
        time.sleep(a.idle_secs)
        secs = time.monotonic() - t0
        hz = os.sysconf("SC_CLK_TCK")
        row = {"files": a.idle, "noop_s": noop, "startup_s": startup, "idle_secs": secs}
        for n, q in ends.items():
            row[f"{n}_cpu_pct"] = 100.0 * (proc_ticks(q) - k0[n]) / hz / secs
            row[f"{n}_rss_mib"] = proc_kib(q, "VmRSS") / 1024
            row[f"{n}_peak_rss_mib"] = proc_kib(q, "VmHWM") / 1024
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait()
    log(f"idle: {row}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--secs", type=float, default=60)
    ap.add_argument("--small", type=int, default=50000)
    ap.add_argument("--contenders", default="watch,lsyncd,rsync-loop,rdcp-loop")
    ap.add_argument("--results", default=os.environ.get("RDCP_BENCH_RESULTS",
                                                         os.path.join(HERE, "results")))
    ap.add_argument("--work", default="/tmp/rdcp-live-bench",
                    help="scratch directory (removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep --work for a look")
    ap.add_argument("--idle", type=int, default=100000,
                    help="files in the still tree of the idle part (0: no idle part)")
    ap.add_argument("--idle-secs", type=float, default=30)
    a = ap.parse_args()
    names = [n for n in a.contenders.split(",") if n]
    if "lsyncd" in names and not shutil.which("lsyncd"):
        sys.exit("live: lsyncd is not installed (apt-get install lsyncd), or leave it out: "
                 "--contenders watch,rsync-loop,rdcp-loop")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    out = subprocess.run(["bash", "-c", f'source "{TOP}/tests/lib/sshd.sh" && '
                          f'sshd_start "{a.work}/sshd" >/dev/null && echo "$RSH"'],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit("live: could not start a private sshd:\n" + out.stderr)
    rsh = out.stdout.strip()
    os.environ["XDG_CACHE_HOME"] = f"{a.work}/cache"
    rows = {}
    p = None
    try:
        for name in names:
            src, dst = f"{a.work}/src", f"{a.work}/dst-{name}"
            shutil.rmtree(src, ignore_errors=True)
            log(f"{name}: a source of {a.small} small files and {RECS} recordings")
            make_source(src, a.small)
            p = start(name, src, dst, rsh, a.work)
            t0 = time.monotonic()
            while not identical(src, dst):     # its first whole sync
                if time.monotonic() - t0 > 600 or p.poll() is not None:
                    sys.exit(f"live: {name} did not make its first copy "
                             f"(exit {p.poll()}); --keep keeps {a.work} for a look")
                time.sleep(0.5)
            log(f"{name}: first copy in {time.monotonic() - t0:.1f} s; {a.secs:.0f} s live")
            run = Run(src, dst, a.secs)
            b0 = lo_bytes()
            run.go()
            wire = lo_bytes() - b0
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            p = None
            lags = run.lags
            rows[name] = {"p50": pct(lags, 0.5), "p99": pct(lags, 0.99), "max": max(lags),
                          "events": len(lags), "missed": run.missed,
                          "written": run.written, "wire": wire,
                          "wire_ratio": wire / run.written if run.written else None,
                          "identical_after_s": run.settle}
            log(f"{name}: {rows[name]}")
            shutil.rmtree(dst, ignore_errors=True)
        idle = idle_part(a, rsh) if a.idle else None
    finally:
        if p is not None and p.poll() is None:   # a contender left running
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        subprocess.run(["bash", "-c", f'source "{TOP}/tests/lib/sshd.sh" && '
                        f'sshd_stop "{a.work}/sshd"'])
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    lines = [f"## Live mirroring ({a.secs:.0f} s, {a.small} small files, {RECS} recordings "
             "at 15 MiB/s each, 15 new + 5 appended small files and 1 rename a second)", "",
             "| contender | lag p50 | lag p99 | lag max | events (missed) | wire / written "
             "| identical after stop |", "|---|---|---|---|---|---|---|"] if rows else []
    for n, r in rows.items():
        idt = f"{r['identical_after_s']:.2f} s" if r["identical_after_s"] is not None else "never"
        lines.append(f"| {n} | {r['p50']:.3f} s | {r['p99']:.3f} s | {r['max']:.3f} s | "
                     f"{r['events']} ({r['missed']}) | {r['wire_ratio']:.2f} | {idt} |")
    if "watch" in rows:
        w = rows["watch"]
        for n, r in rows.items():
            if n != "watch":
                lines.append(f"- watch / {n}: p50 {w['p50'] / r['p50']:.2f}, "
                             f"p99 {w['p99'] / r['p99']:.2f}")
    if idle:
        lines += ["" if lines else "", f"## The watch at rest ({idle['files']} files, nothing changing for "
                  f"{idle['idle_secs']:.0f} s)", "",
                  "| | client (sender) | server (receiver) |", "|---|---|---|",
                  f"| CPU | {idle['client_cpu_pct']:.2f} % | {idle['server_cpu_pct']:.2f} % |",
                  f"| RSS now / peak | {idle['client_rss_mib']:.1f} / "
                  f"{idle['client_peak_rss_mib']:.1f} MiB | {idle['server_rss_mib']:.1f} / "
                  f"{idle['server_peak_rss_mib']:.1f} MiB |", "",
                  f"- start-up: a file made as the watch starts lands after "
                  f"{idle['startup_s']:.2f} s; a no-op `rdcp --sync` of the tree takes "
                  f"{idle['noop_s']:.2f} s (target: no-op + 1 s)"]
    text = "\n".join(lines)
    print(text)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "live.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.results, "live.json"), "w") as f:
        json.dump({"secs": a.secs, "small": a.small, "contenders": rows, "idle": idle}, f,
                  indent=1)


if __name__ == "__main__":
    main()
