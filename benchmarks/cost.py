#!/usr/bin/env python3
"""make bench's cost set (issue 33): what rdcp spends per file and per byte,
against the floors of tar and cp, measured in the same run.

  benchmarks/cost.py                 the full run (a few minutes)
  benchmarks/cost.py --scale 0.05    a smoke run

CPU seconds are user + system time of every process of a run: each runs
under /usr/bin/time, and every process of it (rdcp's receiver, iperf3's
server, tar's second half) is a waited-for child of what is timed.

Cases (contenders alternate, the order flips every repetition; medians):
  small-tmpfs   bench.py's small set (50,000 files of 100 B-16 KiB in 200
                directories) on a tmpfs: `rdcp --sync -r SRC/ DST/` (a local
                run: its receiver a child process, over loopback TCP) vs
                `tar c | tar x`. Targets: CPU <= 1.2 x, wall <= 1.15 x.
                Beside them, what landing each file whole costs the kernel
                (benchmarks/landing.c, the same number of 8 KiB files
                created in place, as tar x does, and made unnamed with
                O_TMPFILE and linked in whole, as rdcp does): rdcp's CPU less
                that difference, against tar's, is shown as a floor.
  small-disk    the same tree on this machine's disk, caches dropped before
                each run (the source read back in: warm source, cold
                destination), through a plain remote shell (no ssh crypto:
                tests/e2e/local-rsh), rdcp vs `rsync -a`: a full copy, then a
                no-op re-run. Targets: wall <= 0.5 x rsync, both. Floors
                beside them: `tar c | tar x` on the same disk (a full copy
                with no remote end and no check) and `find DST -printf %s`
                (a no-op's one cold stat of each entry).
  big-tmpfs     2 files of 1 GiB on a tmpfs, rdcp over TCP through the plain
                remote shell vs the floor `cp -a` + `iperf3 -n 2G` (both of
                iperf3's ends). Target: CPU <= 1.0 x.
rdcp keeps its index between runs (its steady state; an untimed run first
builds it). Every copy is compared with its source (rsync -anciH --delete)
outside the timing. The guest's free page reporting is held for the run
(bench.py's hold_memory()).

Results: RESULTS/cost.json and RESULTS/cost.md (RESULTS: --results,
$RDCP_BENCH_RESULTS or benchmarks/results).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
from bench import (HERE, MiB, RDCP, TOP, gen_small, hold_memory, log, one_at_a_time,  # noqa: E402
                   sq, stream_bytes)

RSH = os.path.join(TOP, "tests", "e2e", "local-rsh")
# (case, scenario, measure, contender, limit): rdcp's median / contender's <= limit
TARGETS = [("small-tmpfs", "full", "cpu", "tar-tar", 1.2),
           ("small-tmpfs", "full", "wall", "tar-tar", 1.15),
           ("small-disk", "full", "wall", "rsync", 0.5),
           ("small-disk", "noop", "wall", "rsync", 0.5),
           ("big-tmpfs", "full", "cpu", "cp+iperf3", 1.0)]


def timed(cmd, env=None, cwd=None):
    """Run cmd (a shell line) under /usr/bin/time: (cpu s, wall s)."""
    tf = f"/tmp/rdcp-cost-{os.getpid()}.time"
    p = subprocess.run(f"/usr/bin/time -f '%U %S %e' -o {tf} bash -c {sq(cmd)}", shell=True,
                       env=env, cwd=cwd, capture_output=True, text=True)
    with open(tf) as f:
        u, s, e = f.read().split()[-3:]
    os.unlink(tf)
    if p.returncode:
        sys.exit(f"cost: this run failed (exit {p.returncode}):\n  {cmd}\n{p.stderr[-2000:]}")
    return float(u) + float(s), float(e)


def same(src, dst):
    d = subprocess.run(["rsync", "-anciH", "--delete", f"{src}/", f"{dst}/"],
                       capture_output=True, text=True).stdout
    if d.strip():
        sys.exit(f"cost: the copy {dst} differs from {src}:\n{d[:2000]}")


def drop_caches(src):
    subprocess.run("sync", shell=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        pass
    subprocess.run(f"tar -C {sq(src)} -cf - . | cat >/dev/null", shell=True)


class Cost:
    def __init__(self, a):
        self.a = a
        self.runs = []
        self.env = dict(os.environ, XDG_CACHE_HOME=f"{a.work}/cache")

    def record(self, case, sc, c, rep, cpu, wall):
        self.runs.append({"case": case, "scenario": sc, "contender": c, "rep": rep,
                          "cpu": round(cpu, 3), "wall": round(wall, 3)})
        log(f"cost: {case} {sc} {c} rep {rep}: cpu {cpu:.2f} s, wall {wall:.2f} s")

    def rdcp(self, src, dst, remote):
        if remote:
            return (f"{RDCP} --sync -r --transport tcp -e {RSH} --rdcp-path {RDCP} "
                    f"{sq(src + '/')} {sq('localhost:' + dst + '/')}")
        return f"{RDCP} --sync -r {sq(src + '/')} {sq(dst + '/')}"

    def small_tmpfs(self, src, base, nfiles):
        subprocess.run(self.rdcp(src, f"{base}/prime", False), shell=True, env=self.env,
                       check=True)   # the index of SRC, as a steady state has it
        shutil.rmtree(f"{base}/prime")
        landing = f"{self.a.work}/landing"
        subprocess.run(["cc", "-O2", "-o", landing, os.path.join(HERE, "landing.c")],
                       check=True)
        for rep in range(1, self.a.reps + 1):
            order = ["rdcp", "tar-tar", "landing: in place", "landing: O_TMPFILE + link"]
            for c in (order if rep % 2 else order[::-1]):
                how = "tmpfile" if "TMPFILE" in c else "plain"
                dst = f"{base}/{how if c.startswith('landing') else c}-{rep}"
                subprocess.run("sync", shell=True)
                if c.startswith("landing"):
                    t0 = time.monotonic()
                    p = subprocess.run([landing, dst, str(nfiles), "8192", how],
                                       capture_output=True, text=True)
                    if p.returncode:
                        sys.exit(f"cost: {landing} failed: {p.stderr}")
                    cpu = float(p.stdout)
                    self.record("small-tmpfs", "full", c, rep, cpu, time.monotonic() - t0)
                    shutil.rmtree(dst)
                    continue
                if c == "rdcp":
                    cpu, wall = timed(self.rdcp(src, dst, False), self.env)
                else:
                    os.makedirs(dst)
                    cpu, wall = timed(f"set -o pipefail; tar -C {sq(src)} -cf - . | "
                                      f"tar -C {sq(dst)} -xf -")
                same(src, dst)
                shutil.rmtree(dst)
                self.record("small-tmpfs", "full", c, rep, cpu, wall)

    def small_disk(self, src, base):
        subprocess.run(self.rdcp(src, f"{base}/prime", True), shell=True, env=self.env,
                       check=True)
        shutil.rmtree(f"{base}/prime")
        for rep in range(1, self.a.reps + 1):
            order = ["rdcp", "rsync"] if rep % 2 else ["rsync", "rdcp"]
            for sc in ("full", "noop"):
                for c in order + (["find"] if sc == "noop" else ["tar-tar"]):
                    dst = f"{base}/{'rsync' if c == 'find' else c}-{rep}"
                    drop_caches(src)
                    if c == "find":   # the floor of a no-op: one stat of each entry, cold
                        cpu, wall = timed(f"find {sq(dst)} -printf %s >/dev/null")
                    elif c == "tar-tar":
                        os.makedirs(dst)
                        cpu, wall = timed(f"set -o pipefail; tar -C {sq(src)} -cf - . | "
                                          f"tar -C {sq(dst)} -xf -")
                        same(src, dst)
                        shutil.rmtree(dst)
                    elif c == "rdcp":
                        cpu, wall = timed(self.rdcp(src, dst, True), self.env)
                    else:
                        cpu, wall = timed(f"rsync -a -e {RSH} {sq(src + '/')} "
                                          f"{sq('localhost:' + dst + '/')}")
                    self.record("small-disk", sc, c, rep, cpu, wall)
            for c in order:
                same(src, f"{base}/{c}-{rep}")
                shutil.rmtree(f"{base}/{c}-{rep}")

    def big_tmpfs(self, src, base, nbytes):
        subprocess.run(self.rdcp(src, f"{base}/prime", True), shell=True, env=self.env,
                       check=True)
        shutil.rmtree(f"{base}/prime")
        for rep in range(1, self.a.reps + 1):
            order = ["rdcp", "cp+iperf3"] if rep % 2 else ["cp+iperf3", "rdcp"]
            for c in order:
                dst = f"{base}/{c}-{rep}"
                subprocess.run("sync", shell=True)
                if c == "rdcp":
                    cpu, wall = timed(self.rdcp(src, dst, True), self.env)
                    same(src, dst)
                else:
                    cpu, wall = timed(f"cp -a {sq(src)} {sq(dst)}")
                    same(src, dst)
                    shutil.rmtree(dst)
                    # iperf3's two ends, both children of the timed shell
                    c2, w2 = timed(f"iperf3 -s -1 -p {self.a.port} >/dev/null & sleep 0.3; "
                                   f"iperf3 -c 127.0.0.1 -p {self.a.port} -n {nbytes} "
                                   f">/dev/null; wait")
                    cpu, wall = cpu + c2, wall + w2 - 0.3
                shutil.rmtree(dst, ignore_errors=True)
                self.record("big-tmpfs", "full", c, rep, cpu, wall)

    def report(self, facts):
        med = {}
        for r in self.runs:
            med.setdefault((r["case"], r["scenario"], r["contender"]), []).append(r)
        rows = ["| case | scenario | contender | CPU s, median (min-max) | wall s, median "
                "(min-max) |", "|---|---|---|---|---|"]
        m = {}
        for k, rs in med.items():
            v = {q: sorted(x[q] for x in rs) for q in ("cpu", "wall")}
            m[k] = {q: statistics.median(v[q]) for q in v}
            rows.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(
                f"{statistics.median(v[q]):.3f} ({v[q][0]:.3f}-{v[q][-1]:.3f})"
                for q in ("cpu", "wall")) + " |")
        targets = []
        for case, sc, q, c, lim in TARGETS:
            x, y = m.get((case, sc, c)), m.get((case, sc, "rdcp"))
            if x and y:
                r = y[q] / x[q]
                targets.append({"target": f"{case} {sc}: rdcp {q} ≤ {lim} × {c}",
                                "ratio": round(r, 3), "met": r <= lim})
        x, y = m.get(("small-tmpfs", "full", "tar-tar")), m.get(("small-tmpfs", "full", "rdcp"))
        lp = m.get(("small-tmpfs", "full", "landing: in place"))
        lt = m.get(("small-tmpfs", "full", "landing: O_TMPFILE + link"))
        if x and y and lp and lt:
            r = (y["cpu"] - (lt["cpu"] - lp["cpu"])) / x["cpu"]
            targets.append({"target": "small-tmpfs full: rdcp cpu less what landing each file "
                            "whole costs (O_TMPFILE + link − in place), ÷ tar-tar: a floor, "
                            "not a target", "ratio": round(r, 3), "floor": True,
                            "landing_s": round(lt["cpu"] - lp["cpu"], 3)})
        for sc, c, what in (("full", "tar-tar", "tar c \\| tar x on the same disk"),
                            ("noop", "find", "a cold stat of every DST entry (find -printf %s)")):
            f, x = m.get(("small-disk", sc, c)), m.get(("small-disk", sc, "rsync"))
            if f and x:
                targets.append({"target": f"small-disk {sc}: {what} ÷ rsync, wall: a floor, "
                                "not a target", "ratio": round(f["wall"] / x["wall"], 3),
                                "floor": True})
        tl = ["| target | measured | met |", "|---|---|---|"] + [
            f"| {t['target']} | {t['ratio']} | "
            f"{'-' if t.get('floor') else 'yes' if t['met'] else 'NO'} |" for t in targets]
        return rows, tl, targets


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="file counts and sizes factor")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per contender")
    ap.add_argument("--cases", default="small-tmpfs,small-disk,big-tmpfs")
    ap.add_argument("--work", help="scratch directory on the disk (default: under /var/tmp)")
    ap.add_argument("--port", type=int, default=0,
                    help="iperf3's port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--results", default=os.environ.get("RDCP_BENCH_RESULTS",
                                                        os.path.join(HERE, "results")))
    a = ap.parse_args()
    for tool in ("rsync", "tar", "iperf3", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"cost: {tool} is missing; `make deps` installs it")
    if not os.access(RDCP, os.X_OK):
        sys.exit(f"cost: {RDCP} is not built; run `make` first")
    if os.geteuid():
        sys.exit("cost: needs root (a tmpfs is mounted, caches are dropped)")
    if not a.port:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            a.port = sk.getsockname()[1]
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in ("small-tmpfs", "small-disk", "big-tmpfs"):
            sys.exit(f"cost: unknown case '{c}'")
    lock = one_at_a_time()   # noqa: F841 (held until the process ends)
    made = not a.work
    a.work = a.work or subprocess.run(["mktemp", "-d", "/var/tmp/rdcp-cost-XXXXXX"],
                                      capture_output=True, text=True,
                                      check=True).stdout.strip()
    os.makedirs(a.results, exist_ok=True)
    tm = f"{a.work}/tmpfs"
    os.makedirs(tm, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("cost: terminated"))
    _, unhold = hold_memory()
    mounted = False
    nfiles = max(50, int(50000 * a.scale))
    nbig = max(4 * MiB, int(1024 * MiB * a.scale))
    facts = {"small": f"{nfiles} files of 100 B-16 KiB in 200 directories",
             "big": f"2 files of {nbig // MiB} MiB", "commit": subprocess.run(
                 ["git", "-C", TOP, "rev-parse", "--short", "HEAD"], capture_output=True,
                 text=True).stdout.strip()}
    c = Cost(a)
    t0 = time.monotonic()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12g", "tmpfs", tm], check=True)
        mounted = True
        if "small-tmpfs" in cases or "small-disk" in cases:
            log(f"cost: generating {facts['small']} ...")
            gen_small(f"{tm}/small", a.scale)
        if "small-tmpfs" in cases:
            os.makedirs(f"{tm}/out")
            c.small_tmpfs(f"{tm}/small", f"{tm}/out", nfiles)
            shutil.rmtree(f"{tm}/out")
        if "small-disk" in cases:
            shutil.rmtree(f"{a.work}/small", ignore_errors=True)
            subprocess.run(f"cp -a {sq(tm + '/small')} {sq(a.work + '/small')}", shell=True,
                           check=True)
            os.makedirs(f"{a.work}/out", exist_ok=True)
            c.small_disk(f"{a.work}/small", f"{a.work}/out")
        shutil.rmtree(f"{tm}/small", ignore_errors=True)
        if "big-tmpfs" in cases:
            log(f"cost: generating {facts['big']} ...")
            os.makedirs(f"{tm}/big")
            for i in range(2):
                stream_bytes(f"{tm}/big/blob{i}", nbig, f"cost{i}")
            os.makedirs(f"{tm}/out")
            c.big_tmpfs(f"{tm}/big", f"{tm}/out", 2 * nbig)
    finally:
        unhold()
        if mounted:
            subprocess.run(["umount", tm])
        if made:
            shutil.rmtree(a.work, ignore_errors=True)
    rows, tl, targets = c.report(facts)
    facts["minutes"] = round((time.monotonic() - t0) / 60, 1)
    with open(os.path.join(a.results, "cost.json"), "w") as f:
        json.dump({"facts": facts, "runs": c.runs, "targets": targets}, f, indent=1)
    out = [f"Cost (issue 33), {a.reps} reps, build {facts['commit']}: small = {facts['small']}, "
           f"big = {facts['big']}", ""] + rows + [""] + tl
    with open(os.path.join(a.results, "cost.md"), "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
