"""Tests of the Python module naarpc against real software NAAs over the
emulated transport: //examples:naa_server (the example services' generated
skeletons), `naarpc serve` and NAAs served from Python. Run by
//python:python_test (python/run_pytest.sh) from the runfiles root.

The snippets of docs/python.md run here too (test_doc_snippets):
`tests/docs/doctest.py extract docs/python.md ID` for the ids quickstart,
errors, serve, streams, serve-streams, stats, channel and memory-windows.
"""

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import naarpc

VECTOR = "services/vector/vector.naa.yaml"
CHECKED = "services/checked/checked.naa.yaml"
STREAM = "services/stream/stream.naa.yaml"
TYPES = "tests/cli/testdata/types.naa.yaml"
NAA_SERVER = "examples/naa_server"
NAARPC = "tools/naarpc/naarpc"


def vector_without_limit(directory):
    """VECTOR with a kernel time limit of ten minutes instead of 2 s, for
    tests whose kernels are held until the test ends them: on a loaded
    machine the 2 s limit could answer before the test's next step."""
    text = open(VECTOR).read()
    assert "timeout_ms: 2000\n" in text
    path = os.path.join(str(directory), "vector_without_limit.naa.yaml")
    with open(path, "w") as f:
        f.write(text.replace("timeout_ms: 2000\n", "timeout_ms: 600000\n"))
    return path


def start(argv, pattern):
    """Starts a server process; returns (process, port) once it prints its port."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            # Keep draining its output so it never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
    p.wait()
    raise RuntimeError(f"{argv[0]} exited {p.returncode}:\n{''.join(lines)}")


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture(scope="module")
def naa_port():
    p, port = start([NAA_SERVER, "--transport", "emulated", "--port", "0",
                     "--address", "127.0.0.1"], r"on 127\.0\.0\.1:(\d+)")
    yield port
    stop(p)


@pytest.fixture
def vector(naa_port):
    with naarpc.Client(VECTOR, f"127.0.0.1:{naa_port}", transport="emulated") as c:
        yield c


@pytest.fixture
def checked(naa_port):
    with naarpc.Client(CHECKED, f"127.0.0.1:{naa_port}", transport="emulated") as c:
        yield c


F32 = dict(dtype=np.float32)


# ---- IDL ----------------------------------------------------------------------

def test_describe_is_what_the_cli_prints():
    idl = naarpc.load_idl(VECTOR)
    cli = subprocess.run([NAARPC, "describe", VECTOR], capture_output=True, text=True, check=True)
    assert str(idl) == cli.stdout
    cli = subprocess.run([NAARPC, "describe", "--json", CHECKED, "CheckedMath.Isqrt"],
                         capture_output=True, text=True, check=True)
    assert naarpc.load_idl(CHECKED).describe("CheckedMath.Isqrt", json=True) == cli.stdout
    assert idl.services == ["VectorArith"]
    assert "Add" in idl.routines("VectorArith")
    add = idl.routine("VectorArith.Add")
    assert add["code"] == 1
    assert [(p["name"], p["type"], p["count"], p["direction"]) for p in add["params"]] == [
        ("a", "f32", 1024, "in"), ("b", "f32", 1024, "in"), ("out", "f32", 1024, "out")]


def test_idl_error_has_file_line_column(tmp_path):
    bad = tmp_path / "bad.naa.yaml"
    bad.write_text("package: p\nservices:\n  - name: S\n    routines:\n"
                   "      - name: R\n        code: 300\n        params: []\n")
    with pytest.raises(naarpc.IdlError) as e:
        naarpc.load_idl(str(bad))
    assert isinstance(e.value, ValueError)
    assert re.search(re.escape(str(bad)) + r":6:\d+: error: .*code", str(e.value)), str(e.value)
    assert e.value.diagnostics and e.value.diagnostics[0].startswith(f"{bad}:6:")
    with pytest.raises(naarpc.IdlError, match="no-such-file"):
        naarpc.load_idl(str(tmp_path / "no-such-file.naa.yaml"))


# ---- calls ----------------------------------------------------------------------

def test_add_by_name(vector):
    a = np.arange(1024, **F32)
    b = np.full(1024, 0.5, **F32)
    r = vector.VectorArith.Add(a=a, b=b)
    assert r.out.dtype == np.float32 and r.out.shape == (1024,)
    np.testing.assert_array_equal(r.out, a + b)
    assert r["out"] is r.out and list(r) == ["out"]
    np.testing.assert_array_equal(vector.call("VectorArith.Sub", a=a, b=b).out, a - b)


def test_variable_length_and_inout(vector):
    assert vector.VectorArith.Dot(a=[1, 2, 3], b=[4, 5, 6]).result.tolist() == [32.0]
    x = np.arange(10.0)
    scaled = vector.VectorArith.Scale(factor=3.0, x=x).x
    assert scaled.dtype == np.float64
    np.testing.assert_array_equal(scaled, 3.0 * x)
    np.testing.assert_array_equal(x, np.arange(10.0))  # the input is not touched
    sums = vector.VectorArith.Prefix(x=np.arange(1, 6, dtype=np.int64)).sums
    assert sums.tolist() == [1, 3, 6, 10, 15]
    empty = vector.VectorArith.Prefix(x=np.zeros(0, dtype=np.int64)).sums
    assert empty.dtype == np.int64 and empty.shape == (0,)


def test_every_element_type_round_trips():
    # `naarpc serve`'s echo kernel: y gets x's bytes back.
    p, port = start([NAARPC, "serve", "--idl", TYPES, "--transport", "emulated", "--port", "0",
                     "--address", "127.0.0.1"], r"listening on 127\.0\.0\.1:(\d+)")
    try:
        with naarpc.Client(TYPES, f"127.0.0.1:{port}", transport="emulated") as c:
            for name, dtype in [("U8", np.uint8), ("U16", np.uint16), ("U32", np.uint32),
                                ("U64", np.uint64), ("I8", np.int8), ("I16", np.int16),
                                ("I32", np.int32), ("I64", np.int64), ("F32", np.float32),
                                ("F64", np.float64)]:
                info = c.idl.routine(f"Types.{name}")
                n = info["params"][0]["count"]
                info_max = np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else 1.5
                x = np.array([info_max] + list(range(n - 1)), dtype=dtype)
                y = getattr(c.Types, name)(x=x).y
                assert y.dtype == dtype, name
                np.testing.assert_array_equal(y, x, err_msg=name)
    finally:
        stop(p)


def test_channel_leaves_a_refusing_naa_at_once(naa_port):
    # A port nothing listens on refuses. With a live NAA to go to, the
    # refusal ends that attempt at once: connect retries (2 s) would spend
    # the whole 1.5 s deadline and the call would fail without moving.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refusing = s.getsockname()[1]
    targets = [f"127.0.0.1:{refusing}", f"127.0.0.1:{naa_port}"]
    with naarpc.Client(VECTOR, targets, transport="emulated") as c:
        assert c.VectorArith.Dot(a=[4], b=[5], deadline=1.5).result.tolist() == [20.0]
        first, second = c.naa_counters()
        assert first["calls"] == 1 and first["failures"] == 1 and first["ejected"]
        assert second["calls"] == 1 and second["errors"] == 0


def test_stream_in_and_out(naa_port):
    with naarpc.Client(STREAM, f"127.0.0.1:{naa_port}", transport="emulated") as c:
        data = np.arange(300000, dtype=np.uint32)
        out = c.StreamOps.Transform(factor=3, data=data).out
        assert out.dtype == np.uint32
        np.testing.assert_array_equal(out, data * 3 + 1)


def test_reference_dialect(naa_port):
    with naarpc.Client(VECTOR, f"127.0.0.1:{naa_port}", transport="emulated",
                       dialect="reference") as c:
        assert c.VectorArith.Dot(a=[1, 1], b=[2, 3]).result.tolist() == [5.0]
    with pytest.raises(ValueError, match="dialect 'x'"):
        naarpc.Client(VECTOR, "127.0.0.1:1", transport="emulated", dialect="x")


def test_target_from_naa_spec(naa_port, monkeypatch):
    monkeypatch.setenv("NAA_SPEC", f"127.0.0.1:{naa_port}:5:3")
    with naarpc.Client(VECTOR, None, transport="emulated") as c:
        assert c.VectorArith.Dot(a=[2], b=[21]).result.tolist() == [42.0]
        with pytest.raises(naarpc.Error, match="function code 1"):
            c.VectorArith.Add(a=np.zeros(1024, **F32), b=np.zeros(1024, **F32))
    monkeypatch.setenv("NAA_SPEC", "127.0.0.1:x:5:3")
    with naarpc.Client(VECTOR, None, transport="emulated") as c:
        with pytest.raises(naarpc.InvalidArgument, match="port 'x'"):
            c.VectorArith.Dot(a=[2], b=[21])


# ---- several NAAs: a channel (docs/channel.md) ---------------------------------------

def test_channel_over_several_targets_with_counters(naa_port):
    p, port2 = start([NAA_SERVER, "--transport", "emulated", "--port", "0",
                      "--address", "127.0.0.1"], r"on 127\.0\.0\.1:(\d+)")
    try:
        targets = [f"127.0.0.1:{naa_port}", f"127.0.0.1:{port2}"]
        with naarpc.Client(VECTOR, targets, transport="emulated") as c:
            for i in range(6):
                assert c.VectorArith.Dot(a=[i], b=[2]).result.tolist() == [2.0 * i]
            counters = c.naa_counters()
            assert [n["naa"] for n in counters] == targets
            assert [n["calls"] for n in counters] == [3, 3]   # round robin
            assert all(n["errors"] == 0 and n["in_flight"] == 0 and not n["ejected"]
                       for n in counters)
            # One NAA killed: the idempotent Dot moves to the other, none is lost.
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            for i in range(6):
                assert c.VectorArith.Dot(a=[i], b=[3]).result.tolist() == [3.0 * i]
            dead = c.naa_counters()[1]
            assert dead["ejected"] and dead["failures"] >= 1
            assert c.naa_counters()[0]["errors"] == 0
        with pytest.raises(ValueError, match="given twice"):
            with naarpc.Client(VECTOR, [targets[0], targets[0]], transport="emulated") as c:
                c.VectorArith.Dot(a=[1], b=[1])
        with pytest.raises(TypeError, match="target must be"):
            naarpc.Client(VECTOR, [], transport="emulated")
    finally:
        stop(p)


def test_channel_from_every_naa_spec_entry(naa_port, monkeypatch):
    p, port2 = start([NAA_SERVER, "--transport", "emulated", "--port", "0",
                      "--address", "127.0.0.1"], r"on 127\.0\.0\.1:(\d+)")
    try:
        monkeypatch.setenv("NAA_SPEC", f"127.0.0.1:{naa_port}:5:3,127.0.0.1:{port2}:5:3")
        with naarpc.Client(VECTOR, None, transport="emulated") as c:
            for _ in range(4):
                assert c.VectorArith.Dot(a=[2], b=[21]).result.tolist() == [42.0]
            assert [n["calls"] for n in c.naa_counters()] == [2, 2]
    finally:
        stop(p)


# ---- errors -----------------------------------------------------------------------

def test_naa_error_by_idl_name(checked):
    with pytest.raises(naarpc.NaaError) as e:
        checked.CheckedMath.Isqrt(x=np.array([-1], dtype=np.int64))
    assert e.value.status_name == "NEGATIVE_INPUT"
    assert e.value.status_code == 0x13
    assert e.value.code == "NAA_ERROR"
    assert "NEGATIVE_INPUT" in str(e.value)
    with pytest.raises(naarpc.NaaError) as e:
        checked.CheckedMath.Divide(a=np.array([1, 2], np.int32), b=np.array([1, 0], np.int32))
    assert (e.value.status_name, e.value.status_code) == ("DIVISION_BY_ZERO", 0x11)
    assert e.value.status_doc == "some b[i] is 0"
    # The connection stays usable after an application error.
    assert checked.CheckedMath.Isqrt(x=np.array([16, 17], np.int64)).root.tolist() == [4, 4]


def test_wrong_dtype_shape_size(vector):
    ok = np.zeros(1024, **F32)
    with pytest.raises(TypeError, match=r"parameter 'a' needs dtype float32 \(f32\), got dtype "
                                        r"float64"):
        vector.VectorArith.Add(a=np.zeros(1024), b=ok)
    with pytest.raises(TypeError, match="'b' needs dtype float32"):
        vector.VectorArith.Add(a=ok, b=np.zeros(1024, dtype=">f4"))
    with pytest.raises(ValueError, match=r"parameter 'a' needs exactly 1024 elements \(f32\), "
                                         r"got 1000"):
        vector.VectorArith.Add(a=np.zeros(1000, **F32), b=ok)
    with pytest.raises(ValueError, match=r"'a' needs a 1-D array .*got shape \(32, 32\)"):
        vector.VectorArith.Add(a=np.zeros((32, 32), **F32), b=ok)
    with pytest.raises(ValueError, match="'a' needs at most 65536 elements"):
        vector.VectorArith.Dot(a=np.zeros(65537), b=np.zeros(1))
    with pytest.raises(ValueError, match="do not fit i64 exactly"):
        vector.VectorArith.Prefix(x=[1.5])
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        vector.VectorArith.Add(a=ok, b=ok, c=ok)
    with pytest.raises(TypeError, match="missing input 'b'"):
        vector.VectorArith.Add(a=ok)
    with pytest.raises(ValueError, match="'out' .*needs 1024 elements"):
        vector.VectorArith.Add(a=ok, b=ok, out=np.zeros(10, **F32))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(1024, **F32)
        ro.setflags(write=False)
        vector.VectorArith.Add(a=ok, b=ok, out=ro)
    with pytest.raises(AttributeError, match="no routine 'Nope'"):
        vector.VectorArith.Nope
    with pytest.raises(KeyError, match="no routine"):
        vector.call("VectorArith.Nope")
    with pytest.raises(ValueError, match="deadline"):
        vector.VectorArith.Add(a=ok, b=ok, deadline=-1)
    # Nothing was sent: the client still works.
    assert vector.VectorArith.Add(a=ok, b=ok).out.sum() == 0


def test_python_numbers_are_sent_exactly_or_refused(vector):
    # Each value is converted exactly or refused, naming it: no rounding to
    # the float types, no wrapping or truncation to the integer ones.
    for a, shown in [([2**53 + 1], "9007199254740993"), ([2**64 - 1], "18446744073709551615"),
                     ([0.5, 2**53 + 1], "9007199254740993"),  # a list numpy would make float64
                     ([np.int64(2**53 + 1)], "9007199254740993"), ([2**1100], "")]:
        with pytest.raises(ValueError, match=r"VectorArith.Dot: parameter 'a': the values do not "
                                             r"fit f64 exactly \(element \d+ is " + shown):
            vector.VectorArith.Dot(a=a, b=[0.0] * len(a))
    for x in ([2**24 + 1] * 1024, [2**60 + 1] * 1024, [0.1] * 1024):
        with pytest.raises(ValueError, match=r"parameter 'a': the values do not fit f32 exactly"):
            vector.VectorArith.Add(a=x, b=[0] * 1024)
    for x in ([2**63], [-2**63 - 1], [1.5], [float("nan")], [float("inf")], [1e30], [True, 2.5]):
        with pytest.raises(ValueError, match=r"parameter 'x': the values do not fit i64 exactly"):
            vector.VectorArith.Prefix(x=x)
    # What fits exactly is sent as it is.
    assert vector.VectorArith.Dot(a=[2**53, 2**70], b=[1, 0]).result.tolist() == [2.0**53]
    assert vector.VectorArith.Add(a=[2**24] * 1024, b=[2.0] * 1024).out[0] == 2**24 + 2
    assert vector.VectorArith.Prefix(x=[-2**63, 1.0]).sums.tolist() == [-2**63, -2**63 + 1]
    assert vector.VectorArith.Prefix(x=[2**62, 2.0, True]).sums.tolist() == [
        2**62, 2**62 + 2, 2**62 + 3]
    # NaN and the infinities are floats like any other.
    assert np.isnan(vector.VectorArith.Dot(a=[float("nan")], b=[1.0]).result[0])
    assert vector.VectorArith.Dot(a=[float("inf")], b=[1.0]).result[0] == float("inf")
    # Not numbers: TypeError naming the parameter (and the element).
    with pytest.raises(TypeError, match=r"^VectorArith.Dot: parameter 'a': None is not a number "
                                        r"or an array \(at most 65536 x f64\)$"):
        vector.VectorArith.Dot(a=None, b=[1.0])
    with pytest.raises(TypeError, match=r"parameter 'b': element 1 is None, not a number"):
        vector.VectorArith.Dot(a=[1.0, 2.0], b=[1.0, None])
    with pytest.raises(TypeError, match=r"parameter 'a': a str is not a number or an array"):
        vector.VectorArith.Dot(a="1.0", b=[1.0])
    with pytest.raises(ValueError, match=r"parameter 'a': nested lists of different lengths"):
        vector.VectorArith.Dot(a=[[1.0, 2.0], [3.0]], b=[1.0])


def test_inputs_are_taken_by_keyword_only(vector):
    message = r"^VectorArith.Dot{} takes its inputs by keyword: a, b \(and deadline=\)$"
    with pytest.raises(TypeError, match=message.format("")):
        vector.VectorArith.Dot(0.5, a=[1.0], b=[2.0])  # not a deadline
    with pytest.raises(TypeError, match=message.format("")):
        vector.VectorArith.Dot(np.ones(3), b=np.ones(3))
    with pytest.raises(TypeError, match=message.format("")):
        vector.call("VectorArith.Dot", [1.0], [2.0])
    with pytest.raises(TypeError, match=message.format(r"\.future\(\)")):
        vector.VectorArith.Dot.future([1.0], b=[2.0])  # at once, not from the future
    with pytest.raises(TypeError, match=message.format(r"\.stream\(\)")):
        vector.VectorArith.Dot.stream([1.0], b=[2.0])
    with pytest.raises(TypeError, match=r"deadline= takes seconds \(a number\) or None, got str"):
        vector.VectorArith.Dot(a=[1.0], b=[2.0], deadline="soon")
    with pytest.raises(TypeError, match=r"give the deadline once"):
        vector.VectorArith.Dot(a=[1.0], b=[2.0], deadline=5, naarpc_deadline=5)
    # naarpc_deadline= is the call's deadline for every routine.
    assert vector.VectorArith.Dot(a=[1.0], b=[2.0], naarpc_deadline=30).result.tolist() == [2.0]
    assert vector.VectorArith.Dot.future(a=[1.0], b=[3.0], deadline=30).result(
        timeout=60).result.tolist() == [3.0]


NAMES_IDL = """package: test.names
services:
  - name: Names
    timeout_ms: 600000
    routines:
      - name: R
        code: 1
        params:
          - {name: deadline, type: f64, size: 1, direction: in}
          - {name: self, type: f64, size: 1, direction: in}
          - {name: routine, type: f64, size: 1, direction: in}
          - {name: out, type: f64, size: 1, direction: out}
"""


def test_parameters_named_deadline_self_or_routine(tmp_path):
    path = tmp_path / "names.naa.yaml"
    path.write_text(NAMES_IDL)

    def r(call, deadline, self, routine, out):
        out[0] = deadline[0] * 100 + self[0] * 10 + routine[0]

    with naarpc.serve(str(path), {"R": r}, port=0, address="127.0.0.1", transport="emulated",
                      block=False) as server:
        with naarpc.Client(str(path), f"127.0.0.1:{server.port}", transport="emulated") as c:
            args = dict(deadline=1.0, self=2.0, routine=3.0)
            assert c.Names.R(**args).out.tolist() == [123.0]
            assert c.call("Names.R", **args, naarpc_deadline=30).out.tolist() == [123.0]
            assert c.Names.R.future(**args).result(timeout=60).out.tolist() == [123.0]
            # deadline= is the parameter here; the call's deadline is naarpc_deadline=.
            with pytest.raises(TypeError, match=r"Names.R\(\) missing input 'deadline'"):
                c.Names.R(self=2.0, routine=3.0, naarpc_deadline=30)
            with pytest.raises(ValueError, match=r"Names.R: deadline must be a number of seconds"):
                c.Names.R(**args, naarpc_deadline=-1)
            with pytest.raises(TypeError, match=r"^Names.R takes its inputs by keyword: deadline, "
                                                r"self, routine \(and naarpc_deadline=\)$"):
                c.Names.R(1.0)


def test_unreachable_and_bad_target():
    with naarpc.Client(VECTOR, "127.0.0.1:1", transport="emulated") as c:
        with pytest.raises(naarpc.Unavailable, match="127.0.0.1:1") as e:
            c.VectorArith.Dot(a=[1], b=[1])
        assert isinstance(e.value, ConnectionError)
    with pytest.raises(ValueError, match="port 'x'"):
        naarpc.Client(VECTOR, "127.0.0.1:x", transport="emulated")
    with pytest.raises(ValueError, match="transport 'rdma'"):
        naarpc.Client(VECTOR, "127.0.0.1:1", transport="rdma")


def test_deadline_exceeded_and_killed_naa(tmp_path):
    idl = vector_without_limit(tmp_path)  # Dot's sleep must outlast the kill
    p, port = start([NAARPC, "serve", "--idl", idl, "--transport", "emulated", "--port", "0",
                     "--address", "127.0.0.1", "--kernel", "Dot=sleep:60000"],
                    r"listening on 127\.0\.0\.1:(\d+)")
    try:
        with naarpc.Client(idl, f"127.0.0.1:{port}", transport="emulated") as c:
            with pytest.raises(naarpc.DeadlineExceeded) as e:
                c.VectorArith.Dot(a=[1], b=[1], deadline=0.3)
            assert isinstance(e.value, TimeoutError)
            # Another routine still works (a new connection; the echo kernel).
            x = np.ones(1024, **F32)
            assert c.VectorArith.Add(a=x, b=x).out[0] == 1
            # The NAA is killed while a call waits for its answer (or before
            # it reaches the NAA): either way the call fails cleanly.
            fut = c.VectorArith.Dot.future(a=[1], b=[1], deadline=60)
            os.killpg(p.pid, signal.SIGKILL)
            with pytest.raises(naarpc.Unavailable):
                fut.result(timeout=120)
            with pytest.raises(naarpc.Unavailable):
                c.VectorArith.Add(a=x, b=x)
    finally:
        stop(p)


# ---- zero copy ----------------------------------------------------------------------

def test_empty_out_array_gets_results_without_copy(vector):
    buf = vector.empty("VectorArith.Add", "out")
    assert buf.dtype == np.float32 and buf.shape == (1024,)
    a = np.arange(1024, **F32)
    r = vector.VectorArith.Add(a=a, b=a, out=buf, deadline=5)
    assert r.out is buf
    np.testing.assert_array_equal(buf, 2 * a)
    r = vector.VectorArith.Add(a=a, b=np.ones(1024, **F32), out=buf)
    assert r.out is buf and np.shares_memory(r.out, buf)
    np.testing.assert_array_equal(buf, a + 1)
    # Inputs from empty() of the same connection are sent from where they are.
    ina = vector.empty("VectorArith.Add", "a")
    ina[:] = 7
    r = vector.VectorArith.Add(a=ina, b=a, out=buf)
    np.testing.assert_array_equal(buf, a + 7)
    # Without out=, results are fresh arrays, not views of a session buffer.
    r1 = vector.VectorArith.Add(a=a, b=a)
    r2 = vector.VectorArith.Add(a=a, b=a)
    assert not np.shares_memory(r1.out, r2.out)
    # A plain array as out= gets the result copied into it.
    mine = np.zeros(1024, **F32)
    assert vector.VectorArith.Add(a=a, b=a, out=mine).out is mine
    np.testing.assert_array_equal(mine, 2 * a)


def test_empty_variable_length(vector):
    x = vector.empty("VectorArith.Scale", "x")
    assert x.shape == (65536,) and x.dtype == np.float64
    x[:4] = [1, 2, 3, 4]
    r = vector.VectorArith.Scale(factor=2.0, x=x[:4])
    assert r.x.tolist() == [2, 4, 6, 8]
    assert np.shares_memory(r.x, x)
    with pytest.raises(KeyError, match="no parameter 'y'"):
        vector.empty("VectorArith.Scale", "y")


def test_array_outlives_client(naa_port):
    c = naarpc.Client(VECTOR, f"127.0.0.1:{naa_port}", transport="emulated")
    buf = c.empty("VectorArith.Add", "out")
    c.VectorArith.Add(a=np.ones(1024, **F32), b=np.ones(1024, **F32), out=buf)
    c.close()
    del c
    assert buf.sum() == 2048  # still readable memory


def test_calls_never_write_into_empty_arrays_they_were_not_given(vector):
    a_buf = vector.empty("VectorArith.Add", "a")
    a_buf[:] = 7  # staged for a later call
    out_buf = vector.empty("VectorArith.Add", "out")  # the same connection's buffer for 'out'
    ones = np.ones(1024, **F32)
    r = vector.VectorArith.Add(a=np.full(1024, 3, **F32), b=ones, out=out_buf)
    assert r.out is out_buf and out_buf[0] == 4
    assert (a_buf == 7).all()  # its 'a' went elsewhere, not into a_buf
    r = vector.VectorArith.Add(a=a_buf, b=ones)  # out_buf not given: its results not in it
    assert r.out[0] == 8 and not np.shares_memory(r.out, out_buf) and out_buf[0] == 4
    # Given both, the call runs on their connection: in place, no copy.
    r = vector.VectorArith.Add(a=a_buf, b=ones, out=out_buf)
    assert r.out is out_buf and out_buf[0] == 8 and (a_buf == 7).all()
    # An inout from empty() gets its result in place either way.
    x = vector.empty("VectorArith.Scale", "x")
    y = vector.empty("VectorArith.Scale", "x")  # another connection's
    x[:2], y[:2] = [1, 2], [5, 6]
    assert vector.VectorArith.Scale(factor=2.0, x=y[:2]).x.tolist() == [10, 12]
    assert y[:2].tolist() == [10, 12] and x[:2].tolist() == [1, 2]


# ---- concurrency ----------------------------------------------------------------------

def test_future(vector):
    a = np.arange(1024, **F32)
    futs = [vector.VectorArith.Add.future(a=a, b=np.full(1024, i, **F32)) for i in range(16)]
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=60).out, a + i)
    with pytest.raises(naarpc.NaaError):
        vector.VectorArith.Dot.future(a=[1, 2], b=[1]).result(timeout=60)


def test_asyncio_many_in_flight(vector):
    async def main():
        calls = [vector.VectorArith.Dot.aio(a=np.arange(i + 1.0), b=np.ones(i + 1))
                 for i in range(40)]
        return await asyncio.gather(*calls)
    results = asyncio.run(main())
    assert [r.result[0] for r in results] == [i * (i + 1) / 2 for i in range(40)]


def test_threads(vector):
    errors = []

    def work(k):
        try:
            for i in range(20):
                x = np.full(1024, k * 100 + i, **F32)
                assert vector.VectorArith.Add(a=x, b=x).out[0] == 2 * (k * 100 + i)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- serving from Python ----------------------------------------------------------------

def test_serve_python_kernels_called_from_python_and_cli():
    idl = naarpc.load_idl(CHECKED)
    seen = []

    def isqrt(call, x, root):
        seen.append((call.routine, call.function_code, x.flags.writeable))
        if (x < 0).any():
            return "NEGATIVE_INPUT"
        root[:] = np.floor(np.sqrt(x))

    def divide(call, a, b, q):
        if len(a) != len(b):
            return 0x10
        if (b == 0).any():
            raise naarpc.NaaError("b has a zero", 0x11)
        np.floor_divide(a, b, out=q)

    with naarpc.serve(idl, {"Isqrt": isqrt, "CheckedMath.Divide": divide}, port=0,
                      address="127.0.0.1", transport="emulated", block=False) as server:
        assert "CheckedMath.Isqrt (code 41): python" in server.describe()
        target = f"127.0.0.1:{server.port}"
        with naarpc.Client(idl, target, transport="emulated") as c:
            assert c.CheckedMath.Isqrt(x=np.array([16, 17, 26], np.int64)).root.tolist() == \
                [4, 4, 5]
            assert seen[-1] == ("CheckedMath.Isqrt", 41, False)
            with pytest.raises(naarpc.NaaError) as e:
                c.CheckedMath.Isqrt(x=np.array([-4], np.int64))
            assert e.value.status_name == "NEGATIVE_INPUT"
            with pytest.raises(naarpc.NaaError) as e:
                c.CheckedMath.Divide(a=np.array([1], np.int32), b=np.array([0], np.int32))
            assert e.value.status_name == "DIVISION_BY_ZERO"
            with pytest.raises(naarpc.NaaError) as e:
                c.CheckedMath.Divide(a=np.array([1, 2], np.int32), b=np.array([1], np.int32))
            assert e.value.status_name == "LENGTH_MISMATCH"
            assert c.CheckedMath.Divide(a=np.array([7, -9], np.int32),
                                        b=np.array([2, 3], np.int32)).q.tolist() == [3, -3]
        # The C++ side: the naarpc CLI's client.
        cli = subprocess.run([NAARPC, "call", "--idl", CHECKED, "--target", target,
                              "--transport", "emulated", "Isqrt", "--in", "x=[81, 3]"],
                             capture_output=True, text=True)
        assert cli.returncode == 0, cli.stderr
        assert "root = [9, 1]" in cli.stdout
        cli = subprocess.run([NAARPC, "call", "--idl", CHECKED, "--target", target,
                              "--transport", "emulated", "Isqrt", "--in", "x=[-1]"],
                             capture_output=True, text=True)
        assert cli.returncode == 6 and "NEGATIVE_INPUT" in cli.stderr
        assert server.calls >= 7
    assert not server.running


def test_serve_variable_lengths_exceptions_and_builtin_kernels():
    idl = naarpc.load_idl(VECTOR)
    kept = []

    def prefix(call, x, sums):
        assert len(sums) == len(x)  # the first variable-length input's length
        np.cumsum(x, out=sums)
        call.set_length("sums", max(len(x) - 1, 0))
        kept.append(call)

    def dot(call, a, b, result):
        raise RuntimeError("kernel bug")

    with naarpc.serve(idl, {"Prefix": prefix, "Dot": dot, "Scale": "increment"}, port=0,
                      address="127.0.0.1", transport="emulated", block=False) as server:
        with naarpc.Client(idl, f"127.0.0.1:{server.port}", transport="emulated") as c:
            assert c.VectorArith.Prefix(x=np.array([1, 2, 3], np.int64)).sums.tolist() == [1, 3]
            with pytest.raises(naarpc.NaaError) as e:
                c.VectorArith.Dot(a=[1], b=[1])
            assert e.value.status_name == "KERNEL_FAILED" and e.value.status_code == 5
            assert c.VectorArith.Scale(factor=1.0, x=[1.0, 2.0]).x.tolist() == [2.0, 3.0]
            with pytest.raises(naarpc.NaaError) as e:  # no kernel given
                c.VectorArith.Sub(a=np.zeros(1024, **F32), b=np.zeros(1024, **F32))
            assert e.value.status_name == "UNKNOWN_FUNCTION"
    # A kernel's call object is unusable once the kernel returned.
    with pytest.raises(ValueError, match="has finished"):
        kept[0].set_length("sums", 1)


def test_stats_count_both_sides_of_each_call():
    def isqrt(call, x, root):
        if (x < 0).any():
            return "NEGATIVE_INPUT"
        root[:] = np.floor(np.sqrt(x))

    def naa_side(routine):
        return {e["peer"]: e for e in naarpc.stats()
                if e["side"] == "naa" and e["routine"] == routine}.get("127.0.0.1")

    before = naa_side("CheckedMath.Isqrt") or {"calls": 0, "errors": {}}
    with naarpc.serve(CHECKED, {"Isqrt": isqrt}, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as server:
        target = f"127.0.0.1:{server.port}"
        with naarpc.Client(CHECKED, target, transport="emulated") as c:
            for i in range(5):
                c.CheckedMath.Isqrt(x=np.array([i * i], np.int64))
            for _ in range(2):
                with pytest.raises(naarpc.NaaError):
                    c.CheckedMath.Isqrt(x=np.array([-1], np.int64))
        host = [e for e in naarpc.stats() if e["side"] == "host" and e["peer"] == target]
        assert len(host) == 1, host
        host = host[0]
        assert host["routine"] == "CheckedMath.Isqrt"
        assert host["calls"] == 7 and host["in_flight"] == 0
        # Errors by wire status (docs/operating.md): NEGATIVE_INPUT is 0x13.
        assert host["errors"] == {"NAA_0x13": 2}
        assert host["bytes_sent"] > 0 and host["bytes_received"] > 0
        assert 0 < host["latency_p50"] <= host["latency_max"]
        naa = naa_side("CheckedMath.Isqrt")
        assert naa["calls"] - before["calls"] == 7
        assert naa["errors"].get("NAA_0x13", 0) - before["errors"].get("NAA_0x13", 0) == 2
        text = naarpc.metrics_text()
        assert (f'naarpc_calls_total{{side="host",routine="CheckedMath.Isqrt",peer="{target}"}} 7'
                in text), text


def test_stats_count_calls_that_cannot_connect():
    # A port bound but not listening: connections to it are refused.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{held.getsockname()[1]}"
        with naarpc.Client(CHECKED, target, transport="emulated") as c:
            for _ in range(2):
                with pytest.raises(naarpc.Unavailable):
                    c.CheckedMath.Isqrt(x=np.array([4], np.int64))
    host = [e for e in naarpc.stats() if e["side"] == "host" and e["peer"] == target]
    assert len(host) == 1, host
    assert host[0]["calls"] == 2 and host[0]["in_flight"] == 0
    assert host[0]["errors"] == {"UNAVAILABLE": 2}
    assert host[0]["bytes_sent"] == 0 and host[0]["bytes_received"] == 0


def test_kernel_returns_other_than_a_status_fail_the_call(capfd):
    def generator(call, x, root):
        root[:] = 1
        yield

    def raises_numpy_status(call, x, root):
        raise naarpc.NaaError("negative", np.int64(0x13))

    # (what the kernel does, status name or None for success, what the log says)
    cases = [
        (lambda call, x, root: np.int64(0x13), "NEGATIVE_INPUT", None),
        (lambda call, x, root: np.uint8(0), None, None),
        (lambda call, x, root: np.abs(x, out=root), None, None),  # returns its output array
        (lambda call, x, root: root[:1], None, None),  # a view of it
        (raises_numpy_status, "NEGATIVE_INPUT", None),
        (lambda call, x, root: 19.0, "KERNEL_FAILED", "the kernel returned a float (19.0)"),
        (lambda call, x, root: (0x13,), "KERNEL_FAILED", "the kernel returned a tuple ((19,))"),
        (lambda call, x, root: True, "KERNEL_FAILED", "the kernel returned a bool (True)"),
        (lambda call, x, root: x, "KERNEL_FAILED", "the kernel returned a ndarray"),  # an input
        (lambda call, x, root: 0x80, "KERNEL_FAILED", "the kernel returned status 128, not "
                                                      "0..0x7f"),
        (generator, "KERNEL_FAILED", "the kernel returned a generator object: its body never "
                                     "ran"),
    ]
    kernel = []
    with naarpc.serve(CHECKED, {"Isqrt": lambda call, x, root: kernel[-1](call, x, root)},
                      port=0, address="127.0.0.1", transport="emulated", block=False) as server:
        with naarpc.Client(CHECKED, f"127.0.0.1:{server.port}", transport="emulated") as c:
            for fn, status, logged in cases:
                kernel.append(fn)
                capfd.readouterr()
                if status is None:  # success
                    assert len(c.CheckedMath.Isqrt(x=[4, 9]).root) == 2
                    continue
                with pytest.raises(naarpc.NaaError) as e:
                    c.CheckedMath.Isqrt(x=[4, 9])
                assert e.value.status_name == status
                if logged:  # the NAA logged why before it answered
                    assert f"CheckedMath.Isqrt: {logged}" in capfd.readouterr().err


def test_bytes_are_u8_elements():
    with naarpc.serve(TYPES, {"Bytes": "echo", "U8": "echo", "U16": "echo", "Var": "echo"},
                      port=0, address="127.0.0.1", transport="emulated", block=False) as server:
        with naarpc.Client(TYPES, f"127.0.0.1:{server.port}", transport="emulated") as c:
            assert c.Types.Bytes(x=b"abcdefgh").y.tobytes() == b"abcdefgh"  # IDL type bytes
            assert c.Types.U8(x=bytearray(b"\1\2\3\4")).y.tolist() == [1, 2, 3, 4]
            assert c.Shapes.Var(data=memoryview(b"xyz")).echo.tobytes() == b"xyz"
            out = bytearray(4)  # a writable bytes-like takes an output
            assert c.Types.U8(x=b"wxyz", y=out).y.dtype == np.uint8 and out == b"wxyz"
            with pytest.raises(TypeError, match=r"Types.U16: parameter 'x' needs dtype uint16 "
                                                r"\(u16\), got bytes of dtype uint8"):
                c.Types.U16(x=b"abcdef")
            with pytest.raises(ValueError, match=r"parameter 'x' needs exactly 8 elements"):
                c.Types.Bytes(x=b"abc")
            with pytest.raises(ValueError, match=r"parameter 'y' is an output, but the array is "
                                                 r"read-only"):
                c.Types.U8(x=b"wxyz", y=b"1234")


def vector_with_limit(directory, ms):
    """VECTOR with a kernel time limit of `ms` milliseconds."""
    text = open(VECTOR).read()
    path = os.path.join(str(directory), f"vector_{ms}ms.naa.yaml")
    with open(path, "w") as f:
        f.write(text.replace("timeout_ms: 2000\n", f"timeout_ms: {ms}\n"))
    return path


STUCK_KERNEL_CHILD = r"""
import gc
import sys
import threading
import numpy as np
import naarpc

held, release, returned = threading.Event(), threading.Event(), threading.Event()

def dot(call, a, b, result):  # stuck, far past its time limit, until released
    held.set()
    release.wait(600)
    result[0] = 1
    returned.set()

server = naarpc.serve(sys.argv[1], {"Dot": dot}, port=0, address="127.0.0.1",
                      transport="emulated", block=False, shutdown_grace=0.05)
with naarpc.Client(sys.argv[1], f"127.0.0.1:{server.port}", transport="emulated") as c:
    try:
        c.VectorArith.Dot(a=[1.0], b=[1.0], deadline=600)
    except naarpc.NaaError as e:
        print("call:", e.status_name, flush=True)
server.stop()  # returns after the grace, the kernel still running
print("stopped:", server.running, held.is_set(), not returned.is_set(), flush=True)
del server
gc.collect()
junk = [bytearray(64) for _ in range(100_000)]  # reuse what a freed server held
release.set()  # the kernel returns into what the stopped server kept for it
print("kernel returned:", returned.wait(600), flush=True)
"""


def test_stop_returns_after_the_shutdown_grace_with_a_stuck_kernel(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(STUCK_KERNEL_CHILD)
    idl = vector_with_limit(tmp_path, 100)
    child = subprocess.run([sys.executable, str(script), idl], capture_output=True, text=True,
                           timeout=300)  # a hang guard only
    assert child.returncode == 0, child.stdout + child.stderr
    assert "call: KERNEL_TIMEOUT" in child.stdout, child.stdout
    assert "stopped: False True True" in child.stdout, child.stdout + child.stderr
    assert "kernel returned: True" in child.stdout, child.stdout
    assert ("naarpc serve: stopped with the kernel of VectorArith.Dot still running (past its "
            "time limit and the shutdown grace of 0.05 s)") in child.stderr, child.stderr
    with pytest.raises(ValueError, match=r"shutdown_grace takes seconds 0\.\.86400, got -1"):
        naarpc.serve(VECTOR, {}, port=0, transport="emulated", block=False, shutdown_grace=-1)
    with pytest.raises(TypeError, match=r"shutdown_grace takes seconds"):
        naarpc.serve(VECTOR, {}, port=0, transport="emulated", block=False, shutdown_grace="1")


def test_serve_refuses_bad_kernels():
    idl = naarpc.load_idl(VECTOR)
    with pytest.raises(KeyError, match="no routine 'Nope'"):
        naarpc.serve(idl, {"Nope": lambda call: None}, port=0, transport="emulated", block=False)
    with pytest.raises(TypeError, match="must be a function"):
        naarpc.serve(idl, {"Add": 3}, port=0, transport="emulated", block=False)
    with pytest.raises(ValueError, match="unknown kernel 'frobnicate'"):
        naarpc.serve(idl, {"Add": "frobnicate"}, port=0, transport="emulated", block=False)


# ---- the snippets of docs/python.md ---------------------------------------------------

def doc_block(ident):
    text = subprocess.run([sys.executable, "tests/docs/doctest.py", "extract", "docs/python.md",
                           ident], capture_output=True, text=True, check=True).stdout
    return text


@pytest.mark.parametrize("ident", ["quickstart", "errors", "serve", "streams",
                                   "serve-streams", "stats", "channel", "memory-windows"])
def test_doc_snippets(ident, naa_port, capsys):
    code = doc_block(ident).replace("127.0.0.1:12345", f"127.0.0.1:{naa_port}")
    code = code.replace("localhost:12345", f"localhost:{naa_port}")
    exec(compile(code, f"docs/python.md#{ident}", "exec"), {"__name__": "__doc__"})
    out = capsys.readouterr().out
    expected = {"quickstart": "[32.]", "errors": "NEGATIVE_INPUT 0x13", "serve": "[11.]",
                "streams": "4000000\nTrue", "serve-streams": "[1 3 5 7 9]",
                "stats": " True\nTrue", "channel": "[20.]\n2 2",
                "memory-windows": "True\n[14.]"}[ident]
    assert expected in out
