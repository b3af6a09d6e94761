"""Per-call memory windows from Python (docs/python.md, docs/idl.md
`memory_windows`), over the emulated transport against NAAs served from
Python: the IDL's declaration is each routine's default, Client(...,
memory_windows=True/False) overrides it, and an NAA that does not offer
windows refuses a routine that requires them with a clear error. Run by
//python:python_memory_windows_test.

Whether an NAA's write after a call ended could touch host memory is not
observable from Python (a Python kernel writes the NAA's own buffers; the
RDMA writes are the runtime's): //tests/e2e:memory_window_e2e_test checks
that on both transports. Here the negotiated state is asserted through
`c.Service.Routine.memory_windows` and the refusal.
"""

import numpy as np
import pytest

import naarpc

VECTOR = "services/vector/vector.naa.yaml"

GUARDED = """\
package: t.windows
services:
  - name: Guarded
    memory_windows: required
    routines:
      - name: Add
        code: 1
        params:
          - {name: a, type: f32, size: 4, direction: in}
          - {name: b, type: f32, size: 4, direction: in}
          - {name: out, type: f32, size: 4, direction: out}
      - name: Plain
        code: 2
        memory_windows: none
        params:
          - {name: a, type: f32, size: 4, direction: in}
          - {name: out, type: f32, size: 4, direction: out}
"""

KERNELS = {
    "Guarded.Add": lambda call, a, b, out: np.add(a, b, out=out),
    "Guarded.Plain": lambda call, a, out: np.multiply(a, 2, out=out),
}
A = np.arange(4, dtype=np.float32)
B = np.full(4, 10, dtype=np.float32)


@pytest.fixture
def guarded(tmp_path):
    path = tmp_path / "guarded.naa.yaml"
    path.write_text(GUARDED)
    return naarpc.load_idl(str(path))


def serve(idl, **kw):
    kernels = KERNELS if idl.package == "t.windows" else {
        "VectorArith.Add": lambda call, a, b, out: np.add(a, b, out=out)}
    return naarpc.serve(idl, kernels, port=0, address="127.0.0.1", transport="emulated",
                        block=False, **kw)


def test_the_idl_declares_it(guarded):
    assert guarded.routine("Guarded.Add")["memory_windows"] is True   # inherited
    assert guarded.routine("Guarded.Plain")["memory_windows"] is False  # its own `none`
    assert "per-call memory windows" in guarded.describe("Guarded.Add")
    assert "per-call memory windows" not in guarded.describe("Guarded.Plain")


def test_calls_run_with_the_idls_windows(guarded):
    with serve(guarded) as server, \
            naarpc.Client(guarded, f"127.0.0.1:{server.port}", transport="emulated") as c:
        assert c.Guarded.Add.memory_windows
        assert not c.Guarded.Plain.memory_windows
        # Several calls on one connection: a window bound and invalidated each.
        for i in range(5):
            r = c.Guarded.Add(a=A + i, b=B)
            np.testing.assert_array_equal(r.out, A + i + B)
        # Results into a registered array (the window covers that buffer).
        buf = c.empty("Guarded.Add", "out")
        assert c.Guarded.Add(a=A, b=B, out=buf).out is buf
        np.testing.assert_array_equal(buf, A + B)
        np.testing.assert_array_equal(c.Guarded.Plain(a=A).out, 2 * A)


def test_client_option_overrides_the_idl(guarded, tmp_path):
    with serve(guarded) as server:
        target = f"127.0.0.1:{server.port}"
        with naarpc.Client(guarded, target, transport="emulated", memory_windows=False) as c:
            assert not c.Guarded.Add.memory_windows
            np.testing.assert_array_equal(c.Guarded.Add(a=A, b=B).out, A + B)
        with naarpc.Client(guarded, target, transport="emulated", memory_windows=True) as c:
            assert c.Guarded.Plain.memory_windows
            np.testing.assert_array_equal(c.Guarded.Plain(a=A).out, 2 * A)
    # An IDL that declares nothing: off unless asked for.
    vector = naarpc.load_idl(VECTOR)
    with serve(vector) as server:
        x = np.ones(1024, dtype=np.float32)
        with naarpc.Client(vector, f"127.0.0.1:{server.port}", transport="emulated") as c:
            assert not c.VectorArith.Add.memory_windows
        with naarpc.Client(vector, f"127.0.0.1:{server.port}", transport="emulated",
                           memory_windows=True) as c:
            assert c.VectorArith.Add.memory_windows
            np.testing.assert_array_equal(c.VectorArith.Add(a=x, b=x).out, 2 * x)


def test_an_naa_without_windows_refuses_them(guarded):
    with serve(guarded, memory_windows=False) as server:
        target = f"127.0.0.1:{server.port}"
        with naarpc.Client(guarded, target, transport="emulated") as c:
            with pytest.raises(naarpc.Error) as e:
                c.Guarded.Add(a=A, b=B)
            assert e.value.code == "FAILED_PRECONDITION"
            assert "did not accept per-call memory windows (capability 0x01" in str(e.value)
            assert "Guarded.Add" in str(e.value)
            # Never a silent fallback: the next call is refused too.
            with pytest.raises(naarpc.Error, match="capability 0x01"):
                c.Guarded.Add(a=A, b=B)
            # A routine that declares `none` is not affected.
            np.testing.assert_array_equal(c.Guarded.Plain(a=A).out, 2 * A)
        with naarpc.Client(guarded, target, transport="emulated", memory_windows=False) as c:
            np.testing.assert_array_equal(c.Guarded.Add(a=A, b=B).out, A + B)


def test_the_reference_dialect_cannot_carry_them(guarded):
    with serve(guarded) as server:
        target = f"127.0.0.1:{server.port}"
        with naarpc.Client(guarded, target, transport="emulated", dialect="reference") as c:
            with pytest.raises(naarpc.InvalidArgument, match="needs the spec dialect"):
                c.Guarded.Add(a=A, b=B)
        with naarpc.Client(guarded, target, transport="emulated", dialect="reference",
                           memory_windows=False) as c:
            np.testing.assert_array_equal(c.Guarded.Add(a=A, b=B).out, A + B)


def test_bad_values(guarded):
    with pytest.raises(TypeError, match="memory_windows must be True, False or None"):
        naarpc.Client(guarded, "127.0.0.1:1", transport="emulated", memory_windows="yes")
