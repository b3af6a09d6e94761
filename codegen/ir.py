"""Typed IR of a validated IDL file; templates render only from this."""
from dataclasses import dataclass, field
from typing import List, Optional

LENGTH_HEADER_BYTES = 8  # variable-length parameters: u64 big-endian element count


@dataclass(frozen=True)
class ElemType:
    idl: str
    cpp: str
    size: int


ELEM_TYPES = {
    "u8": ElemType("u8", "uint8_t", 1),
    "u16": ElemType("u16", "uint16_t", 2),
    "u32": ElemType("u32", "uint32_t", 4),
    "u64": ElemType("u64", "uint64_t", 8),
    "i8": ElemType("i8", "int8_t", 1),
    "i16": ElemType("i16", "int16_t", 2),
    "i32": ElemType("i32", "int32_t", 4),
    "i64": ElemType("i64", "int64_t", 8),
    "f32": ElemType("f32", "float", 4),
    "f64": ElemType("f64", "double", 8),
    "bytes": ElemType("bytes", "std::byte", 1),
}


@dataclass
class ErrorCode:
    name: str        # UPPER_SNAKE as in the IDL
    enumerator: str  # kPascalCase
    code: int
    doc: str
    routine: Optional[str]  # declared by this routine, None = service-wide
    line: int = 0


@dataclass
class Param:
    index: int
    name: str
    type: ElemType
    count: int       # fixed element count, or the maximum if variable
    variable: bool
    direction: str   # in | out | inout
    single_send: bool
    doc: str

    @property
    def is_input(self):
        return self.direction in ("in", "inout")

    @property
    def is_output(self):
        return self.direction in ("out", "inout")

    @property
    def scalar(self):
        """size: 1 -> passed as a value (in) or pointer/reference (out, inout)."""
        return not self.variable and self.count == 1

    @property
    def data_bytes(self):
        return self.count * self.type.size

    @property
    def region_bytes(self):
        return self.data_bytes + (LENGTH_HEADER_BYTES if self.variable else 0)

    @property
    def data_offset(self):
        return LENGTH_HEADER_BYTES if self.variable else 0

    @property
    def runtime_direction(self):
        return {"in": "kIn", "out": "kOut", "inout": "kInOut"}[self.direction]

    @property
    def expected_flags(self):
        f = 0
        if self.is_input:
            f |= 0x04
        if self.is_output:
            f |= 0x08
        if self.single_send:
            f |= 0x02
        return f


@dataclass
class Internal:
    index: int
    name: str
    type: ElemType
    count: int
    naa_address: int
    doc: str

    @property
    def region_bytes(self):
        return self.count * self.type.size


@dataclass
class Routine:
    name: str
    code: int
    doc: str
    timeout_ms: int
    deadline_ms: int
    params: List[Param]
    internals: List[Internal]
    errors: List[ErrorCode]
    line: int = 0

    @property
    def inputs(self):
        return [p for p in self.params if p.is_input]

    @property
    def outputs(self):
        return [p for p in self.params if p.is_output]

    @property
    def has_variable(self):
        return any(p.variable for p in self.params)

    @property
    def total_bytes(self):
        return sum(p.region_bytes for p in self.params) + sum(
            i.region_bytes for i in self.internals)


@dataclass
class Service:
    name: str
    doc: str
    routines: List[Routine]
    errors: List[ErrorCode]  # service-wide and routine errors; codes unique
    line: int = 0


@dataclass
class IdlFile:
    path: str           # as given (for the "generated from" banner)
    package: str
    namespace: str      # C++: a::b::c
    doc: str
    services: List[Service] = field(default_factory=list)
