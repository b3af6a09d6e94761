"""End-to-end tests of the naarpc command-line tool (tools/naarpc, docs/cli.md).

Runs the real binary against `naarpc serve` and against //examples:naa_server
on the emulated transport, in both wire dialects. Servers listen on ephemeral
ports; a test waits for the server's printed 'listening' line, never sleeps.
Nothing here asserts a duration.
"""

import http.server
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

NAARPC = os.path.abspath("tools/naarpc/naarpc")
NAA_SERVER = os.path.abspath("examples/naa_server")
TYPES = os.path.abspath("tests/cli/testdata/types.naa.yaml")
BAD_IDL = os.path.abspath("tests/cli/testdata/bad.naa.yaml")
VECTOR = os.path.abspath("services/vector/vector.naa.yaml")
CHECKED = os.path.abspath("services/checked/checked.naa.yaml")
INCREMENT = os.path.abspath("services/increment/increment.naa.yaml")
STREAM = os.path.abspath("services/stream/stream.naa.yaml")
LAYOUTS = os.path.abspath("tests/e2e/layouts.naa.yaml")

# Only turns a hang into a failure; no test relies on it.
HANG_GUARD_S = 120

# Exit statuses (naarpc --help).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_IDL = 0, 1, 2, 3
EXIT_UNREACHABLE, EXIT_DEADLINE, EXIT_NAA_STATUS = 4, 5, 6


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NAA_SPEC", "NAA_LOCAL_IP")}
    env.update(extra)
    return env


def run(*args, env=None):
    """Runs naarpc; returns (exit status, stdout, stderr)."""
    p = subprocess.run([NAARPC, *args], capture_output=True, text=True,
                       env=env or clean_env(), timeout=HANG_GUARD_S)
    return p.returncode, p.stdout, p.stderr


class Server:
    """A server process, ready once it printed its listening line."""

    def __init__(self, argv, ready_pattern):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=clean_env())
        self.output = ""
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], HANG_GUARD_S)
            if not ready:
                self.stop()
                raise AssertionError("no listening line from %s" % argv)
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise AssertionError("%s exited before listening: %s" % (argv, err))
            self.output += line
            m = re.search(ready_pattern, line)
            if m:
                self.port = int(m.group(1))
                return

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, err = self.proc.communicate(timeout=HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
            self.output += out
            self.stderr = err
        return self.proc.returncode


def has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def naarpc_serve(idl, *args):
    return Server([NAARPC, "serve", "--idl", idl, "--transport", "emulated", "--address",
                   "127.0.0.1", "--port", "0", *args],
                  r"^naarpc serve: listening on 127\.0\.0\.1:(\d+) ")


def example_server(*args):
    return Server([NAA_SERVER, "--transport", "emulated", "--address", "127.0.0.1", "--port",
                   "0", *args], r"^naa_server: serving .* on 127\.0\.0\.1:(\d+) ")


def free_port():
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- describe -------------------------------------------------------------------------------

class DescribeTest(unittest.TestCase):

    def test_text_lists_services_routines_params(self):
        rc, out, err = run("describe", VECTOR)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("package naarpc.services.vector", out)
        self.assertIn("service VectorArith (6 routines)", out)
        self.assertRegex(out, r"Add  code 1 \(0x01\), kernel timeout 2000 ms, client deadline "
                              r"3000 ms")
        self.assertRegex(out, r"in    a: f32\[1024\]  4 KiB")
        self.assertRegex(out, r"inout x: f64\[<=65536\]  512 KiB \(8-byte length header\)")

    def test_memory_windows_declaration(self):
        # docs/idl.md `memory_windows`: the service's is its routines' default.
        path = os.path.join(tempfile.mkdtemp(), "w.naa.yaml")
        with open(path, "w") as f:
            f.write("package: t.w\nservices:\n  - name: S\n    memory_windows: required\n"
                    "    routines:\n"
                    "      - {name: A, code: 1, params: [{name: x, type: u8, size: 4, "
                    "direction: in}, {name: y, type: u8, size: 4, direction: out}]}\n"
                    "      - {name: B, code: 2, memory_windows: none, params: [{name: x, "
                    "type: u8, size: 4, direction: in}, {name: y, type: u8, size: 4, "
                    "direction: out}]}\n")
        rc, out, err = run("describe", path)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertRegex(out, r"A  code 1 .*client deadline \d+ ms, per-call memory windows\n")
        self.assertRegex(out, r"B  code 2 .*client deadline \d+ ms\n")
        rc, out, err = run("describe", path, "--json")
        self.assertEqual(rc, EXIT_OK, err)
        j = json.loads(out)
        self.assertTrue(j["services"][0]["memory_windows"])
        self.assertEqual([r["memory_windows"] for r in j["services"][0]["routines"]],
                         [True, False])

    def test_text_internal_single_send_and_errors(self):
        rc, out, err = run("describe", TYPES, "Shapes.Weighted")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("w: f32[2]  8 B, single-send", out)
        rc, out, err = run("describe", TYPES, "Shapes.InPlace")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("InPlace  code 21 (0x15)", out)
        self.assertIn("scale: f64[1]  8 B\n", out)
        self.assertIn("internal scratch: u8[256]  256 B", out)
        self.assertIn("error TOO_LONG = 0x21  -- v is too long", out)
        self.assertNotIn("Var ", out)
        rc, out, err = run("describe", CHECKED)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("errors of every routine:", out)
        self.assertIn("LENGTH_MISMATCH = 0x10", out)
        self.assertIn("error DIVISION_BY_ZERO = 0x11  -- some b[i] is 0", out)

    def test_json_schema(self):
        rc, out, err = run("describe", "--json", TYPES)
        self.assertEqual(rc, EXIT_OK, err)
        doc = json.loads(out)
        self.assertEqual(doc["format"], "naarpc-describe/1")
        self.assertEqual(doc["package"], "naarpc.testing.cli")
        self.assertEqual([s["name"] for s in doc["services"]], ["Types", "Shapes"])
        types = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
                 "f32": 4, "f64": 8, "bytes": 1}
        param_keys = ["name", "type", "elements", "variable", "bytes", "direction",
                      "single_send", "stream", "doc"]
        routine_keys = ["name", "code", "doc", "timeout_ms", "deadline_ms", "memory_windows",
                        "params", "internal", "errors"]
        seen_types = set()
        for service in doc["services"]:
            self.assertEqual(list(service), ["name", "doc", "timeout_ms", "memory_windows",
                                             "routines", "errors"])
            for r in service["routines"]:
                self.assertEqual(list(r), routine_keys)
                self.assertTrue(1 <= r["code"] <= 127)
                self.assertEqual(r["timeout_ms"], 20000)
                self.assertEqual(r["deadline_ms"], 21000)
                for p in r["params"]:
                    self.assertEqual(list(p), param_keys)
                    self.assertIn(p["direction"], ("in", "out", "inout"))
                    self.assertIsNone(p["stream"])
                    seen_types.add(p["type"])
                    header = 8 if p["variable"] else 0
                    self.assertEqual(p["bytes"], p["elements"] * types[p["type"]] + header)
        self.assertEqual(seen_types, set(types))
        shapes = doc["services"][1]
        in_place = shapes["routines"][1]
        self.assertEqual(in_place["internal"], [{"name": "scratch", "type": "u8",
                                                 "elements": 256, "bytes": 256,
                                                 "naa_address": 0, "doc": ""}])
        self.assertEqual(in_place["params"][0]["single_send"], False)
        self.assertEqual(shapes["routines"][2]["params"][0]["single_send"], True)
        self.assertEqual(in_place["errors"], [{"name": "TOO_LONG", "code": 0x21,
                                               "doc": "v is too long"}])
        self.assertEqual(doc["services"][0]["errors"],
                         [{"name": "BAD_INPUT", "code": 0x20, "doc": "the input was refused",
                           "routine": ""}])

    def test_layouts(self):
        rc, out, err = run("describe", LAYOUTS, "Layouts.Mesh")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("in    xyz: f32[12]  48 B, caller's layout interleaved{repeat [1, 1, 1], "
                      "elements 12} (12 runs)", out)
        rc, out, err = run("describe", "--json", LAYOUTS, "Layouts.ScaleColumn")
        self.assertEqual(rc, EXIT_OK, err)
        layout = json.loads(out)["services"][0]["routines"][0]["params"][0]["layout"]
        self.assertEqual(layout, {"kind": "strided",
                                  "text": "strided{count 64, block 1, stride 64, offset 5}",
                                  "runs": 64, "reach": [4038]})

    def test_json_selector(self):
        rc, out, err = run("describe", "--json", VECTOR, "VectorArith.Dot")
        self.assertEqual(rc, EXIT_OK, err)
        doc = json.loads(out)
        routines = doc["services"][0]["routines"]
        self.assertEqual([r["name"] for r in routines], ["Dot"])
        self.assertEqual(routines[0]["params"][0]["elements"], 65536)
        self.assertTrue(routines[0]["params"][0]["variable"])

    def test_streams(self):
        rc, out, err = run("describe", STREAM, "StreamOps.Transform")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("in    data: u32 stream, chunks of 16384, window 4  ring 256 KiB", out)
        rc, out, err = run("describe", "--json", STREAM, "StreamOps.Transform")
        self.assertEqual(rc, EXIT_OK, err)
        params = json.loads(out)["services"][0]["routines"][0]["params"]
        self.assertEqual([p["stream"] for p in params],
                         [None, {"chunk": 16384, "window": 4}, {"chunk": 16384, "window": 4}])
        # bench needs a stream's size.
        rc, out, err = run("bench", "--idl", STREAM, "--target", "127.0.0.1:1", "Transform")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("parameter 'data' is a stream: give --sizes", err)
        # A stream's length comes from its value.
        rc, out, err = run("call", "--idl", STREAM, "--target", "127.0.0.1:1", "Transform",
                           "--in", "factor=2", "--in", "data=seq")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("parameter 'data' is a stream: give its length, e.g. seq:1000", err)
        rc, out, err = run("call", "--idl", STREAM, "--target", "127.0.0.1:1", "Transform",
                           "--in", "factor=2")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("missing --in data=... (in, stream of u32; e.g. data=seq:1000", err)

    def test_unknown_selector(self):
        rc, out, err = run("describe", VECTOR, "VectorArith.Nope")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("service VectorArith has no routine 'Nope'", err)
        self.assertIn("routines: Add, Sub, Mul, Scale, Dot, Prefix", err)
        rc, out, err = run("describe", VECTOR, "Nope")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("no service 'Nope' (services: VectorArith)", err)

    def test_invalid_and_missing_idl(self):
        rc, out, err = run("describe", BAD_IDL)
        self.assertEqual(rc, EXIT_IDL)
        self.assertRegex(err, r"bad\.naa\.yaml:\d+:\d+: error: ")
        rc, out, err = run("describe", "/nonexistent/x.naa.yaml")
        self.assertEqual(rc, EXIT_IDL)
        self.assertIn("/nonexistent/x.naa.yaml", err)

    def test_help_on_every_subcommand(self):
        for cmd in ([], ["describe"], ["call"], ["serve"], ["bench"]):
            rc, out, err = run(*cmd, "--help")
            self.assertEqual(rc, EXIT_OK, (cmd, err))
            self.assertIn("Usage:", out)
        rc, out, err = run("call", "--help")
        for flag in ("--idl", "--target", "--in", "--out", "--dialect", "--transport",
                     "--deadline", "--repeat"):
            self.assertIn(flag, out)
        rc, out, err = run()
        self.assertEqual(rc, EXIT_USAGE)


# ---- the command line itself ------------------------------------------------------------------

class CommandLineTest(unittest.TestCase):

    def test_unknown_subcommand(self):
        rc, out, err = run("descibe", TYPES)
        self.assertEqual(rc, EXIT_USAGE)
        self.assertEqual(err, "naarpc: unknown subcommand 'descibe'; did you mean 'describe'? "
                              "(subcommands: describe, call, serve, bench, stats; "
                              "naarpc --help)\n")
        rc, out, err = run("frobnicate")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertEqual(err, "naarpc: unknown subcommand 'frobnicate' (subcommands: describe, "
                              "call, serve, bench, stats; naarpc --help)\n")
        rc, out, err = run("stat", "--target", "127.0.0.1:1")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("unknown subcommand 'stat'; did you mean 'stats'?", err)
        rc, out, err = run("--bogus")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("unknown option '--bogus': a subcommand comes first", err)
        rc, out, err = run()
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("a subcommand is required: describe, call, serve, bench, stats", err)

    def test_integer_options(self):
        call = ("call", "--idl", TYPES, "--target", "127.0.0.1:1", "U8", "--in", "x=zeros")
        bench = ("bench", "--idl", TYPES, "--target", "127.0.0.1:1", "U8")
        serve = ("serve", "--idl", TYPES)
        cases = [
            (call + ("--deadline", "1.5"),
             "--deadline: expected an integer number of milliseconds (1..86400000), got '1.5'"),
            (call + ("--deadline", "abc"),
             "--deadline: expected an integer number of milliseconds (1..86400000), got 'abc'"),
            (call + ("--deadline", "0"),
             "--deadline: 0 is out of the range 1..86400000 (number of milliseconds)"),
            (call + ("--deadline", "99999999999999999999"),
             "--deadline: 99999999999999999999 is out of the range 1..86400000"),
            (bench + ("--deadline", "2.5"),
             "--deadline: expected an integer number of milliseconds (1..86400000), got '2.5'"),
            (call + ("--repeat", "1e3"),
             "--repeat: expected an integer number of calls (1..1099511627776), got '1e3'"),
            (serve + ("--port", "1.5"),
             "--port: expected an integer port number (0..65535), got '1.5'"),
            (serve + ("--port", "70000"), "--port: 70000 is out of the range 0..65535"),
            (serve + ("--max-regions", "x"),
             "--max-regions: expected an integer number of regions (1..255), got 'x'"),
            (serve + ("--max-connections", "2.0"),
             "--max-connections: expected an integer number of connections (1..65536)"),
            (serve + ("--metrics-port", "-1"), "--metrics-port: -1 is out of the range 0..65535"),
            (serve + ("--idle-timeout", "1s"),
             "--idle-timeout: expected an integer number of milliseconds (0..86400000)"),
            (bench + ("--duration", "abc"),
             "--duration: expected a number of seconds in (0, 3600], got 'abc'"),
            (bench + ("--duration", "0"), "--duration: 0 is out of the range (0, 3600]"),
            (bench + ("--duration", "1e999"), "--duration: 1e999 is out of the range (0, 3600]"),
            (bench + ("--duration", "0.0015"),
             "--duration: 0.0015 is not a whole number of milliseconds"),
        ]
        for args, message in cases:
            with self.subTest(args=args[-2:]):
                rc, out, err = run(*args)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertIn(message, err)
                self.assertNotIn("not in range", err)


# ---- call against naarpc serve, both dialects --------------------------------------------------

class CallServeBase:
    DIALECT = None

    @classmethod
    def setUpClass(cls):
        cls.echo = naarpc_serve(TYPES)
        cls.inc = naarpc_serve(TYPES, "--kernel", "increment", "--kernel", "Var=echo",
                               "--kernel", "Types.U8=zeros", "--kernel", "I8=fail:BAD_INPUT",
                               "--kernel", "I16=fail:0x42", "--kernel", "I32=sleep:3000")
        cls.tmp = tempfile.mkdtemp()

        cls.streams = naarpc_serve(STREAM, "--kernel", "increment", "--kernel", "Checksum=echo")

    @classmethod
    def tearDownClass(cls):
        for s in (cls.echo, cls.inc, cls.streams):
            rc = s.stop()
            assert rc == 0, (rc, s.output, s.stderr)

    def call(self, server, routine, *args, idl=TYPES, env=None):
        return run("call", "--idl", idl, "--target", "127.0.0.1:%d" % server.port,
                   "--transport", "emulated", "--dialect", self.DIALECT, routine, *args,
                   env=env)

    def path(self, name):
        return os.path.join(self.tmp, self.DIALECT + "_" + name)

    def test_json_arrays_of_every_type(self):
        cases = [
            ("U8", "[0, 1, 254, 255]"),
            ("U16", "[0, 1, 65535]"),
            ("U32", "[0, 7, 4294967295]"),
            ("U64", "[0, 18446744073709551615]"),
            ("I8", "[-128, 0, 127]"),
            ("I16", "[-32768, -1, 32767]"),
            ("I32", "[-2147483648, 5, 2147483647]"),
            ("I64", "[-9223372036854775808, 9223372036854775807]"),
            ("F32", "[0.5, -1.25, 3, 1e+30]"),
            ("F64", "[0.1, -2.5e-300, 1e+300]"),
            ("Bytes", "[0, 1, 2, 3, 4, 5, 6, 255]"),
        ]
        for routine, value in cases:
            with self.subTest(routine=routine):
                rc, out, err = self.call(self.echo, "Types." + routine, "--in", "x=" + value,
                                         "--json")
                self.assertEqual(rc, EXIT_OK, err)
                doc = json.loads(out)
                self.assertEqual(doc["status"], "OK")
                self.assertEqual(doc["routine"], "Types." + routine)
                self.assertEqual(doc["outputs"]["y"], json.loads(value))

    def test_non_finite_floats(self):
        rc, out, err = self.call(self.echo, "F64", "--in", 'x=["NaN", "Infinity", "-Infinity"]',
                                 "--json")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"]["y"], ["NaN", "Infinity", "-Infinity"])
        rc, out, err = self.call(self.echo, "F64", "--in", 'x=["1", 2, 3]')
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'x'[0]: expected a number (f64", err)

    def test_increment_kernel_by_type(self):
        rc, out, err = self.call(self.inc, "U16", "--in", "x=[0, 1, 65535]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [1, 2, 0]", out)  # wraps at the type's width
        self.assertIn("status: OK", out)
        rc, out, err = self.call(self.inc, "F64", "--in", "x=[0.5, -1, 2]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [1.5, 0, 3]", out)
        rc, out, err = self.call(self.inc, "I64", "--in", "x=[-1, 41]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [0, 42]", out)

    def test_zeros_kernel(self):
        rc, out, err = self.call(self.inc, "Types.U8", "--in", "x=[9, 9, 9, 9]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [0, 0, 0, 0]", out)

    def test_raw_file_in_and_out(self):
        src, dst = self.path("in.bin"), self.path("out.bin")
        data = struct.pack("<4f", 1.0, 2.5, -3.0, 4.25)
        with open(src, "wb") as f:
            f.write(data)
        rc, out, err = self.call(self.echo, "F32", "--in", "x=@" + src, "--out", "y=@" + dst)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y: 4 element(s) written to " + dst, out)
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), data)
        # Increment sees the file's elements as f32.
        rc, out, err = self.call(self.inc, "F32", "--in", "x=@" + src)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [2, 3.5, -2, 5.25]", out)

    def test_raw_file_of_wrong_size(self):
        src = self.path("odd.bin")
        with open(src, "wb") as f:
            f.write(b"\0" * 6)
        rc, out, err = self.call(self.echo, "F32", "--in", "x=@" + src)
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'x': file '%s' has 6 bytes, not a multiple of the 4-byte f32 "
                      "element" % src, err)
        rc, out, err = self.call(self.echo, "F32", "--in", "x=@" + self.path("missing.bin"))
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("cannot open", err)
        rc, out, err = self.call(self.echo, "F32", "--in", "x=@" + self.tmp)
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("'%s' is not a regular file" % self.tmp, err)
        big = self.path("big.bin")
        with open(big, "wb") as f:
            f.truncate(1 << 30)  # sparse: refused by its size, never read
        rc, out, err = self.call(self.echo, "Var", "--in", "data=@" + big)
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("has 1073741824 bytes; the parameter holds at most 1048576", err)

    def test_hex_in_and_out(self):
        rc, out, err = self.call(self.echo, "U16", "--in", "x=hex:0100ff7f3412", "--out",
                                 "y=hex")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = 0100ff7f3412", out)
        rc, out, err = self.call(self.echo, "U16", "--in", "x=hex:0100ff7f3412", "--format",
                                 "json")
        self.assertIn("y = [1, 32767, 4660]", out)
        rc, out, err = self.call(self.echo, "U16", "--in", "x=hex:01zz")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("'zz' at offset 2 is not hex", err)

    def test_generated_inputs(self):
        rc, out, err = self.call(self.echo, "I32", "--in", "x=seq")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [0, 1, 2]", out)
        rc, out, err = self.call(self.echo, "F64", "--in", "x=zeros")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [0, 0, 0]", out)
        first = self.call(self.echo, "U64", "--in", "x=random", "--json")
        second = self.call(self.echo, "U64", "--in", "x=random", "--json")
        self.assertEqual(first[0], EXIT_OK, first[2])
        values = json.loads(first[1])["outputs"]["y"]
        self.assertEqual(len(values), 2)
        self.assertNotEqual(values, [0, 0])
        self.assertEqual(json.loads(second[1])["outputs"]["y"], values)  # reproducible

    def test_variable_length_takes_length_from_input(self):
        rc, out, err = self.call(self.echo, "Shapes.Var", "--in", "data=[1, 2, 3]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("echo = [1, 2, 3]", out)
        rc, out, err = self.call(self.echo, "Var", "--in", "data=seq:1000", "--json")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"]["echo"], [i % 256 for i in range(1000)])
        rc, out, err = self.call(self.echo, "Var", "--in", "data=[]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("echo = []", out)
        # Large output: a summary by default.
        rc, out, err = self.call(self.echo, "Var", "--in", "data=zeros:100000")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("echo = 100000 x u8: min 0, max 0, sum 0, first [0, 0, 0", out)
        rc, out, err = self.call(self.inc, "Var", "--in", "data=seq:100000")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("echo = 100000 x u8: min 0, max 255, sum 12742320, first [0, 1, 2", out)
        rc, out, err = self.call(self.echo, "Var", "--in", "data=zeros:1048577")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'data': expected at most 1048576 u8 element(s), got 1048577",
                      err)

    def test_inout_scalar_and_internal_region(self):
        rc, out, err = self.call(self.inc, "Shapes.InPlace", "--in", "scale=2", "--in",
                                 "v=[1, 2, 3, 4, 5]", "--json")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"], {"v": [2, 3, 4, 5, 6]})

    def test_single_send(self):
        rc, out, err = self.call(self.inc, "Weighted", "--in", "w=[1, 2]", "--in", "x=[5, 6]",
                                 "--repeat", "3")
        if self.DIALECT == "reference":
            self.assertEqual(rc, EXIT_OK, err)
            self.assertIn("y = [2, 3]", out)
        else:
            self.assertEqual(rc, EXIT_USAGE)
            self.assertIn("region 0 'w': single_send needs the reference dialect", err)
            self.assertIn("--dialect reference", err)

    def test_layouts(self):
        # docs/idl.md "Layouts": the caller's memory (what the layout reaches)
        # is gathered; the packed elements go as they are; outputs print packed.
        server = naarpc_serve(LAYOUTS)
        try:
            xyz = "xyz=[1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400]"
            rc, out, err = self.call(server, "Mesh", "--in", xyz, "--json", idl=LAYOUTS)
            self.assertEqual(rc, EXIT_OK, err)
            self.assertEqual(json.loads(out)["outputs"]["sums"], [1, 10, 100, 2])
            matrix = "col=seq:%d" % (63 * 64 + 5 + 1)
            rc, out, err = self.call(server, "ScaleColumn", "--in", matrix, "--json", idl=LAYOUTS)
            self.assertEqual(rc, EXIT_OK, err)
            self.assertEqual(json.loads(out)["outputs"]["col"][:3], [5, 69, 133])
            rc, out, err = self.call(server, "ScaleColumn", "--in", "col=seq:64", "--json",
                                     idl=LAYOUTS)
            self.assertEqual(rc, EXIT_OK, err)
            self.assertEqual(json.loads(out)["outputs"]["col"][:3], [0, 1, 2])
            rc, out, err = self.call(server, "ScaleColumn", "--in", "col=seq:65", idl=LAYOUTS)
            self.assertEqual(rc, EXIT_USAGE, err)
            self.assertIn("expected the caller's memory, 4038 f64 elements (its layout reaches "
                          "them), or the packed 64, got 65", err)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_streams(self):
        # An output stream echoes the next input stream (+1 here), a fixed
        # output the first bytes of its source, a stream without an input
        # stream the next input's bytes.
        rc, out, err = self.call(self.streams, "Transform", "--in", "factor=3", "--in",
                                 "data=seq:40000", "--repeat", "2", "--json", idl=STREAM)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"]["out"], [i + 1 for i in range(40000)])
        rc, out, err = self.call(self.streams, "Checksum", "--in", "data=seq:100000", "--json",
                                 idl=STREAM)
        self.assertEqual(rc, EXIT_OK, err)
        first = bytes(range(32))
        self.assertEqual(json.loads(out)["outputs"]["digest"],
                         list(struct.unpack("<4Q", first)))
        rc, out, err = self.call(self.streams, "Generate", "--in", "count=5", idl=STREAM)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("data = [6, 1, 1, 1, 1, 1, 1, 1]", out)
        rc, out, err = self.call(self.streams, "Transform", "--in", "factor=3", "--in",
                                 "data=[]", idl=STREAM)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("out = []", out)

    def test_repeat(self):
        rc, out, err = self.call(self.inc, "U32", "--in", "x=[1, 2, 3]", "--repeat", "5")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [2, 3, 4]", out)
        self.assertRegex(out, r"status: OK \(5 calls in ")

    def test_memory_windows(self):
        # Per-call windows (docs/protocol.md 4.5): naarpc serve accepts them.
        rc, out, err = self.call(self.inc, "U32", "--in", "x=[1, 2, 3]", "--repeat", "3",
                                 "--memory-windows")
        if self.DIALECT == "spec":
            self.assertEqual(rc, EXIT_OK, err)
            self.assertIn("y = [2, 3, 4]", out)
            self.assertRegex(out, r"status: OK \(3 calls in ")
        else:
            self.assertEqual(rc, EXIT_USAGE, out)
            self.assertIn("--memory-windows needs --dialect spec", err)

    def test_no_memory_windows(self):
        # Off for every routine, whatever the IDL declares (docs/idl.md).
        rc, out, err = self.call(self.inc, "U32", "--in", "x=[1, 2, 3]", "--no-memory-windows")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("y = [2, 3, 4]", out)
        rc, out, err = self.call(self.inc, "U32", "--in", "x=[1]", "--memory-windows",
                                 "--no-memory-windows")
        self.assertEqual(rc, EXIT_USAGE, out)
        self.assertIn("excludes", err)

    def test_naa_application_error_by_idl_name(self):
        rc, out, err = self.call(self.inc, "I8", "--in", "x=[1, 2, 3]")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        self.assertIn("BAD_INPUT", err)
        self.assertIn("0x20", err)
        self.assertIn("the input was refused", err)
        self.assertNotIn("status: OK", out)
        rc, out, err = self.call(self.inc, "I16", "--in", "x=[1, 2, 3]")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        self.assertIn("0x42", err)
        rc, out, err = self.call(self.inc, "I8", "--in", "x=[1, 2, 3]", "--json")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        doc = json.loads(out)
        self.assertEqual((doc["routine"], doc["status"], doc["code"], doc["calls"]),
                         ("Types.I8", "BAD_INPUT", 0x20, 0))
        self.assertIn("the input was refused", doc["error"])

    def test_deadline(self):
        rc, out, err = self.call(self.inc, "I32", "--in", "x=[1, 2, 3]", "--deadline", "200")
        self.assertEqual(rc, EXIT_DEADLINE, err)
        self.assertIn("DEADLINE_EXCEEDED", err.upper().replace(" ", "_"))
        self.assertIn("hint: raise --deadline", err)

    def test_progress_bar_only_on_a_terminal(self):
        # The kernel sleeps 3 s: well beyond the bar's 1 s threshold.
        args = [NAARPC, "call", "--idl", TYPES, "--target", "127.0.0.1:%d" % self.inc.port,
                "--transport", "emulated", "--dialect", self.DIALECT, "I32", "--in",
                "x=[1, 2, 3]"]
        master, slave = pty.openpty()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=clean_env())
        os.close(slave)
        tty = b""
        while True:
            ready, _, _ = select.select([master], [], [], HANG_GUARD_S)
            self.assertTrue(ready, "no output on the terminal")
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            tty += chunk
        os.close(master)
        out = proc.stdout.read().decode()
        proc.stdout.close()
        self.assertEqual(proc.wait(timeout=HANG_GUARD_S), EXIT_OK)
        self.assertIn("y = [1, 2, 3]", out)
        self.assertIn(b"\rTypes.I32 [", tty)
        self.assertIn(b" 0/1 ", tty)
        self.assertTrue(tty.endswith(b"\r\x1b[K"), tty)  # cleared at the end
        # Not a terminal: no bar.
        rc, out, err = self.call(self.inc, "I32", "--in", "x=[1, 2, 3]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(err, "")

    def test_unknown_routine(self):
        rc, out, err = self.call(self.echo, "Types.Nope", "--in", "x=[1]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("has no routine 'Types.Nope'", err)
        self.assertIn("Types.U8", err)
        self.assertIn("Shapes.Var", err)

    def test_wrong_element_count(self):
        rc, out, err = self.call(self.echo, "F32", "--in", "x=[1, 2, 3]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'x': expected 4 f32 element(s), got 3", err)

    def test_bad_json_and_ranges(self):
        rc, out, err = self.call(self.echo, "F32", "--in", "x=[1, 2,")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'x': not valid JSON", err)
        rc, out, err = self.call(self.echo, "U8", "--in", "x=[1, 2, 256, 3]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("parameter 'x'[2]: 256 is out of the range of u8 (0..255)", err)
        rc, out, err = self.call(self.echo, "I8", "--in", "x=[1, -129, 3]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("-129 is out of the range of i8", err)
        rc, out, err = self.call(self.echo, "U32", "--in", "x=[1, 2.5, 3]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("expected an integer (u32), got 2.5", err)
        rc, out, err = self.call(self.echo, "U32", "--in", 'x={"a": 1}')
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("expected a JSON array of u32", err)

    def test_numbers_beyond_the_type(self):
        # JSON reads integers beyond 64 bits as doubles and refuses numbers
        # beyond f64: still "out of the range", quoting the number as given.
        cases = [
            ("U64", "[18446744073709551616, 0]",
             "parameter 'x'[0]: 18446744073709551616 is out of the range of u64 "
             "(0..18446744073709551615)"),
            ("I64", "[0, -9223372036854775809]",
             "parameter 'x'[1]: -9223372036854775809 is out of the range of i64 "
             "(-9223372036854775808..9223372036854775807)"),
            ("U8", "[99999999999999999999999, 0, 0, 0]",
             "parameter 'x'[0]: 99999999999999999999999 is out of the range of u8 (0..255)"),
            ("F64", "[0, 1e309, 0]", "parameter 'x'[1]: 1e309 is out of the range of f64"),
            ("F64", "-1e309", "parameter 'x'[0]: -1e309 is out of the range of f64"),
            ("F32", "[1e39, 0, 0, 0]", "parameter 'x'[0]: 1e39 is out of the range of f32"),
            ("U32", "[1, 2e30, 3]", "parameter 'x'[1]: expected an integer (u32), got 2e+30"),
        ]
        for routine, value, message in cases:
            with self.subTest(routine=routine, value=value):
                rc, out, err = self.call(self.echo, routine, "--in", "x=" + value)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertIn("naarpc: --in x: " + message + "\n", err)
        rc, out, err = self.call(self.echo, "Shapes.Var", "--in", "data=seq:99999999999999999999")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("parameter 'data': 'seq:99999999999999999999': the element count is too "
                      "large; it takes at most 1048576 u8", err)
        rc, out, err = self.call(self.echo, "U8", "--in", "x=zeros:18446744073709551616")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("the element count is too large; it takes exactly 4 u8", err)
        for count in ("", "+4", " 4", "4x"):
            rc, out, err = self.call(self.echo, "U8", "--in", "x=zeros:" + count)
            self.assertEqual(rc, EXIT_USAGE, err)
            self.assertIn("'zeros:%s': the element count must be a decimal number" % count, err)

    def test_missing_unknown_and_output_params(self):
        rc, out, err = self.call(self.echo, "F32")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("missing --in x=... (in, 4 x f32", err)
        rc, out, err = self.call(self.echo, "F32", "--in", "x=zeros", "--in", "z=zeros")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("has no parameter 'z' (inputs: x)", err)
        rc, out, err = self.call(self.echo, "F32", "--in", "y=zeros")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("--in y: 'y' is an output of Types.F32 (inputs: x)", err)
        rc, out, err = self.call(self.echo, "F32", "--in", "x")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("write NAME=VALUE", err)


class CallServeSpecTest(CallServeBase, unittest.TestCase):
    DIALECT = "spec"


class CallServeReferenceTest(CallServeBase, unittest.TestCase):
    DIALECT = "reference"


# ---- call against the example server, both dialects --------------------------------------------

class CallExampleServerBase:
    DIALECT = None

    @classmethod
    def setUpClass(cls):
        cls.server = example_server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def call(self, idl, routine, *args):
        return run("call", "--idl", idl, "--target", "127.0.0.1:%d" % self.server.port,
                   "--transport", "emulated", "--dialect", self.DIALECT, routine, *args)

    def test_vector_add(self):
        rc, out, err = self.call(VECTOR, "VectorArith.Add", "--in", "a=seq", "--in", "b=seq",
                                 "--out", "out=json")
        self.assertEqual(rc, EXIT_OK, err)
        values = json.loads(out.split("out = ", 1)[1].splitlines()[0])
        self.assertEqual(values, [2.0 * i for i in range(1024)])

    def test_vector_variable_lengths(self):
        rc, out, err = self.call(VECTOR, "Dot", "--in", "a=[1, 2, 3]", "--in", "b=[4, 5, 6]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("result = [32]", out)
        rc, out, err = self.call(VECTOR, "Prefix", "--in", "x=[1, 2, 3, 4]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("sums = [1, 3, 6, 10]", out)
        rc, out, err = self.call(VECTOR, "Scale", "--in", "factor=0.5", "--in", "x=[2, 4]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("x = [1, 2]", out)

    def test_increment_bytes(self):
        rc, out, err = self.call(INCREMENT, "IncrementBytes", "--in", "data=seq", "--out",
                                 "data=hex")
        self.assertEqual(rc, EXIT_OK, err)
        got = bytes.fromhex(out.split("data = ", 1)[1].split()[0])
        self.assertEqual(got, bytes((i + 1) % 256 for i in range(4096)))

    def test_application_error(self):
        rc, out, err = self.call(CHECKED, "CheckedMath.Divide", "--in", "a=[1, 2]", "--in",
                                 "b=[1, 0]")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        self.assertIn("DIVISION_BY_ZERO", err)
        self.assertIn("some b[i] is 0", err)
        rc, out, err = self.call(CHECKED, "Divide", "--in", "a=[1, 2]", "--in", "b=[1]")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        self.assertIn("LENGTH_MISMATCH", err)
        rc, out, err = self.call(CHECKED, "Divide", "--in", "a=[7, -9]", "--in", "b=[2, 3]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("q = [3, -3]", out)

    def test_streams(self):
        rc, out, err = self.call(STREAM, "StreamOps.Transform", "--in", "factor=3", "--in",
                                 "data=[1, 2, 3]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("out = [4, 7, 10]", out)
        # Several chunks each way (16384 u32 a chunk), on one connection.
        rc, out, err = self.call(STREAM, "Transform", "--in", "factor=2", "--in",
                                 "data=seq:40000", "--repeat", "2", "--json")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"]["out"], [2 * i + 1 for i in range(40000)])
        data = bytes(i % 256 for i in range(100000))
        src = os.path.join(tempfile.mkdtemp(), "data.bin")
        with open(src, "wb") as f:
            f.write(data)
        fnv = 0xcbf29ce484222325
        for b in data:
            fnv = ((fnv ^ b) * 0x100000001b3) % (1 << 64)
        rc, out, err = self.call(STREAM, "Checksum", "--in", "data=@" + src, "--json")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(json.loads(out)["outputs"]["digest"], [sum(data), len(data), 2, fnv])
        rc, out, err = self.call(STREAM, "Generate", "--in", "count=70000", "--out",
                                 "data=hex")
        self.assertEqual(rc, EXIT_OK, err)
        got = bytes.fromhex(out.split("data = ", 1)[1].split()[0])
        self.assertEqual(got, bytes(i * 7 % 256 for i in range(70000)))
        rc, out, err = self.call(STREAM, "Histogram", "--in", "limit=10", "--in",
                                 "data=zeros:100")
        self.assertEqual(rc, EXIT_NAA_STATUS)
        self.assertIn("LIMIT_EXCEEDED", err)

    def test_naa_spec_discovery(self):
        spec = "127.0.0.1:%d:1:3,127.0.0.1:%d:5:3" % (self.server.port, self.server.port)
        rc, out, err = run("call", "--idl", VECTOR, "--transport", "emulated", "--dialect",
                           self.DIALECT, "Dot", "--in", "a=[1, 1]", "--in", "b=[2, 3]",
                           env=clean_env(NAA_SPEC=spec))
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("result = [5]", out)
        # With the local side's address, as the reference library reads it.
        rc, out, err = run("call", "--idl", VECTOR, "--transport", "emulated", "--dialect",
                           self.DIALECT, "Add", "--in", "a=seq", "--in", "b=zeros", "--out",
                           "out=summary",
                           env=clean_env(NAA_SPEC=spec, NAA_LOCAL_IP="127.0.0.1"))
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("out = 1024 x f32: min 0, max 1023, sum 523776, first [0, 1, 2", out)


class CallExampleServerSpecTest(CallExampleServerBase, unittest.TestCase):
    DIALECT = "spec"


class CallExampleServerReferenceTest(CallExampleServerBase, unittest.TestCase):
    DIALECT = "reference"


class ExampleServerOptionsTest(unittest.TestCase):

    def test_help(self):
        p = subprocess.run([NAA_SERVER, "--help"], capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        self.assertEqual(p.returncode, 0, p.stderr)
        for service in ("VectorArith", "Matrix", "Accumulator", "CheckedMath", "Increment",
                        "StreamOps"):
            self.assertIn(service, p.stdout)
        # Spelled as `naarpc serve` spells it; the old spelling is hidden.
        self.assertIn("--max-regions", p.stdout)
        self.assertNotIn("--max_regions", p.stdout)

    def test_max_regions(self):
        # VectorArith.Dot registers 3 regions, IncrementBytes 1.
        for flag in ("--max-regions", "--max_regions"):
            with self.subTest(flag=flag):
                server = example_server(flag, "2")
                try:
                    target = "127.0.0.1:%d" % server.port
                    rc, out, err = run("call", "--idl", VECTOR, "--target", target,
                                       "--transport", "emulated", "Dot", "--in", "a=[1]",
                                       "--in", "b=[1]")
                    self.assertEqual(rc, EXIT_UNREACHABLE, err)
                    self.assertIn("MRSP error 0x03", err)
                    rc, out, err = run("call", "--idl", INCREMENT, "--target", target,
                                       "--transport", "emulated", "IncrementBytes", "--in",
                                       "data=zeros", "--out", "data=summary")
                    self.assertEqual(rc, EXIT_OK, err)
                finally:
                    self.assertEqual(server.stop(), 0, server.stderr)
                deprecation = "--max_regions is deprecated; use --max-regions"
                if flag == "--max_regions":
                    self.assertIn(deprecation, server.stderr)
                else:
                    self.assertNotIn(deprecation, server.stderr)


# ---- several targets: a channel over NAAs (docs/channel.md) ---------------------------------

class ChannelCallTest(unittest.TestCase):

    def setUp(self):
        self.servers = [example_server(), example_server()]

    def tearDown(self):
        for s in self.servers:
            s.stop()

    def targets(self):
        out = []
        for s in self.servers:
            out += ["--target", "127.0.0.1:%d" % s.port]
        return out

    def test_calls_spread_over_the_targets(self):
        rc, out, err = run("call", "--idl", VECTOR, *self.targets(), "--transport", "emulated",
                           "--repeat", "4", "Dot", "--in", "a=[1, 2]", "--in", "b=[3, 4]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("result = [11]", out)
        for s in self.servers:
            self.assertIn("NAA 127.0.0.1:%d: 2 call(s), 0 error(s)\n" % s.port, out)

    def test_naa_spec_entries_make_the_channel(self):
        spec = ",".join("127.0.0.1:%d:5:3" % s.port for s in self.servers)
        rc, out, err = run("call", "--idl", VECTOR, "--transport", "emulated", "--repeat", "2",
                           "--json", "Dot", "--in", "a=[1]", "--in", "b=[2]",
                           env=clean_env(NAA_SPEC=spec))
        self.assertEqual(rc, EXIT_OK, err)
        naas = json.loads(out)["naas"]
        self.assertEqual([n["calls"] for n in naas], [1, 1])

    def test_a_stopped_naa_is_ejected_and_idempotent_calls_go_on(self):
        self.servers[0].stop()
        # The stopped NAA refuses at once and the call moves: connect retries
        # (2 s) would spend the 1.5 s deadline and fail the first call.
        rc, out, err = run("call", "--idl", VECTOR, *self.targets(), "--transport", "emulated",
                           "--deadline", "1500", "--repeat", "3", "Dot", "--in", "a=[2]",
                           "--in", "b=[2]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("result = [4]", out)
        # Every call that met the stopped NAA failed there and went on. How
        # many did (1, or more if a slow machine let its 200 ms ejection end
        # and a call probe it again) and whether the ejection still lasts at
        # the end depend on timing; channel_test checks ejection on a fake clock.
        stopped = re.search(r"NAA 127\.0\.0\.1:%d: (\d+) call\(s\), (\d+) error\(s\)(, ejected)?\n"
                            % self.servers[0].port, out)
        self.assertIsNotNone(stopped, out)
        self.assertGreaterEqual(int(stopped.group(1)), 1, out)
        self.assertEqual(stopped.group(1), stopped.group(2), out)
        self.assertIn("NAA 127.0.0.1:%d: 3 call(s), 0 error(s)\n" % self.servers[1].port, out)

    def test_the_same_target_twice(self):
        t = "127.0.0.1:%d" % self.servers[0].port
        rc, _, err = run("call", "--idl", VECTOR, "--target", t, "--target", t, "Dot",
                         "--in", "a=[1]", "--in", "b=[1]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("--target '%s' is given twice" % t, err)

    def test_bench_spreads_clients_over_the_targets(self):
        rc, out, err = run("bench", "--idl", VECTOR, *self.targets(), "--transport", "emulated",
                           "--clients", "2", "--duration", "0.2", "--no-baseline", "Dot",
                           "--in", "a=[1]", "--in", "b=[1]")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("and on 127.0.0.1:%d (client c calls NAA c mod 2)"
                      % self.servers[1].port, out)


# ---- connection errors, NAA_SPEC, serve options -----------------------------------------------

class ErrorsTest(unittest.TestCase):

    def test_unreachable_target(self):
        port = free_port()
        rc, out, err = run("call", "--idl", VECTOR, "--target", "127.0.0.1:%d" % port,
                           "--transport", "emulated", "--deadline", "5000", "Dot", "--in",
                           "a=[1]", "--in", "b=[1]")
        self.assertEqual(rc, EXIT_UNREACHABLE, err)
        self.assertIn("hint: is an NAA (e.g. `naarpc serve`) listening on 127.0.0.1:%d over the "
                      "emulated transport? (--target, --transport)" % port, err)

    def test_unreachable_target_names_the_transport_auto_chose(self):
        # No --transport: the hint names "auto" and the backend it picked.
        port = free_port()
        target = "127.0.0.1:%d" % port
        for command in (["call", "--idl", VECTOR, "--target", target, "--deadline", "5000"],
                        ["bench", "--idl", VECTOR, "--target", target, "--deadline", "5000",
                         "--duration", "0.01", "--no-baseline"]):
            with self.subTest(command=command[0]):
                rc, out, err = run(*command, "Dot", "--in", "a=[1]", "--in", "b=[1]")
                self.assertEqual(rc, EXIT_UNREACHABLE, err)
                self.assertRegex(err, r"listening on %s over the auto \((emulated|verbs)\) "
                                      r"transport\? \(--target, --transport\)" % re.escape(target))

    def test_bad_target(self):
        for target, message in (("127.0.0.1:99999", "port '99999' is not a number in 1..65535"),
                                ("::1", "write IPv6 addresses in brackets"),
                                ("[::1", "missing ']'"),
                                (":5", "no host"),
                                ("127.0.0.1:", "port '' is not a number in 1..65535"),
                                ("[::1]:", "port '' is not a number in 1..65535")):
            rc, out, err = run("call", "--idl", VECTOR, "--target", target, "Dot", "--in",
                               "a=[1]", "--in", "b=[1]")
            self.assertEqual(rc, EXIT_USAGE, target)
            self.assertIn(message, err)

    def test_ipv6_targets(self):
        # Bracketed IPv6 in --target and in NAA_SPEC (nothing listens there).
        port = free_port()
        for args, env in ((["--target", "[::1]:%d" % port], clean_env()),
                          ([], clean_env(NAA_SPEC="[::1]:%d:5:3" % port))):
            rc, out, err = run("call", "--idl", VECTOR, "--transport", "emulated", *args, "Dot",
                               "--in", "a=[1]", "--in", "b=[1]", env=env)
            self.assertEqual(rc, EXIT_UNREACHABLE, err)
            self.assertIn("listening on [::1]:%d over the emulated transport" % port, err)

    @unittest.skipUnless(has_ipv6_loopback(), "this host has no IPv6 loopback (::1)")
    def test_ipv6_call_over_the_emulated_transport(self):
        server = Server([NAARPC, "serve", "--idl", TYPES, "--transport", "emulated",
                         "--address", "::1", "--port", "0", "--kernel", "increment"],
                        r"^naarpc serve: listening on \[::1\]:(\d+) ")
        try:
            rc, out, err = run("call", "--idl", TYPES, "--transport", "emulated", "--target",
                               "[::1]:%d" % server.port, "U16", "--in", "x=[1, 2, 65535]")
            self.assertEqual(rc, EXIT_OK, err)
            self.assertIn("y = [2, 3, 0]", out)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr)

    def test_no_target_no_naa_spec(self):
        rc, out, err = run("call", "--idl", VECTOR, "Dot", "--in", "a=[1]", "--in", "b=[1]")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("no --target, and NAA_SPEC is not set", err)

    def test_malformed_naa_spec(self):
        cases = [
            ("127.0.0.1:abc:5:3", "port"),
            ("127.0.0.1:1234:500:3", "function"),
            ("127.0.0.1:1234:5", ""),
            ("127.0.0.1:1234:5:3,", ""),
        ]
        for spec, field in cases:
            with self.subTest(spec=spec):
                rc, out, err = run("call", "--idl", VECTOR, "Dot", "--in", "a=[1]", "--in",
                                   "b=[1]", env=clean_env(NAA_SPEC=spec))
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertIn("NAA_SPEC", err)
                self.assertIn(field, err)

    def test_naa_spec_without_the_routine(self):
        rc, out, err = run("call", "--idl", VECTOR, "Dot", "--in", "a=[1]", "--in", "b=[1]",
                           env=clean_env(NAA_SPEC="127.0.0.1:1234:1:3"))
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("5", err)
        rc, out, err = run("call", "--idl", VECTOR, "Dot", "--in", "a=[1]", "--in", "b=[1]",
                           env=clean_env(NAA_SPEC="127.0.0.1:1234:5:2"))
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("declares 2 parameters, the IDL's Dot has 3", err)

    def test_bad_naa_local_ip(self):
        spec = "127.0.0.1:%d:5:3" % free_port()
        for local, message in (("203.0.113.7", "NAA_LOCAL_IP=203.0.113.7: not an address of "
                                               "this host"),
                               ("nohost", "NAA_LOCAL_IP=nohost: not an IPv4 or IPv6 address")):
            rc, out, err = run("call", "--idl", VECTOR, "--transport", "emulated", "Dot", "--in",
                               "a=[1]", "--in", "b=[1]",
                               env=clean_env(NAA_SPEC=spec, NAA_LOCAL_IP=local))
            self.assertEqual(rc, EXIT_USAGE, err)
            self.assertIn(message, err)

    def test_serve_bad_kernel(self):
        for kernel, message in (("frobnicate", "unknown kernel 'frobnicate'"),
                                ("fail:NOPE", "fail takes a status 0x01..0x7f or an error name"),
                                ("sleep:x", "sleep takes milliseconds"),
                                ("Nope=echo", "no routine 'Nope'")):
            rc, out, err = run("serve", "--idl", TYPES, "--transport", "emulated", "--port",
                               "0", "--kernel", kernel)
            self.assertEqual(rc, EXIT_USAGE, (kernel, err))
            self.assertIn(message, err)

    def test_serve_dialect_filter(self):
        server = naarpc_serve(TYPES, "--dialect", "spec")
        try:
            rc, out, err = run("call", "--idl", TYPES, "--target", "127.0.0.1:%d" % server.port,
                               "--transport", "emulated", "--dialect", "reference", "U8",
                               "--in", "x=zeros")
            self.assertEqual(rc, EXIT_NAA_STATUS, err)
            self.assertIn("0x04", err)
            rc, out, err = run("call", "--idl", TYPES, "--target", "127.0.0.1:%d" % server.port,
                               "--transport", "emulated", "--dialect", "spec", "U8",
                               "--in", "x=zeros")
            self.assertEqual(rc, EXIT_OK, err)
        finally:
            self.assertEqual(server.stop(), 0)
        self.assertIn("1 call(s) on 2 connection(s)", server.output)
        self.assertIn("refused: this NAA serves the spec dialect only", server.stderr)

    def test_serve_port_file(self):
        port_file = os.path.join(tempfile.mkdtemp(), "port")
        server = naarpc_serve(TYPES, "--port-file", port_file)
        try:
            with open(port_file) as f:  # written before the listening line
                self.assertEqual(int(f.read()), server.port)
        finally:
            self.assertEqual(server.stop(), 0)


# ---- bench ------------------------------------------------------------------------------------

# ---- stats ----------------------------------------------------------------------------------

class FakeMetrics:
    """An HTTP server answering GET /metrics with `status` and `body`."""

    def __init__(self, status, body):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class StatsTest(unittest.TestCase):

    def test_table_and_raw(self):
        server = naarpc_serve(TYPES, "--metrics-port", "0", "--metrics-address", "127.0.0.1")
        try:
            naa_port = str(server.port)
            # The metrics line follows in the same flush as the listening line.
            line = ""
            while "metrics on" not in line:
                line = server.proc.stdout.readline()
                self.assertTrue(line, "no metrics line")
            metrics_port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line).group(1))
            # No call yet: the families' # TYPE lines only, an empty table.
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % metrics_port)
            self.assertEqual(rc, EXIT_OK, err)
            self.assertRegex(out, r"^SIDE +ROUTINE +PEER +CALLS .*\n\(no calls yet\)\n$")
            rc, out, err = run("call", "--idl", TYPES, "--target", "127.0.0.1:" + naa_port,
                               "--transport", "emulated", "U8", "--in", "x=zeros")
            self.assertEqual(rc, EXIT_OK, err)
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % metrics_port)
            self.assertEqual(rc, EXIT_OK, err)
            self.assertRegex(out, r"^SIDE +ROUTINE +PEER +CALLS ")
            self.assertRegex(out, r"\nnaa +Types\.U8 +127\.0\.0\.1 +1 +0 +0 ")
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % metrics_port, "--raw")
            self.assertEqual(rc, EXIT_OK, err)
            self.assertIn("naarpc_calls_total{", out)
            # The NAA's own port is not the metrics endpoint.
            rc, out, err = run("stats", "--target", "127.0.0.1:" + naa_port)
            self.assertEqual(rc, EXIT_UNREACHABLE, err)
            self.assertIn("naarpc: http://127.0.0.1:%s/metrics: no HTTP response" % naa_port, err)
            self.assertIn("is this the metrics port (serve --metrics-port), not the NAA's?", err)
        finally:
            server.stop()

    def test_unreachable(self):
        port = free_port()
        rc, out, err = run("stats", "--target", "127.0.0.1:%d" % port)
        self.assertEqual(rc, EXIT_UNREACHABLE, err)
        self.assertEqual(err, "naarpc: http://127.0.0.1:%d/metrics: cannot connect: Connection "
                              "refused\n" % port)
        rc, out, err = run("stats", "--target", "nosuchhost.invalid:9464")
        self.assertEqual(rc, EXIT_UNREACHABLE, err)
        self.assertIn("naarpc: http://nosuchhost.invalid:9464/metrics: cannot resolve "
                      "'nosuchhost.invalid': ", err)
        rc, out, err = run("stats", "--target", "127.0.0.1")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("--target needs the metrics port (HOST:PORT)", err)

    def test_empty_port(self):
        # Not the NAA's default port: a metrics port has none.
        for target in ("127.0.0.1:", "[::1]:"):
            with self.subTest(target=target):
                rc, out, err = run("stats", "--target", target)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertEqual(err, "naarpc: --target '%s': port '' is not a number in "
                                      "1..65535\n" % target)

    def test_metrics_port_in_use(self):
        # Not shared with another endpoint (SO_REUSEPORT would let scrapes
        # alternate between the two).
        first = naarpc_serve(TYPES, "--metrics-port", "0", "--metrics-address", "127.0.0.1")
        try:
            line = ""
            while "metrics on" not in line:
                line = first.proc.stdout.readline()
                self.assertTrue(line, "no metrics line")
            port = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line).group(1)
            second = subprocess.Popen(
                [NAARPC, "serve", "--idl", TYPES, "--transport", "emulated", "--address",
                 "127.0.0.1", "--port", "0", "--metrics-port", port, "--metrics-address",
                 "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=clean_env())
            try:
                # Its listening line, or nothing once it has exited.
                ready, _, _ = select.select([second.stdout], [], [], HANG_GUARD_S)
                self.assertTrue(ready, "no output and no exit")
                self.assertEqual(second.stdout.readline(), "", "the second one listens")
                self.assertEqual(second.wait(timeout=HANG_GUARD_S), EXIT_UNREACHABLE)
                self.assertEqual(second.stderr.read(),
                                 "naarpc: UNAVAILABLE: metrics server: cannot listen on "
                                 "127.0.0.1:%s: Address already in use\n" % port)
            finally:
                if second.poll() is None:
                    second.kill()
                second.communicate()
        finally:
            first.stop()

    def test_not_a_metrics_endpoint(self):
        fake = FakeMetrics(404, b"no such page")
        try:
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % fake.port)
        finally:
            fake.stop()
        self.assertEqual(rc, EXIT_UNREACHABLE, err)
        self.assertIn("/metrics answered HTTP 404 (Not Found); is this the metrics port", err)
        fake = FakeMetrics(200, b"# a comment\nnot metrics at all\n")
        try:
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % fake.port)
        finally:
            fake.stop()
        self.assertEqual(rc, EXIT_FAILURE, err)
        self.assertIn("/metrics: not the Prometheus text format: metrics line 2: "
                      "'not metrics at all'", err)

    def test_no_naarpc_metrics(self):
        # Prometheus text, but not naarpc's: not an idle NAA's empty table.
        fake = FakeMetrics(200, b'# TYPE foo counter\nfoo 1\nbar{a="x"} 2\n')
        try:
            rc, out, err = run("stats", "--target", "127.0.0.1:%d" % fake.port)
        finally:
            fake.stop()
        self.assertEqual(rc, EXIT_FAILURE, err)
        self.assertEqual(out, "")
        self.assertEqual(err, "naarpc: no naarpc_ metrics at http://127.0.0.1:%d/metrics (is this "
                              "a naarpc metrics endpoint?)\n" % fake.port)

    def test_bad_answer_is_quoted_in_part(self):
        # A long line: its first 80 bytes; other bytes than printable ASCII
        # escaped.
        binary = b"\x1b[2J\x07\xff\x00 \\" + bytes(range(128, 256))  # 9 + 128 bytes
        binary_quoted = ("'\\x1b[2J\\x07\\xff\\x00 \\" +
                         "".join("\\x%02x" % b for b in range(128, 199)) + "...' (137 bytes)")
        for body, quoted in ((b"x" * 1000000, "'" + "x" * 80 + "...' (1000000 bytes)"),
                             (binary + b"\n1 2\n", binary_quoted)):
            fake = FakeMetrics(200, body)
            try:
                p = subprocess.run([NAARPC, "stats", "--target", "127.0.0.1:%d" % fake.port],
                                   capture_output=True, env=clean_env(), timeout=HANG_GUARD_S)
            finally:
                fake.stop()
            self.assertEqual(p.returncode, EXIT_FAILURE, p.stderr[:200])
            self.assertEqual(p.stderr.decode("ascii", "replace"),
                             "naarpc: http://127.0.0.1:%d/metrics: not the Prometheus text format: "
                             "metrics line 1: %s\n" % (fake.port, quoted))


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def plot_x_labels(script, xlabel):
    """Renders a `bench --plot` script (PREFIX_plots.gp) as text (gnuplot's dumb
    terminal); returns, for each plot whose x axis is `xlabel`, its x tic labels."""
    with open(script) as f:
        lines = f.read().splitlines()
    text = "\n".join("set terminal dumb size 160,40" if "set terminal" in l
                     else "set output" if l.startswith("set output ") else l for l in lines)
    p = subprocess.run(["gnuplot"], input=text, capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    # The tic labels are the row above the axis label (labels contain single spaces).
    return [re.split(r" {2,}", rows[i - 1].strip()) for i in range(1, len(rows))
            if rows[i].strip() == xlabel]


class BenchTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = naarpc_serve(TYPES)
        cls.tmp = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def bench(self, *args, dialect="spec"):
        return run("bench", "--idl", TYPES, "--target", "127.0.0.1:%d" % self.server.port,
                   "--transport", "emulated", "--dialect", dialect, "--duration", "0.05",
                   *args)

    def test_csv_and_plots(self):
        for dialect in ("spec", "reference"):
            with self.subTest(dialect=dialect):
                prefix = os.path.join(self.tmp, dialect)
                csv = prefix + ".csv"
                # 16K: gnuplot used to drop the label of a tic on the edge of its
                # autoscaled x range.
                rc, out, err = self.bench("Shapes.Var", "--sizes", "64,16K", "--clients", "1,2",
                                          "--csv", csv, "--plot", prefix, dialect=dialect)
                self.assertEqual(rc, EXIT_OK, err)
                self.assertNotIn("\x1b[K", err)  # no bar: stderr is not a terminal
                self.assertIn("raw baseline: emulated transport ping-pong", out)
                self.assertRegex(out, r"\n16K +2 \| ")
                with open(csv) as f:
                    lines = f.read().splitlines()
                header = lines[0].split(",")
                self.assertEqual(header, ["routine", "transport", "dialect", "kind", "size_bytes",
                                          "clients", "calls", "bytes_per_call", "p50_us",
                                          "p90_us", "p99_us", "max_us", "calls_per_s",
                                          "mb_per_s"])
                rows = [dict(zip(header, l.split(","))) for l in lines[1:]]
                self.assertEqual(
                    sorted((r["kind"], int(r["size_bytes"]), int(r["clients"])) for r in rows),
                    sorted((k, s, c) for k in ("naarpc", "raw") for s in (64, 16384)
                           for c in (1, 2)))
                for r in rows:
                    self.assertEqual(r["routine"], "Shapes.Var")
                    self.assertEqual(r["dialect"], dialect)
                    self.assertGreaterEqual(int(r["calls"]), 5 * int(r["clients"]))
                    p50, p90, p99, mx = (float(r[k]) for k in ("p50_us", "p90_us", "p99_us",
                                                               "max_us"))
                    self.assertTrue(0 < p50 <= p90 <= p99 <= mx, r)
                    self.assertGreater(float(r["calls_per_s"]), 0)
                naarpc_64 = [r for r in rows if r["kind"] == "naarpc" and r["size_bytes"] == "64"]
                # 8-byte length header + 64 bytes each way.
                self.assertEqual(naarpc_64[0]["bytes_per_call"], "144")
                for plot in ("latency", "throughput", "scaling"):
                    self.assertEqual(png_size("%s_%s.png" % (prefix, plot)), (960, 600), plot)
                # Every measured size and client count is labelled, edges included.
                script = prefix + "_plots.gp"
                self.assertEqual(plot_x_labels(script, "payload bytes per call"),
                                 [["64 B", "16 KiB"]] * 2)  # latency, throughput
                self.assertEqual(plot_x_labels(script, "clients"), [["1", "2"]])

    def test_memory_windows(self):
        rc, out, err = self.bench("Types.U8", "--no-baseline", "--memory-windows")
        self.assertEqual(rc, EXIT_OK, err)
        self.assertIn("(transport emulated, dialect spec, memory windows)", out)
        self.assertRegex(out, r"\n4 +1 \| +[1-9]")
        rc, out, err = self.bench("Types.U8", "--no-baseline", "--memory-windows",
                                  dialect="reference")
        self.assertEqual(rc, EXIT_USAGE, out)
        self.assertIn("--memory-windows needs --dialect spec", err)

    def test_plot_paths_and_missing_gnuplot(self):
        prefix = os.path.join(self.tmp, "it's plots")
        rc, out, err = self.bench("Types.U8", "--no-baseline", "--plot", prefix)
        self.assertEqual(rc, EXIT_OK, err)
        self.assertEqual(png_size(prefix + "_scaling.png"), (960, 600))
        env = clean_env(PATH="/nonexistent")
        rc, out, err = run("bench", "--idl", TYPES, "--target", "127.0.0.1:%d" % self.server.port,
                           "--transport", "emulated", "--duration", "0.01", "--no-baseline",
                           "Types.U8", "--plot", os.path.join(self.tmp, "x"), env=env)
        self.assertEqual(rc, EXIT_FAILURE, err)
        self.assertIn("--plot: cannot run gnuplot", err)
        self.assertIn("gnuplot-nox", err)

    def test_streams(self):
        server = naarpc_serve(STREAM)
        try:
            csv = os.path.join(self.tmp, "stream.csv")
            rc, out, err = run("bench", "--idl", STREAM, "--target",
                               "127.0.0.1:%d" % server.port, "--transport", "emulated",
                               "--duration", "0.05", "StreamOps.Transform", "--sizes", "64,256K",
                               "--csv", csv)
            self.assertEqual(rc, EXIT_OK, err)
            with open(csv) as f:
                rows = [l.split(",") for l in f.read().splitlines()[1:]]
            # u32 factor + the stream each way.
            self.assertEqual(sorted((r[3], r[4], r[7]) for r in rows),
                             [("naarpc", "262144", "524292"), ("naarpc", "64", "132"),
                              ("raw", "262144", "524296"), ("raw", "64", "136")])
        finally:
            server.stop()

    def test_size_zero_sends_empty_inputs(self):
        # 0 is a size like any other: empty variable-length inputs and streams.
        csv = os.path.join(self.tmp, "zero.csv")
        rc, out, err = self.bench("Shapes.Var", "--no-baseline", "--sizes", "0,64", "--csv", csv)
        self.assertEqual(rc, EXIT_OK, err)
        with open(csv) as f:
            rows = [l.split(",") for l in f.read().splitlines()[1:]]
        # Length headers only, each way; 64 bytes: 8 + 64 each way.
        self.assertEqual([(r[4], r[7]) for r in rows], [("0", "16"), ("64", "144")])
        server = naarpc_serve(STREAM)
        try:
            rc, out, err = run("bench", "--idl", STREAM, "--target",
                               "127.0.0.1:%d" % server.port, "--transport", "emulated",
                               "--duration", "0.05", "--no-baseline", "StreamOps.Checksum",
                               "--sizes", "0", "--csv", csv)
            self.assertEqual(rc, EXIT_OK, err)
            with open(csv) as f:
                rows = [l.split(",") for l in f.read().splitlines()[1:]]
            # No stream bytes; the 4 x u64 digest back.
            self.assertEqual([(r[4], r[7]) for r in rows], [("0", "32")])
        finally:
            server.stop()

    def test_sizes_not_whole_elements(self):
        # Refused before anything is measured (no NAA at this target).
        rc, out, err = run("bench", "--idl", VECTOR, "--target", "127.0.0.1:1", "--transport",
                           "emulated", "--no-baseline", "VectorArith.Prefix", "--sizes", "16,12")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("--sizes 12: not a multiple of Prefix's element size 8 bytes "
                      "(parameter 'x': i64)", err)
        self.assertEqual(out, "")
        rc, out, err = self.bench("Shapes.InPlace", "--sizes", "3")
        self.assertEqual(rc, EXIT_USAGE, err)
        self.assertIn("--sizes 3: not a multiple of InPlace's element size 4 bytes "
                      "(parameter 'v': i32)", err)

    def test_no_baseline_fixed_size(self):
        csv = os.path.join(self.tmp, "fixed.csv")
        rc, out, err = self.bench("Types.F64", "--no-baseline", "--csv", csv)
        self.assertEqual(rc, EXIT_OK, err)
        with open(csv) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertIn(",naarpc,24,1,", lines[1])

    def test_inputs_against_the_example_server(self):
        # Random i64 would be refused (NEGATIVE_INPUT): --in picks the values.
        server = example_server()
        try:
            csv = os.path.join(self.tmp, "isqrt.csv")
            rc, out, err = run("bench", "--idl", CHECKED, "--target",
                               "127.0.0.1:%d" % server.port, "--transport", "emulated",
                               "--duration", "0.05", "CheckedMath.Isqrt", "--in", "x=seq",
                               "--sizes", "64,1K", "--csv", csv)
            self.assertEqual(rc, EXIT_OK, err)
            with open(csv) as f:
                self.assertEqual(len(f.read().splitlines()), 5)
            rc, out, err = run("bench", "--idl", CHECKED, "--target",
                               "127.0.0.1:%d" % server.port, "--transport", "emulated",
                               "--duration", "0.05", "Isqrt", "--in", "x=[-1, 2]")
            self.assertEqual(rc, EXIT_NAA_STATUS, err)
            self.assertIn("NEGATIVE_INPUT", err)
        finally:
            server.stop()
        rc, out, err = self.bench("Shapes.Var", "--in", "data=[1, 2]", "--sizes", "64")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("with --sizes, a variable-length input takes a generator", err)
        rc, out, err = self.bench("Shapes.Var", "--in", "echo=zeros")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("write NAME=VALUE for an input of Shapes.Var", err)

    def test_bench_errors(self):
        rc, out, err = self.bench("Shapes.Var", "--sizes", "2M")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("--sizes 2M: parameter 'data' takes at most 1048576 x u8", err)
        rc, out, err = self.bench("Types.F64", "--sizes", "64")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("has no variable-length input", err)
        rc, out, err = self.bench("Shapes.Var", "--sizes", "12Q")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("unknown unit 'Q'", err)
        rc, out, err = self.bench("Shapes.Var", "--sizes", "64,99999999999G")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("'99999999999G' is more than 1 TiB", err)
        rc, out, err = self.bench("Shapes.Var", "--clients", "0")
        self.assertEqual(rc, EXIT_USAGE)
        self.assertIn("not a client count", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
