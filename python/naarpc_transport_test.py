"""naarpc from Python on both transports: a few cases run over the emulated
transport (everywhere) and over verbs (RDMA). The verbs cases skip, saying
why, without an RDMA device and NAARPC_TEST_ADDRESS (the address an RDMA
device's netdev has); the Soft-RoCE guest stage (tools/rxe-vm/guest_suite.sh)
runs them with NAARPC_TEST_REQUIRE_VERBS=1, which turns such a skip into a
failure. Run by //python:python_test.
"""

import os

import numpy as np
import pytest

import naarpc
from naarpc_test import CHECKED, NAA_SERVER, STREAM, VECTOR, start, stop

TRANSPORTS = ["emulated", "verbs"]


def rdma_devices():
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        return []


def address_for(transport):
    """The address NAAs listen on and clients call for `transport`; skips
    (or fails, in the guest stage) a verbs case that cannot run here."""
    if transport == "emulated":
        return "127.0.0.1"
    addr = os.environ.get("NAARPC_TEST_ADDRESS", "")
    why = None
    if not rdma_devices():
        why = "verbs: no RDMA device (/sys/class/infiniband is empty); runs in the Soft-RoCE " \
              "guest stage (//tools/rxe-vm:verbs_in_guest_test)"
    elif not addr:
        why = "verbs: NAARPC_TEST_ADDRESS (an address of the RDMA device's netdev) is not set"
    if why:
        if os.environ.get("NAARPC_TEST_REQUIRE_VERBS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return addr


@pytest.fixture(scope="module", params=TRANSPORTS)
def naa(request):
    """(transport, "ADDR:PORT") of //examples:naa_server on that transport."""
    transport = request.param
    addr = address_for(transport)
    p, port = start([NAA_SERVER, "--transport", transport, "--port", "0", "--address", addr],
                    r"on [^ ]*:(\d+) \(transport")
    yield transport, f"{addr}:{port}"
    stop(p)


def test_call_and_zero_copy(naa):
    transport, target = naa
    x = np.arange(1024, dtype=np.float32)
    with naarpc.Client(VECTOR, target, transport=transport) as c:
        assert transport in c.transport
        np.testing.assert_array_equal(c.VectorArith.Add(a=x, b=x).out, 2 * x)
        buf = c.empty("VectorArith.Add", "out")
        r = c.VectorArith.Add(a=x, b=np.ones(1024, np.float32), out=buf)
        assert r.out is buf and np.shares_memory(r.out, buf)
        np.testing.assert_array_equal(buf, x + 1)
        assert c.VectorArith.Dot(a=[1, 2, 3], b=[4, 5, 6]).result.tolist() == [32.0]


def test_errors_by_name(naa):
    transport, target = naa
    with naarpc.Client(CHECKED, target, transport=transport) as c:
        with pytest.raises(naarpc.NaaError) as e:
            c.CheckedMath.Isqrt(x=np.array([-1], dtype=np.int64))
        assert e.value.status_name == "NEGATIVE_INPUT" and e.value.status_code == 0x13


@pytest.mark.parametrize("dialect", ["spec", "reference"])
def test_dialects(naa, dialect):
    transport, target = naa
    with naarpc.Client(VECTOR, target, transport=transport, dialect=dialect) as c:
        x = np.arange(1024, dtype=np.float32)
        np.testing.assert_array_equal(c.VectorArith.Sub(a=x, b=x).out, np.zeros(1024))


def test_streams(naa):
    transport, target = naa
    with naarpc.Client(STREAM, target, transport=transport) as c:
        words = (np.arange(i, i + 10_000, dtype=np.uint32) for i in range(0, 100_000, 10_000))
        got = np.concatenate(list(c.StreamOps.Transform.stream(factor=2, data=words).out))
        np.testing.assert_array_equal(got, np.arange(100_000, dtype=np.uint32) * 2 + 1)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_python_served_naa(transport):
    addr = address_for(transport)
    kernels = {"VectorArith.Add": lambda call, a, b, out: np.add(a, b, out=out)}
    with naarpc.serve(VECTOR, kernels, port=0, address=addr, transport=transport,
                      block=False) as server:
        with naarpc.Client(VECTOR, f"{addr}:{server.port}", transport=transport) as c:
            x = np.arange(1024, dtype=np.float32)
            np.testing.assert_array_equal(c.VectorArith.Add(a=x, b=x).out, 2 * x)
