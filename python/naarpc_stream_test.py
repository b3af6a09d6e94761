"""Streams from Python (docs/python.md, "Streams"): input streams from numpy
arrays, iterables and generators of chunks, and binary files; output streams
as iterators of chunks (c.S.R.stream(...)); Python kernels serving stream
routines; a Python-served NAA called from the generated C++ stubs. Against
//examples:naa_server (the generated skeletons of services/stream) and NAAs
served from Python, over the emulated transport. Run by
//python:python_stream_test.
"""

import gc
import io
import os
import signal
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import naarpc
# naa_port: the example NAA, one per module (naarpc_test's fixture).
from naarpc_test import STREAM, VECTOR, naa_port, vector_without_limit  # noqa: F401

STUB_CLIENT = "python/stub_client"


@pytest.fixture
def sc(naa_port):
    with naarpc.Client(STREAM, f"127.0.0.1:{naa_port}", transport="emulated") as c:
        yield c


def digest_of(data):
    """What StreamOps.Checksum answers, less the chunk count."""
    data = np.asarray(data, dtype=np.uint8)
    h = 0xcbf29ce484222325
    for b in data.tobytes():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return [int(data.sum(dtype=np.uint64)), len(data), h]


def pattern(n):
    return (np.arange(n, dtype=np.uint64) * 7 % 256).astype(np.uint8)


# ---- input streams ---------------------------------------------------------------

def test_input_stream_from_a_generator_of_uneven_chunks(sc):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 200_000, dtype=np.uint8)
    cuts = [0, 1, 7, 65536, 65537, 100_000, 131_072, 199_999, 200_000]

    def chunks():
        for a, b in zip(cuts, cuts[1:]):
            yield data[a:b]

    d = sc.StreamOps.Checksum(data=chunks()).digest
    assert [int(d[0]), int(d[1]), int(d[3])] == digest_of(data)
    assert int(d[2]) == 4  # 200000 bytes in 65536-byte chunks: cut by the stream, not by Python
    # The same bytes as one array, as a list of arrays, as bytes.
    for given in (data, [data[:5], data[5:]], data.tobytes()):
        assert sc.StreamOps.Checksum(data=given).digest.tolist() == d.tolist()


def test_input_generator_is_read_lazily_one_item_at_a_time(sc):
    # Each item is released before the one after the next is asked for: the
    # stream never holds more than the current item (plus the NAA's ring).
    held = []
    items = 60

    def chunks():
        for i in range(items):
            for ref in held[:-2]:
                assert ref() is None, "an earlier chunk is still referenced"
            a = np.full(50_000, i % 256, dtype=np.uint8)
            held.append(weakref.ref(a))
            yield a
            del a
            gc.collect()

    d = sc.StreamOps.Checksum(data=chunks()).digest
    assert int(d[1]) == items * 50_000
    assert int(d[0]) == sum((i % 256) * 50_000 for i in range(items))


def test_input_stream_from_files(sc, tmp_path):
    data = pattern(150_001)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    want = digest_of(data)
    with open(path, "rb") as f:
        d = sc.StreamOps.Checksum(data=f).digest
    assert [int(d[0]), int(d[1]), int(d[3])] == want
    with open(path, "rb", buffering=0) as f:  # a raw FileIO
        assert [int(x) for x in sc.StreamOps.Checksum(data=f).digest[[0, 1, 3]]] == want
    assert int(sc.StreamOps.Checksum(data=io.BytesIO(b"")).digest[1]) == 0
    # u32 elements from a file.
    words = np.arange(10_000, dtype=np.uint32)
    out = sc.StreamOps.Transform(factor=2, data=io.BytesIO(words.tobytes())).out
    np.testing.assert_array_equal(out, words * 2 + 1)


def test_bad_stream_inputs_raise_naming_the_parameter(sc):
    with pytest.raises(TypeError, match=r"stream 'data' takes a numpy array, an iterable"):
        sc.StreamOps.Checksum(data=5)
    with pytest.raises(TypeError, match=r"got str"):
        sc.StreamOps.Checksum(data="abc")
    with pytest.raises(TypeError, match=r"parameter 'data' needs dtype uint32.*got dtype float64"):
        sc.StreamOps.Transform(factor=1, data=np.zeros(4))

    def mixed():
        yield np.arange(3, dtype=np.uint32)
        yield np.arange(3, dtype=np.float64)

    with pytest.raises(TypeError) as e:
        sc.StreamOps.Transform(factor=1, data=mixed())
    msg = str(e.value)
    assert "StreamOps.Transform: parameter 'data' (item 2 of the stream)" in msg
    assert "uint32" in msg and "float64" in msg

    def two_d():
        yield np.zeros((2, 2), dtype=np.uint32)

    with pytest.raises(ValueError, match=r"'data' \(item 1 of the stream\) needs a 1-D array"):
        sc.StreamOps.Transform(factor=1, data=two_d())
    with pytest.raises(ValueError, match=r"the file ends inside an u32 element \(2 of 4 bytes\)"):
        sc.StreamOps.Transform(factor=1, data=io.BytesIO(b"\0" * 10))
    # The client still calls after failed streams.
    assert sc.StreamOps.Transform(factor=1, data=np.array([1], np.uint32)).out.tolist() == [2]


def test_bytes_stream_items(sc):
    want = list(b"abcdef")
    for items in (iter([b"abc", bytearray(b"de"), memoryview(b"f")]), [b"abc", b"def"]):
        d = sc.StreamOps.Checksum(data=items).digest
        assert [int(d[0]), int(d[1])] == [sum(want), len(want)]
    with pytest.raises(TypeError, match=r"StreamOps.Transform: parameter 'data' \(item 1 of the "
                                        r"stream\) needs dtype uint32 \(u32\), got bytes"):
        sc.StreamOps.Transform(factor=1, data=iter([b"abcd"]))


def test_bad_stream_sources_raise_naming_the_parameter(sc, tmp_path):
    class Returns:
        """A file whose readinto() returns `value`."""

        def __init__(self, value):
            self.value = value

        def readinto(self, b):
            return self.value

    what = r"StreamOps.Checksum: stream 'data': the file's readinto\(\) must return the number " \
           r"of bytes it read, 0\.\.\d+; got "
    with pytest.raises(ValueError, match=what + "-1$"):
        sc.StreamOps.Checksum(data=Returns(-1))
    with pytest.raises(ValueError, match=what + "100000000$"):
        sc.StreamOps.Checksum(data=Returns(10**8))
    with pytest.raises(TypeError, match=what + "a str, not an int$"):
        sc.StreamOps.Checksum(data=Returns("abc"))
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)))
    with open(path, "r", encoding="latin-1") as f:
        with pytest.raises(TypeError, match=r"StreamOps.Checksum: stream 'data' got a text-mode "
                                            r"file \(TextIOWrapper\); open the file in binary "
                                            r"mode \('rb'\)"):
            sc.StreamOps.Checksum(data=f)
    with pytest.raises(TypeError, match=r"parameter 'data' \(item 1 of the stream\) is a str"):
        sc.StreamOps.Checksum(data=iter(["abc"]))
    with pytest.raises(ValueError, match=r"StreamOps.Transform: parameter 'data': nested lists of "
                                         r"different lengths"):
        sc.StreamOps.Transform(factor=1, data=[[1, 2], [3]])
    # The client still calls after them.
    assert int(sc.StreamOps.Checksum(data=b"ab").digest[1]) == 2


def test_a_generator_that_raises_fails_the_call_with_its_exception(sc):
    class Boom(Exception):
        pass

    def chunks():
        yield np.zeros(100_000, dtype=np.uint8)
        raise Boom("disk gone")

    with pytest.raises(Boom, match="disk gone"):
        sc.StreamOps.Checksum(data=chunks())
    assert int(sc.StreamOps.Checksum(data=np.ones(3, np.uint8)).digest[1]) == 3


def test_stream_limit_error_by_name(sc):
    with pytest.raises(naarpc.NaaError) as e:
        sc.StreamOps.Histogram(limit=1000, data=(np.zeros(1 << 20, np.uint8) for _ in range(3)))
    assert e.value.status_name == "LIMIT_EXCEEDED" and e.value.status_code == 0x10
    counts = sc.StreamOps.Histogram(limit=0, data=iter([pattern(1000)])).counts
    assert counts.sum() == 1000 and counts[0] == np.count_nonzero(pattern(1000) == 0)


# ---- output streams as iterators ----------------------------------------------------

def test_output_stream_is_an_iterator_of_chunks(sc):
    n = 1_000_003
    with sc.StreamOps.Generate.stream(count=n) as call:
        assert call.streams == ["data"]
        chunks = []
        for chunk in call:  # the routine's one output stream
            assert chunk.dtype == np.uint8 and 0 < len(chunk) <= 65536
            chunks.append(chunk)
        r = call.result()
    assert len(r) == 0
    assert len(chunks) == (n + 65535) // 65536
    np.testing.assert_array_equal(np.concatenate(chunks), pattern(n))
    # The plain call collects the same stream into one array.
    np.testing.assert_array_equal(sc.StreamOps.Generate(count=n).data, pattern(n))


def test_stream_in_and_iterate_out_at_once(sc):
    total = 300_000

    def words():
        for start in range(0, total, 7000):
            yield np.arange(start, min(start + 7000, total), dtype=np.uint32)

    got = 0
    call = sc.StreamOps.Transform.stream(factor=5, data=words())
    for chunk in call.out:
        np.testing.assert_array_equal(chunk, np.arange(got, got + len(chunk), dtype=np.uint32)
                                      * 5 + 1)
        got += len(chunk)
    assert got == total
    assert len(call.result()) == 0 and call.done


def test_streaming_call_result_and_errors(sc):
    call = sc.StreamOps.Histogram.stream(limit=0, data=[pattern(5000)])
    assert call.streams == []
    with pytest.raises(TypeError, match="0 output streams"):
        iter(call)
    with pytest.raises(AttributeError, match="no output stream 'counts'"):
        call.counts
    assert call.result().counts.sum() == 5000
    with pytest.raises(naarpc.NaaError) as e:
        sc.StreamOps.Histogram.stream(limit=10, data=[pattern(5000)]).result()
    assert e.value.status_name == "LIMIT_EXCEEDED"
    with pytest.raises(TypeError, match=r"'data' is an output"):
        sc.StreamOps.Generate.stream(count=1, data=np.zeros(1, np.uint8))
    with pytest.raises(TypeError, match="missing input 'count'"):
        sc.StreamOps.Generate.stream()


def test_leaving_a_stream_early_cancels_it(sc):
    with sc.StreamOps.Generate.stream(count=50 << 20) as call:
        first = next(iter(call))
        assert len(first) == 65536
    # Cancelled: the rest of the 50 MiB is not read, the call failed.
    with pytest.raises(naarpc.Error):
        call.result()
    # An endless input stream stops at cancel().
    def endless():
        while True:
            yield np.zeros(1 << 20, np.uint8)

    call = sc.StreamOps.Checksum.stream(data=endless())
    call.cancel()
    with pytest.raises(naarpc.Error):
        call.result()
    # result() without reading drains the stream.
    assert len(sc.StreamOps.Generate.stream(count=200_000).result()) == 0
    np.testing.assert_array_equal(sc.StreamOps.Generate(count=10).data, pattern(10))


def test_cancel_is_cancelled_and_a_failed_call_raises_from_iteration(sc, naa_port):
    def host_errors():
        for e in naarpc.stats():
            if (e["side"], e["routine"], e["peer"]) == ("host", "StreamOps.Generate",
                                                        f"127.0.0.1:{naa_port}"):
                return e["errors"]
        return {}

    before = host_errors()
    call = sc.StreamOps.Generate.stream(count=10_000_000)
    next(iter(call))
    call.cancel()
    with pytest.raises(naarpc.Error) as e:
        call.result()
    assert e.value.code == "CANCELLED", str(e.value)
    # The failed call's error again, from the iteration and from result().
    for again in (lambda: next(iter(call)), lambda: list(call.data), call.result):
        with pytest.raises(naarpc.Error) as e:
            again()
        assert e.value.code == "CANCELLED"
    after = host_errors()
    assert after.get("CANCELLED", 0) == before.get("CANCELLED", 0) + 1, after
    assert after.get("FAILED_PRECONDITION", 0) == before.get("FAILED_PRECONDITION", 0), after


# ---- Python kernels with streams --------------------------------------------------------

def checksum(call, data, digest):
    total = count = chunks = 0
    for chunk in data:  # read-only views in the NAA's ring
        assert not chunk.flags.writeable and len(chunk) <= data.chunk_size
        total += int(chunk.sum(dtype=np.uint64))
        count += len(chunk)
        chunks += 1
    digest[:] = [total, count, chunks, 0]  # (no FNV hash: a Python loop per byte)


def transform(call, factor, data, out):
    for chunk in data:
        out.write(chunk * np.uint32(factor[0]) + np.uint32(1))
    out.close()


def generate(call, count, data):
    n, i = int(count[0]), 0
    while True:
        slot = data.slot()  # a writable view of the host's next slot
        k = min(len(slot), n - i)
        slot[:k] = (np.arange(i, i + k, dtype=np.uint64) * 7 % 256).astype(np.uint8)
        data.commit(k)
        i += k
        if k < len(slot):
            return


def histogram(call, limit, data, counts):
    seen = 0
    for chunk in data:
        seen += len(chunk)
        if limit[0] and seen > limit[0]:
            return "LIMIT_EXCEEDED"
        counts += np.bincount(chunk, minlength=256).astype(np.uint64)


STREAM_KERNELS = {"Checksum": checksum, "Transform": transform, "Generate": generate,
                  "Histogram": histogram}


@pytest.fixture(scope="module")
def py_stream_server():
    with naarpc.serve(STREAM, STREAM_KERNELS, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as server:
        yield server


def test_python_kernels_serve_streams(py_stream_server):
    with naarpc.Client(STREAM, f"127.0.0.1:{py_stream_server.port}",
                       transport="emulated") as c:
        data = pattern(200_000)
        d = c.StreamOps.Checksum(data=(data[i:i + 30_000] for i in range(0, 200_000, 30_000)))
        assert d.digest[:3].tolist() == [int(data.sum()), 200_000, 4]
        words = np.arange(100_000, dtype=np.uint32)
        np.testing.assert_array_equal(c.StreamOps.Transform(factor=3, data=words).out,
                                      words * 3 + 1)
        got = np.concatenate(list(c.StreamOps.Generate.stream(count=300_000)))
        np.testing.assert_array_equal(got, pattern(300_000))
        assert len(c.StreamOps.Generate(count=0).data) == 0
        with pytest.raises(naarpc.NaaError) as e:
            c.StreamOps.Histogram(limit=10, data=pattern(5000))
        assert e.value.status_name == "LIMIT_EXCEEDED"
        assert c.StreamOps.Histogram(limit=0, data=pattern(5000)).counts.sum() == 5000


def test_stats_count_the_streamed_bytes(py_stream_server):
    target = f"127.0.0.1:{py_stream_server.port}"

    def side(which):
        got = [e for e in naarpc.stats() if e["side"] == which and
               e["routine"] == "StreamOps.Transform" and
               e["peer"] == (target if which == "host" else "127.0.0.1")]
        return got[0] if got else {"calls": 0, "bytes_sent": 0, "bytes_received": 0}

    host_before, naa_before = side("host"), side("naa")
    words = np.arange(40_000, dtype=np.uint32)  # over several 64 KiB chunks
    with naarpc.Client(STREAM, target, transport="emulated") as c:
        c.StreamOps.Transform(factor=3, data=words)
    host, naa = side("host"), side("naa")
    streamed = words.nbytes
    assert host["calls"] - host_before["calls"] == 1
    assert host["bytes_sent"] - host_before["bytes_sent"] == 4 + streamed  # factor + data
    assert host["bytes_received"] - host_before["bytes_received"] == streamed
    assert naa["calls"] - naa_before["calls"] == 1
    assert naa["bytes_received"] - naa_before["bytes_received"] == 4 + streamed
    assert naa["bytes_sent"] - naa_before["bytes_sent"] == streamed


def test_python_stream_kernel_errors():
    def bad_dtype(call, factor, data, out):
        for chunk in data:
            out.write(chunk.astype(np.float64))

    kept = []

    def keeps(call, count, data):
        kept.append(data)

    errors = []

    def wrong_direction(call, data, digest):
        try:
            data.write(np.zeros(1, np.uint8))
        except TypeError as e:
            errors.append(str(e))
            raise

    with naarpc.serve(STREAM, {"Transform": bad_dtype, "Generate": keeps,
                               "Checksum": wrong_direction}, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as server:
        with naarpc.Client(STREAM, f"127.0.0.1:{server.port}", transport="emulated") as c:
            with pytest.raises(naarpc.NaaError) as e:
                c.StreamOps.Transform(factor=1, data=np.arange(10, dtype=np.uint32))
            assert e.value.status_name == "KERNEL_FAILED"
            # A kernel that returns without writing: its stream is ended (empty).
            assert len(c.StreamOps.Generate(count=5).data) == 0
            with pytest.raises(naarpc.NaaError) as e:
                c.StreamOps.Checksum(data=np.zeros(1, np.uint8))
            assert e.value.status_name == "KERNEL_FAILED"
            assert errors == ["StreamOps.Checksum: stream 'data' is an input stream: iterate "
                              "over it"]
    with pytest.raises(ValueError, match="has finished"):
        kept[0].write(np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="has finished"):
        next(iter(kept[0]))


def test_kernel_call_and_stream_counts_are_checked():
    errors = []

    def prefix(call, x, sums):
        for n in (-1, 4097, 2.5, "3"):
            try:
                call.set_length("sums", n)
            except (TypeError, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}")
        call.set_length("sums", np.int64(1))
        sums[0] = 42

    def generate(call, count, data):
        data.slot()
        for n in (-1, data.chunk_size + 1):
            try:
                data.commit(n)
            except ValueError as e:
                errors.append(f"{type(e).__name__}: {e}")
        data.commit(0)

    with naarpc.serve(VECTOR, {"Prefix": prefix}, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as vector, \
            naarpc.serve(STREAM, {"Generate": generate}, port=0, address="127.0.0.1",
                         transport="emulated", block=False) as stream:
        with naarpc.Client(VECTOR, f"127.0.0.1:{vector.port}", transport="emulated") as c:
            assert c.VectorArith.Prefix(x=[1, 2, 3]).sums.tolist() == [42]
        with naarpc.Client(STREAM, f"127.0.0.1:{stream.port}", transport="emulated") as c:
            assert len(c.StreamOps.Generate(count=1).data) == 0
    what = "VectorArith.Prefix: set_length('sums', n): 'sums' holds 0..4096 elements; got "
    commit = "StreamOps.Generate: output stream 'data': commit(n): n is 0..chunk_size (65536); got "
    assert errors == [f"ValueError: {what}-1", f"ValueError: {what}4097",
                      f"TypeError: {what}a float, not an int",
                      f"TypeError: {what}a str, not an int",
                      f"ValueError: {commit}-1", f"ValueError: {commit}65537"]


KEPT_ARRAYS_CHILD = r"""
import gc
import sys
import numpy as np
import naarpc

kept = {}

def histogram(call, limit, data, counts):
    kept["chunks"] = list(data)  # views of the NAA's ring

def dot(call, a, b, result):
    kept["a"], kept["view"], kept["result"] = a, b[1:], result
    result[0] = 1

for idl, kernels in ((sys.argv[1], {"Histogram": histogram}), (sys.argv[2], {"Dot": dot})):
    with naarpc.serve(idl, kernels, port=0, address="127.0.0.1", transport="emulated",
                      block=False) as server:
        with naarpc.Client(idl, f"127.0.0.1:{server.port}", transport="emulated") as c:
            if "Dot" in kernels:
                c.VectorArith.Dot(a=np.arange(60_000.0), b=np.full(60_000, 2.0))
            else:
                c.StreamOps.Histogram(limit=0, data=np.ones(3 << 20, np.uint8))
    del server
    gc.collect()  # the connections have ended, the servers are gone
junk = [bytearray(4096) for _ in range(10_000)]  # reuse what was freed
print("chunks:", len(kept["chunks"]) > 1, all((ch == 1).all() for ch in kept["chunks"]),
      kept["chunks"][0].flags.writeable)
print("a:", kept["a"][:2].tolist(), kept["a"][-1], kept["view"][:2].tolist(),
      kept["a"].flags.writeable)
try:
    kept["result"][0] = 2
except ValueError as e:
    print("result:", e, kept["result"].tolist())
kept.clear()
gc.collect()  # the last arrays free the connections' memory
print("done")
"""


def test_arrays_a_kernel_keeps_stay_readable_after_it_returned(tmp_path):
    # A kernel that keeps its arrays (against the docs) must not crash the
    # process when it reads them after the call, the connection and the
    # server are gone: they keep that memory (stale) and are read-only.
    script = tmp_path / "child.py"
    script.write_text(KEPT_ARRAYS_CHILD)
    child = subprocess.run([sys.executable, str(script), STREAM, VECTOR], capture_output=True,
                           text=True, timeout=300)  # a hang guard only
    assert child.returncode == 0, child.stdout + child.stderr
    assert "chunks: True True False" in child.stdout, child.stdout
    assert "a: [0.0, 1.0] 59999.0 [2.0, 2.0] False" in child.stdout, child.stdout
    assert "result: assignment destination is read-only [1.0]" in child.stdout, child.stdout
    assert "done" in child.stdout, child.stdout


# ---- a Python-served NAA called from the generated C++ stubs ----------------------------

def test_cpp_stubs_call_a_python_served_naa(py_stream_server):
    kernels = {"VectorArith.Add": lambda call, a, b, out: np.add(a, b, out=out),
               "VectorArith.Dot": lambda call, a, b, result: result.__setitem__(0, np.dot(a, b)),
               "VectorArith.Scale": lambda call, factor, x: np.multiply(x, factor[0], out=x)}
    with naarpc.serve(VECTOR, kernels, port=0, address="127.0.0.1", transport="emulated",
                      block=False) as vector:
        calls = vector.calls
        r = subprocess.run([STUB_CLIENT, "--host", "127.0.0.1", "--vector-port", str(vector.port),
                            "--stream-port", str(py_stream_server.port),
                            "--transport", "emulated"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "all calls answered as expected" in r.stdout, r.stdout
        assert vector.calls == calls + 3
    for line in ["VectorArith.Add OK", "VectorArith.Dot OK 32", "VectorArith.Scale OK 10 20 30",
                 "StreamOps.Checksum OK 1048576", "StreamOps.Transform OK 11 21 31",
                 "StreamOps.Generate OK 100000"]:
        assert line in r.stdout, r.stdout


# ---- Ctrl-C during a blocking call ------------------------------------------------------

def interrupt_child(args, in_kernel, release):
    """Runs a Python child (args: its script and arguments), waits for its
    "calling" line and for the NAA's kernel to hold the call (`in_kernel`),
    sends SIGINT while the call waits in C++, and returns (exit code,
    output); `release` lets the kernel go once the child is done."""
    child = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    try:
        assert child.stdout.readline().split()[0] == "calling"
        assert in_kernel.wait(120), "the call never reached the NAA's kernel"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=120)
    finally:
        release.set()
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, out


CTRL_C_CHILD = r"""
import sys
import numpy as np
import naarpc

with naarpc.Client(sys.argv[1], sys.argv[2], transport="emulated") as c:
    print("calling", flush=True)
    try:
        c.VectorArith.Add(a=np.zeros(1024, np.float32), b=np.zeros(1024, np.float32),
                          deadline=600)
        print("completed", flush=True)
    except KeyboardInterrupt:
        print("interrupted during the call", flush=True)
    # The client goes on: the interrupted call's connection was closed.
    print("after:", c.VectorArith.Dot(a=[1, 2], b=[3, 4]).result.tolist(), flush=True)
"""


def test_ctrl_c_interrupts_a_blocking_call(tmp_path):
    arrived, release = threading.Event(), threading.Event()

    def add(call, a, b, out):  # holds the call until the test ends
        arrived.set()
        release.wait(600)

    def dot(call, a, b, result):
        result[0] = np.dot(a, b)

    script = tmp_path / "child.py"
    script.write_text(CTRL_C_CHILD)
    idl = vector_without_limit(tmp_path)  # Add is held: no 2 s limit may end it first
    with naarpc.serve(idl, {"Add": add, "Dot": dot}, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as server:
        returncode, out = interrupt_child([str(script), idl, f"127.0.0.1:{server.port}"],
                                          arrived, release)
    assert returncode == 0, out
    assert "interrupted during the call" in out and "completed" not in out, out
    assert "after: [11.0]" in out, out


# ---- Ctrl-C during a stream call --------------------------------------------------------

CTRL_C_STREAM_CHILD = r"""
import sys
import numpy as np
import naarpc

with naarpc.Client(sys.argv[1], sys.argv[2], transport="emulated") as c:
    try:
        if sys.argv[3] == "collected":
            print("calling", flush=True)
            c.StreamOps.Generate(count=10_000_000, deadline=600)
        else:
            chunks = c.StreamOps.Generate.stream(count=10_000_000, deadline=600)
            first = next(iter(chunks))
            print("calling", len(first), flush=True)
            for _ in chunks:
                pass
        print("completed", flush=True)
    except KeyboardInterrupt:
        print("interrupted during the stream", flush=True)
    # The client goes on: the interrupted call's connection was dropped.
    print("after:", len(c.StreamOps.Generate(count=1000).data), flush=True)
"""


@pytest.mark.parametrize("form", ["collected", "iterated"])
def test_ctrl_c_interrupts_a_stream_call(tmp_path, form):
    stalled, release = threading.Event(), threading.Event()

    def stalling_generate(call, count, data):
        n = int(count[0])
        if n < 1_000_000:
            data.write(np.zeros(n, np.uint8))
            return
        data.write(np.ones(65536, np.uint8))  # one chunk, then the stream stalls
        stalled.set()
        release.wait(600)

    script = tmp_path / "child.py"
    script.write_text(CTRL_C_STREAM_CHILD)
    with naarpc.serve(STREAM, {"Generate": stalling_generate}, port=0, address="127.0.0.1",
                      transport="emulated", block=False) as server:
        returncode, out = interrupt_child(
            [str(script), STREAM, f"127.0.0.1:{server.port}", form], stalled, release)
    assert returncode == 0, out
    assert "interrupted during the stream" in out and "completed" not in out, out
    assert "after: 1000" in out, out
