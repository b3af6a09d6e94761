#!/usr/bin/env python3
"""Python calls vs. the generated C++ stub on the same routines, same NAA,
one run (bench/README.md, "//bench:python_bench").

Starts `naarpc serve` (echo) on bench/python_bench.naa.yaml in a child
process, then alternates rounds of the C++ stub (bench/python_bench_stub, a
child process) and of naarpc.Client in this process: PyBench.Echo64 (64 B
inout: the round trip) and PyBench.Echo64M (64 MiB inout: bandwidth, 2 x 64
MiB per call). Each round gives a median per side; the table shows the
median over the rounds and the ratio. Runs from the runfiles root
(bench/python_bench.sh):

    ./tools/bazel run -c opt //bench:python_bench -- --rounds 5
"""

import argparse
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

import naarpc

IDL = "bench/python_bench.naa.yaml"


def start_naa():
    p = subprocess.Popen(["tools/naarpc/naarpc", "serve", "--idl", IDL,
                          "--transport", "emulated", "--port", "0", "--address", "127.0.0.1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
    p.wait()
    raise RuntimeError(f"naarpc serve exited {p.returncode}")


def median_ns(calls, fn):
    ns = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        ns.append(time.perf_counter_ns() - t0)
    return statistics.median(ns)


def cpp_round(port, small, big):
    out = subprocess.run(["bench/python_bench_stub", "--port", str(port),
                          "--small-calls", str(small), "--big-calls", str(big)],
                         capture_output=True, text=True, check=True).stdout
    got = dict(re.findall(r"^(\w+) calls=\d+ median_ns=(\d+)$", out, re.M))
    return float(got["Echo64"]), float(got["Echo64M"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small-calls", type=int, default=2000)
    ap.add_argument("--big-calls", type=int, default=10)
    args = ap.parse_args()

    naa, port = start_naa()
    rows = {k: ([], []) for k in ("Echo64", "Echo64 (empty())", "Echo64M", "Echo64M (empty())")}
    try:
        small = np.full(64, 7, np.uint8)
        big = np.full(64 << 20, 9, np.uint8)
        with naarpc.Client(IDL,
                           f"127.0.0.1:{port}", transport="emulated") as c:
            echo, echo_m = c.PyBench.Echo64, c.PyBench.Echo64M
            reg_small = c.empty("PyBench.Echo64", "data")
            reg_big = c.empty("PyBench.Echo64M", "data")
            reg_small[:] = small
            reg_big[:] = big
            for _ in range(2):  # warm-up: connections and MRSP outside the timed calls
                assert (echo(data=small).data == small).all()
                echo_m(data=big)
                echo(data=reg_small)
                echo_m(data=reg_big)
            for _ in range(args.rounds):
                cs, cb = cpp_round(port, args.small_calls, args.big_calls)
                ps = median_ns(args.small_calls, lambda: echo(data=small))
                pz = median_ns(args.small_calls, lambda: echo(data=reg_small))
                pb = median_ns(args.big_calls, lambda: echo_m(data=big))
                pbz = median_ns(args.big_calls, lambda: echo_m(data=reg_big))
                for key, py, cpp in (("Echo64", ps, cs), ("Echo64 (empty())", pz, cs),
                                     ("Echo64M", pb, cb), ("Echo64M (empty())", pbz, cb)):
                    rows[key][0].append(py)
                    rows[key][1].append(cpp)
    finally:
        naa.terminate()
        naa.wait()

    print(f"Python ({sys.version.split()[0]}, numpy {np.__version__}) vs. the generated C++ "
          f"stub, emulated transport, {args.rounds} rounds (medians of per-round medians)")
    print("| routine | Python | C++ stub | ratio (Python / C++) | difference |")
    print("|---|---|---|---|---|")
    for key, (py, cpp) in rows.items():
        p, c = statistics.median(py), statistics.median(cpp)
        if key.startswith("Echo64M"):
            # 2 x 64 MiB per call.
            mbps = lambda ns: 2 * (64 << 20) / (ns / 1e9) / 1e6  # noqa: E731
            print(f"| {key} | {mbps(p):.0f} MB/s | {mbps(c):.0f} MB/s | "
                  f"bandwidth {mbps(p) / mbps(c):.2f} | {(p - c) / 1e6:+.2f} ms/call |")
        else:
            print(f"| {key} | {p / 1e3:.1f} µs | {c / 1e3:.1f} µs | latency {p / c:.2f} | "
                  f"{(p - c) / 1e3:+.1f} µs |")


if __name__ == "__main__":
    main()
