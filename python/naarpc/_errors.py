"""naarpc's exceptions. The C++ half (_naarpc) raises them through from_status."""


class Error(RuntimeError):
    """A call or a connection failed. `code` names the failure ("UNAVAILABLE",
    "DEADLINE_EXCEEDED", "NAA_ERROR", ...); str(e) is the whole message."""

    def __init__(self, message, code="UNKNOWN"):
        super().__init__(message)
        self.code = code
        self.message = message


class NaaError(Error):
    """The NAA answered with a non-zero status: `status_code` (the status
    byte) and `status_name` (the IDL's error name, or the protocol's own, e.g.
    "KERNEL_TIMEOUT"), `status_doc` (the IDL's doc of the error)."""

    def __init__(self, message, status_code, status_name="", status_doc=""):
        super().__init__(message, "NAA_ERROR")
        self.status_code = status_code
        self.status_name = status_name
        self.status_doc = status_doc


class DeadlineExceeded(Error, TimeoutError):
    """The call's deadline passed (connecting, the MRSP or the call)."""


class Unavailable(Error, ConnectionError):
    """The NAA cannot be reached, refused the regions, or went away."""


class InvalidArgument(Error, ValueError):
    """A value naarpc refused before sending anything (e.g. NAA_SPEC)."""


class IdlError(Error, ValueError):
    """An IDL file is missing or invalid. str(e) and `diagnostics` hold its
    errors as `file:line:col: error: ...` lines."""

    def __init__(self, message, diagnostics=()):
        super().__init__(message, "INVALID_IDL")
        self.diagnostics = list(diagnostics)


_UNAVAILABLE = {"UNAVAILABLE", "DISCONNECTED", "TRANSPORT_ERROR", "MRSP_ERROR", "NOT_FOUND",
                "PROTOCOL_ERROR"}


def from_status(code, message, wire_code, status_name, status_doc):
    """The exception for a failed naarpc::Status."""
    if code == "NAA_ERROR" and wire_code is not None:
        return NaaError(message, wire_code, status_name, status_doc)
    if code == "DEADLINE_EXCEEDED":
        return DeadlineExceeded(message, code)
    if code in _UNAVAILABLE:
        return Unavailable(message, code)
    if code == "INVALID_ARGUMENT":
        return InvalidArgument(message, code)
    return Error(message, code)
