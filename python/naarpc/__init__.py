"""naarpc for Python: call and serve network-attached accelerators (NAAs)
from their IDL file with numpy arrays (docs/python.md).

    import numpy as np, naarpc

    idl = naarpc.load_idl("services/vector/vector.naa.yaml")
    with naarpc.Client(idl, "127.0.0.1:12345", transport="emulated") as c:
        r = c.VectorArith.Add(a=np.arange(1024, dtype=np.float32),
                              b=np.ones(1024, dtype=np.float32))
        r.out          # numpy float32 array

The C++ half (_naarpc) is the `naarpc` CLI's dynamic machinery: the same IDL
loader, region layouts, checks and status names.
"""

import asyncio
import concurrent.futures
import numbers
import os
import sys
import threading
import time

if __package__ and not any(os.path.exists(os.path.join(d, "_naarpc.so")) for d in __path__):
    # A source checkout (PYTHONPATH=python): the extension Bazel built.
    _built = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), ".bazel", "bin", "python", "naarpc")
    if os.path.isdir(_built):
        __path__.append(_built)

from . import _naarpc  # noqa: E402
from ._errors import (DeadlineExceeded, Error, IdlError, InvalidArgument, NaaError,  # noqa: E402
                      Unavailable)

__all__ = ["load_idl", "Idl", "Client", "Result", "StreamingCall", "serve", "Server", "Error", "NaaError",
           "DeadlineExceeded", "Unavailable", "IdlError", "InvalidArgument", "stats", "metrics_text"]


def stats():
    """This process's per-routine call statistics, one dict per (side,
    routine, peer): side "host" for the calls of every Client, "naa" for the
    calls an NAA served here answered; calls, in_flight, bytes_sent,
    bytes_received, errors ({status name: count}) and latency_p50/p90/p99/max
    in seconds (docs/python.md, docs/operating.md)."""
    return _naarpc.stats()


def metrics_text():
    """stats() in the Prometheus text exposition format (docs/operating.md)."""
    return _naarpc.metrics_text()


class Idl:
    """A loaded IDL file. str(idl) is what `naarpc describe FILE` prints."""

    def __init__(self, native):
        self._native = native

    @property
    def path(self):
        return self._native.path

    @property
    def package(self):
        return self._native.package

    @property
    def services(self):
        """The service names, in IDL order."""
        return list(self._native.services)

    def routines(self, service):
        """The routine names of `service`."""
        return list(self._native.routines(service))

    def routine(self, name):
        """The declaration of "Service.Routine" (or a unique "Routine") as a
        dict: code, deadline_ms, params (name, type, dtype, count, variable,
        direction, stream), errors."""
        return self._native.routine(name)

    def describe(self, selector="", json=False):
        """`naarpc describe FILE [selector] [--json]`."""
        return self._native.describe(selector, json)

    def __str__(self):
        return self._native.describe("", False)

    def __repr__(self):
        return f"<naarpc.Idl {self.path!r}: {', '.join(self.services)}>"


def load_idl(path):
    """Loads and validates an IDL file (*.naa.yaml). Raises IdlError (a
    ValueError) whose message is the file's `file:line:col: error: ...` lines."""
    return Idl(_naarpc.load_idl(os.fspath(path)))


class Result:
    """The outputs of a call by IDL name: r.out or r["out"]; iterable as
    (name, array) pairs via r.items()."""

    __slots__ = ("_outputs",)

    def __init__(self, outputs):
        object.__setattr__(self, "_outputs", dict(outputs))

    def __getattr__(self, name):
        try:
            return self._outputs[name]
        except KeyError:
            raise AttributeError(f"no output '{name}' (outputs: {', '.join(self._outputs)})") \
                from None

    def __getitem__(self, name):
        return self._outputs[name]

    def __contains__(self, name):
        return name in self._outputs

    def __iter__(self):
        return iter(self._outputs)

    def __len__(self):
        return len(self._outputs)

    def keys(self):
        return self._outputs.keys()

    def items(self):
        return self._outputs.items()

    def __repr__(self):
        return "Result(" + ", ".join(f"{k}={v!r}" for k, v in self._outputs.items()) + ")"


class _Routine:
    """c.Service.Routine: call it with the inputs by IDL name (keywords only).

    The call's deadline is `deadline=` (seconds), unless the routine has a
    parameter named `deadline`: then that is the parameter, and the call's
    deadline is `naarpc_deadline=` (accepted by every routine: no IDL name
    starts with naarpc_)."""

    def __init__(self, client, full_name, info):
        self._client = client
        self._name = full_name
        self.info = info
        self.__doc__ = info.get("doc") or full_name
        names = [p["name"] for p in info["params"]]
        self._inputs = [p["name"] for p in info["params"] if p["direction"] != "out"]
        self._deadline_param = "deadline" in names

    def _split(self, form, args, kwargs):
        """(deadline, parameters) of a call; TypeError for positional arguments."""
        deadline_kw = "naarpc_deadline" if self._deadline_param else "deadline"
        if args:
            raise TypeError(f"{self._name}{form} takes its inputs by keyword: "
                            f"{', '.join(self._inputs) or 'none'} (and {deadline_kw}=)")
        params = dict(kwargs)
        deadline = params.pop("naarpc_deadline", None)
        if not self._deadline_param and "deadline" in params:
            if deadline is not None:
                raise TypeError(f"{self._name}{form}: give the deadline once "
                                f"(deadline= or naarpc_deadline=)")
            deadline = params.pop("deadline")
        if deadline is not None and (isinstance(deadline, bool) or
                                     not isinstance(deadline, numbers.Real)):
            raise TypeError(f"{self._name}{form}: {deadline_kw}= takes seconds (a number) or "
                            f"None, got {type(deadline).__name__}")
        return (None if deadline is None else float(deadline)), params

    def __call__(self, /, *args, **kwargs):
        """One call; blocks (without the GIL) until the outputs are back or
        `deadline` seconds (default: the routine's deadline_ms) passed."""
        deadline, params = self._split("", args, kwargs)
        return Result(self._client._native_client().call(self._name, params, deadline))

    def future(self, /, *args, **kwargs):
        """The call on the client's thread pool: a concurrent.futures.Future
        of its Result."""
        deadline, params = self._split(".future()", args, kwargs)
        native = self._client._native_client()
        return self._client._executor().submit(
            lambda: Result(native.call(self._name, params, deadline)))

    def aio(self, /, *args, **kwargs):
        """The call as an awaitable for asyncio: `await c.S.R.aio(...)`."""
        return asyncio.wrap_future(self.future(*args, **kwargs))

    @property
    def memory_windows(self):
        """True if this routine's calls bind per-call memory windows (the
        client's memory_windows, else the IDL's declaration): the NAA can
        write the results only while a call runs. A connection that asks for
        them opens only if the NAA accepted them, so a call that succeeded
        ran with them."""
        return self._client._native_client().memory_windows(self._name)

    def stream(self, /, *args, **kwargs):
        """Starts the call and returns at once: a StreamingCall whose output
        streams are iterators of arrays, read while the call runs (one chunk
        in memory at a time). Inputs as for a plain call; input streams may
        be generators."""
        deadline, params = self._split(".stream()", args, kwargs)
        return StreamingCall(self._client._native_client().start(self._name, params, deadline),
                             self._name)

    def __repr__(self):
        return f"<naarpc routine {self._name}>"


class StreamIterator:
    """One output stream of a StreamingCall: iterating gives its chunks (new
    1-D arrays of the IDL type, in order) until the stream ends; a failed
    call raises its error (naarpc.Error) from the iteration."""

    def __init__(self, native, name):
        self._native = native
        self.name = name

    def __iter__(self):
        return self

    def __next__(self):
        chunk = self._native.next(self.name)
        if chunk is None:
            raise StopIteration
        return chunk


class StreamingCall:
    """A call started by c.Service.Routine.stream(...), running while its
    output streams are read: `call.NAME` (or call["NAME"]) iterates over
    output stream NAME; iterating the call itself does so when it has
    exactly one. result() waits for the end (dropping chunks not read) and
    returns a Result of the other outputs; cancel() (and leaving a `with`
    block early) stops the call. Streams with several outputs must be read
    in the order the NAA sends them. Not for use by several threads."""

    def __init__(self, native, name):
        self._native = native
        self._name = name
        self.streams = list(native.streams)
        self._iterators = {s: StreamIterator(native, s) for s in self.streams}

    def __getattr__(self, name):
        iterators = self.__dict__.get("_iterators", {})
        if name in iterators:
            return iterators[name]
        raise AttributeError(f"{self.__dict__.get('_name')} has no output stream '{name}' "
                             f"(output streams: {', '.join(iterators) or 'none'})")

    def __getitem__(self, name):
        try:
            return self._iterators[name]
        except KeyError:
            raise KeyError(f"{self._name} has no output stream '{name}' "
                           f"(output streams: {', '.join(self._iterators) or 'none'})") from None

    def __iter__(self):
        if len(self.streams) != 1:
            raise TypeError(f"{self._name} has {len(self.streams)} output streams "
                            f"({', '.join(self.streams) or 'none'}): iterate over call.NAME")
        return self._iterators[self.streams[0]]

    @property
    def done(self):
        return self._native.done

    def result(self):
        """Waits for the call's end; returns its outputs other than streams."""
        return Result(self._native.result())

    def cancel(self):
        """Stops the call at its next chunk, in or out (no effect once it ended)."""
        self._native.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cancel()
        return False

    def __repr__(self):
        return f"<naarpc streaming call {self._name}>"


class _Service:
    def __init__(self, client, name):
        self._client = client
        self._name = name
        self._routines = set(client.idl.routines(name))

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._routines:
            raise AttributeError(f"service {self._name} has no routine '{name}' "
                                 f"(routines: {', '.join(sorted(self._routines))})")
        full = f"{self._name}.{name}"
        r = _Routine(self._client, full, self._client.idl.routine(full))
        setattr(self, name, r)
        return r

    def __dir__(self):
        return sorted(self._routines)


class Client:
    """Connections to an NAA for the routines of an IDL.

    target: "HOST[:PORT]" ("[IPv6]:PORT"), or a list of them: a channel over
    those NAAs (docs/channel.md); None: each routine's NAAs (every entry of
    its function code) from NAA_SPEC (and NAA_LOCAL_IP) as the NAAICE
    reference library names them. Over several NAAs each call goes to the
    NAA the channel picks (round robin); a failed NAA is ejected for a while;
    a call of an idempotent routine that met a failed NAA runs on another.
    transport: "emulated" (TCP), "verbs" (RDMA) or "auto". dialect: "spec" or
    "reference". memory_windows: True/False for every routine (per-call
    memory windows over the results, docs/idl.md), None: each routine's IDL
    declaration (`memory_windows: required`); a routine that uses them fails
    to connect to an NAA or device without them (naarpc.Error, status
    FAILED_PRECONDITION). Connections are opened on first use, one per
    routine and concurrent call, and kept for the next calls. Thread-safe.
    """

    def __init__(self, idl, target=None, transport="auto", device="", dialect="spec",
                 max_workers=None, memory_windows=None):
        if isinstance(idl, (str, os.PathLike)):
            idl = load_idl(idl)
        if not isinstance(idl, Idl):
            raise TypeError(f"idl must be a naarpc.Idl or a path, got {type(idl).__name__}")
        self.idl = idl
        if target is None:
            targets = []
        elif isinstance(target, str):
            targets = [target]
        elif isinstance(target, (list, tuple)) and target and all(isinstance(t, str) for t in target):
            targets = list(target)
        else:
            raise TypeError(f"target must be \"HOST[:PORT]\", a non-empty list of them or None, "
                            f"got {target!r}")
        if memory_windows is not None and not isinstance(memory_windows, bool):
            raise TypeError(f"memory_windows must be True, False or None (the IDL's "
                            f"declaration), got {memory_windows!r}")
        self._client = _naarpc.Client(idl._native, targets, transport, device, dialect,
                                      memory_windows)
        self._services = {}
        self._pool = None
        self._pool_lock = threading.Lock()
        self._max_workers = max_workers or 32
        for name in idl.services:
            self._services[name] = _Service(self, name)

    @property
    def transport(self):
        """The transport in use, e.g. "emulated" or "auto (emulated)"."""
        return self._client.transport

    def __getattr__(self, name):
        services = self.__dict__.get("_services", {})
        if name in services:
            return services[name]
        raise AttributeError(f"{self.__dict__.get('idl')!r} has no service '{name}' "
                             f"(services: {', '.join(services)})")

    def __dir__(self):
        return list(super().__dir__()) + list(self._services)

    def call(self, routine, /, *args, **kwargs):
        """c.call("Service.Routine", a=..., b=...): the same as
        c.Service.Routine(a=..., b=...)."""
        info = self.idl.routine(routine)  # KeyError naming it if there is none
        return getattr(self._services[info["service"]], info["name"])(*args, **kwargs)

    def empty(self, routine, param, deadline=None):
        """A numpy array over the registered buffer of `param` of `routine`
        ("Service.Routine"): pass it as that parameter and the call sends from
        it (input) or its results land in it (output) without a copy. It has
        the parameter's size (its maximum if variable-length: pass a[:n]).
        Opens a connection for it now; the array keeps it."""
        return self._native_client().empty(routine, param, deadline)

    def naa_counters(self):
        """Per NAA the routines called so far went to: a dict with naa
        ("host:port"), calls (attempts sent), errors, failures (of the NAA:
        connection, deadline), in_flight, ejections and ejected (now)."""
        return self._client.naa_counters()

    def close(self):
        """Closes every connection (arrays from empty() stay readable)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self._client is not None:
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _native_client(self):
        return self._client

    def _executor(self):
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix="naarpc")
            return self._pool


class Server:
    """A software NAA whose kernels are Python functions (see serve())."""

    def __init__(self, native, idl):
        self._native = native
        self.idl = idl

    @property
    def port(self):
        return self._native.port

    @property
    def address(self):
        return self._native.address

    @property
    def calls(self):
        """Calls that reached a kernel."""
        return self._native.calls

    @property
    def running(self):
        return self._native.running

    @property
    def transport(self):
        return self._native.transport

    def describe(self):
        """One line per routine: "Service.Routine (code N): KERNEL"."""
        return self._native.describe()

    def stop(self):
        """Stops listening, closes the connections, waits for running kernels:
        those past their time limit (timeout_ms) at most shutdown_grace
        seconds; a kernel still running then is left to return on its own
        thread (logged, naming its routine)."""
        self._native.stop()

    def wait(self):
        """Blocks until Ctrl-C (KeyboardInterrupt, which stops the server) or stop()."""
        try:
            while self._native.running:
                time.sleep(0.1)
        except KeyboardInterrupt:
            self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def serve(idl, kernels, port=12345, address="0.0.0.0", transport="auto", device="",
          dialect="any", service=None, block=True, memory_windows=True, shutdown_grace=10.0):
    """A software NAA for the routines of `idl`, with Python kernels.

    kernels: {"Service.Routine" (or "Routine"): kernel}. A kernel is called
    as kernel(call, *params) with one numpy array per parameter in IDL order,
    viewing the NAA's regions (no copies): inputs read-only, outputs written
    in place. It returns None (success, as does an array over one of its
    outputs), an error name of the IDL or a status number (int or numpy
    integer); anything else answers 0x05 (kernel failed), logged. Raising
    NaaError answers its status_code, any other exception 0x05.
    `call.set_length(name, n)` sets a variable-length output's length
    (default: the first variable-length input's). A kernel may also be a
    built-in kernel of `naarpc serve` ("echo", "increment", "zeros",
    "sleep:MS", "fail:NAME"). Routines without a kernel answer 0x03
    (unknown function). Arrays are valid only while the
    kernel runs (one kept longer stays readable: stale data, read-only).
    memory_windows=False refuses clients' per-call memory windows
    (ServerOptions::memory_windows), as an NAA that predates them.
    shutdown_grace: how long stopping waits for kernels past their time
    limit (ServerOptions::shutdown_grace), in seconds.

    block=True serves until Ctrl-C; block=False returns the running Server
    (a context manager; port=0 picks a free port, server.port tells it).
    """
    if isinstance(idl, (str, os.PathLike)):
        idl = load_idl(idl)
    if not isinstance(idl, Idl):
        raise TypeError(f"idl must be a naarpc.Idl or a path, got {type(idl).__name__}")
    if (isinstance(shutdown_grace, bool) or not isinstance(shutdown_grace, numbers.Real)
            or not 0 <= shutdown_grace <= 86400):
        raise (ValueError if isinstance(shutdown_grace, numbers.Real) and
               not isinstance(shutdown_grace, bool) else TypeError)(
            f"shutdown_grace takes seconds 0..86400, got {shutdown_grace!r}")
    native = _naarpc.Server(idl._native, dict(kernels), address, int(port), transport, device,
                            dialect, service, bool(memory_windows), float(shutdown_grace))
    server = Server(native, idl)
    if not block:
        return server
    print(f"naarpc serve: listening on {address}:{server.port} ({idl.path}, transport "
          f"{server.transport}, dialect {dialect}); Ctrl-C stops\n{server.describe()}",
          end="", flush=True)
    server.wait()
    print(f"naarpc serve: {server.calls} call(s); shut down", flush=True)
    return server
