"""Semantic checks of a schema-valid IDL document; builds the IR."""
import re

import ir

CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm atomic_cancel atomic_commit atomic_noexcept auto
bitand bitor bool break case catch char char8_t char16_t char32_t class compl
concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum
explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected
public reflexpr register reinterpret_cast requires return short signed sizeof
static static_assert static_cast struct switch synchronized template this
thread_local throw true try typedef typeid typename union unsigned using
virtual void volatile wchar_t while xor xor_eq final override import module
NULL assert errno offsetof std naarpc int8_t int16_t int32_t int64_t uint8_t
uint16_t uint32_t uint64_t size_t
""".split())

MAX_FUNCTION_CODE = 127
MAX_REGION_BYTES = 1 << 30            # one wire region; no parameter is split
MAX_ROUTINE_BYTES = 4 << 30           # the software NAA's per-connection budget
MAX_MRSP_REGIONS = 255                # 8-bit MRSP count
NAA_DEFAULT_MAX_REGIONS = 32          # FPGA NAA / naarpc NaaServer default
MAX_NAA_ADDRESS = (1 << 56) - 1
DEFAULT_TIMEOUT_MS = 10000
DEADLINE_GRACE_MS = 1000
RESERVED_PREFIX = "naarpc_"


def pascal(upper_snake):
    return "".join(p.capitalize() for p in upper_snake.split("_") if p)


def _bad_identifier(name):
    if name in CPP_KEYWORDS:
        return "'%s' is a C++ keyword or reserved name" % name
    if "__" in name or re.match(r"^_[A-Z_]", name):
        return "'%s' is reserved in C++ (double underscore or _Uppercase)" % name
    if name.lower().startswith(RESERVED_PREFIX):
        return "'%s' uses the prefix '%s' reserved for generated code" % (name, RESERVED_PREFIX)
    return None


class Validator:
    def __init__(self, path, doc, diags):
        self.path = path
        self.doc = doc
        self.d = diags

    def _ident(self, line, field, name):
        msg = _bad_identifier(name)
        if msg:
            self.d.error(line, field, msg)

    def run(self):
        doc = self.doc
        pkg = doc["package"]
        for i, part in enumerate(pkg.split(".")):
            if i == 0 and part == "naarpc":
                continue  # naarpc's own services; elsewhere it would shadow ::naarpc
            self._ident(doc.line_of("package"), "package", part)
        out = ir.IdlFile(path=self.path, package=pkg, namespace="::".join(pkg.split(".")),
                         doc=doc.get("doc", ""))
        top_names = {}  # generated top-level C++ names -> (service, line)
        for si, s in enumerate(doc["services"]):
            svc = self._service(s, "services[%d]" % si, doc["services"].line_of(si))
            generated = [svc.name + suffix for suffix in
                         ("ClientInterface", "Client", "Service", "Error", "ErrorName",
                          "ErrorFromStatus")] + ["Mock%sClient" % svc.name]
            for gen in generated:
                if gen in top_names:
                    other, oline = top_names[gen]
                    self.d.error(svc.line, "services[%d].name" % si,
                                 "service '%s' generates C++ name '%s', which service '%s' "
                                 "(line %d) also generates" % (svc.name, gen, other, oline))
                    break
            for gen in generated:
                top_names.setdefault(gen, (svc.name, svc.line))
            out.services.append(svc)
        return out

    def _errors(self, lst, field, routine, seen_names, seen_codes):
        result = []
        for i, e in enumerate(lst or []):
            line = lst.line_of(i)
            f = "%s[%d]" % (field, i)
            name, code = e["name"], e["code"]
            if name == "OK":
                self.d.error(line, f + ".name", "'OK' is reserved (status 0)")
            if name in seen_names:
                self.d.error(line, f + ".name", "duplicate error name '%s' (first at line %d)"
                             % (name, seen_names[name]))
            if code in seen_codes:
                self.d.error(line, f + ".code", "error code 0x%02x of '%s' is already used by "
                             "'%s' (line %d); codes are unique within a service"
                             % (code, name, seen_codes[code][0], seen_codes[code][1]))
            seen_names.setdefault(name, line)
            seen_codes.setdefault(code, (name, line))
            result.append(ir.ErrorCode(name=name, enumerator="k" + pascal(name), code=code,
                                       doc=e.get("doc", ""), routine=routine, line=line))
        return result

    def _service(self, s, field, line):
        name = s["name"]
        self._ident(s.line_of("name"), field + ".name", name)
        timeout = s.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        err_names, err_codes = {}, {}
        errors = self._errors(s.get("errors"), field + ".errors", None, err_names, err_codes)
        svc = ir.Service(name=name, doc=s.get("doc", ""), routines=[], errors=errors, line=line)
        codes, names, members = {}, {}, {}
        for ri, r in enumerate(s["routines"]):
            rline = s["routines"].line_of(ri)
            rfield = "%s.routines[%d]" % (field, ri)
            rt = self._routine(r, rfield, rline, timeout)
            if rt.code in codes:
                self.d.error(r.line_of("code"), rfield + ".code",
                             "function code %d of routine '%s' is already used by '%s' (line %d)"
                             % (rt.code, rt.name, codes[rt.code][0], codes[rt.code][1]))
            codes.setdefault(rt.code, (rt.name, rline))
            if rt.name in names:
                self.d.error(r.line_of("name"), rfield + ".name",
                             "duplicate routine name '%s' (first at line %d)"
                             % (rt.name, names[rt.name]))
            else:
                for m in (rt.name, rt.name + "Async", "New" + rt.name + "Call",
                          "Handle" + rt.name, rt.name + "Call"):
                    if m in members and members[m][0] != rt.name:
                        self.d.error(r.line_of("name"), rfield + ".name",
                                     "routine '%s' generates C++ member '%s', which routine "
                                     "'%s' (line %d) also generates"
                                     % (rt.name, m, members[m][0], members[m][1]))
                        break
                for m in (rt.name, rt.name + "Async", "New" + rt.name + "Call",
                          "Handle" + rt.name, rt.name + "Call"):
                    members.setdefault(m, (rt.name, rline))
            names.setdefault(rt.name, rline)
            rt.errors = self._errors(r.get("errors"), rfield + ".errors", rt.name,
                                     err_names, err_codes)
            svc.errors.extend(rt.errors)
            svc.routines.append(rt)
        if name in names:
            self.d.error(s.line_of("name"), field + ".name",
                         "service '%s' has a routine of the same name" % name)
        return svc

    def _routine(self, r, field, line, service_timeout):
        name = r["name"]
        self._ident(r.line_of("name"), field + ".name", name)
        if name in ("Handle", "KernelTimeout", "service_name", "function_codes"):
            self.d.error(r.line_of("name"), field + ".name",
                         "'%s' clashes with a member of the generated NAA handler" % name)
        code = r["code"]
        if not 1 <= code <= MAX_FUNCTION_CODE:
            self.d.error(r.line_of("code"), field + ".code",
                         "function code %d is out of range 1..%d" % (code, MAX_FUNCTION_CODE))
        timeout = r.get("timeout_ms", service_timeout)
        deadline = r.get("deadline_ms", timeout + DEADLINE_GRACE_MS)
        if deadline <= timeout:
            self.d.warning(r.line_of("deadline_ms"), field + ".deadline_ms",
                           "client deadline %d ms <= kernel timeout %d ms: the client gives up "
                           "before the NAA can report a kernel timeout" % (deadline, timeout))
        rt = ir.Routine(name=name, code=code, doc=r.get("doc", ""), timeout_ms=timeout,
                        deadline_ms=deadline, params=[], internals=[], errors=[], line=line)
        seen = {}
        params = r.get("params") or []
        for pi, p in enumerate(params):
            pline = params.line_of(pi)
            pfield = "%s.params[%d]" % (field, pi)
            pname = p["name"]
            self._ident(p.line_of("name"), pfield + ".name", pname)
            if pname in ("deadline", "call", "Invoke"):
                self.d.error(p.line_of("name"), pfield + ".name",
                             "'%s' is reserved (a generated argument or member)" % pname)
            if pname in seen:
                self.d.error(p.line_of("name"), pfield + ".name",
                             "duplicate name '%s' (first at line %d)" % (pname, seen[pname]))
            seen.setdefault(pname, pline)
            count, variable = self._count(p, pfield, pline)
            single = p.get("single_send", False)
            if single and p["direction"] != "in":
                self.d.error(p.line_of("single_send"), pfield + ".single_send",
                             "only 'in' parameters can be single_send (direction is '%s')"
                             % p["direction"])
            prm = ir.Param(index=pi, name=pname, type=ir.ELEM_TYPES[p["type"]], count=count,
                           variable=variable, direction=p["direction"], single_send=single,
                           doc=p.get("doc", ""))
            if prm.region_bytes > MAX_REGION_BYTES:
                self.d.error(p.line_of("max" if variable else "size"), pfield + ".size",
                             "parameter '%s' needs %d bytes; one parameter is limited to "
                             "%d bytes (1 GiB, one wire region%s)"
                             % (pname, prm.region_bytes, MAX_REGION_BYTES,
                                ", including the 8-byte length header" if variable else ""))
            rt.params.append(prm)
        internals = r.get("internal") or []
        for ii, it in enumerate(internals):
            iline = internals.line_of(ii)
            ifield = "%s.internal[%d]" % (field, ii)
            iname = it["name"]
            self._ident(it.line_of("name"), ifield + ".name", iname)
            if iname in ("deadline", "call", "Invoke"):
                self.d.error(it.line_of("name"), ifield + ".name", "'%s' is reserved" % iname)
            if iname in seen:
                self.d.error(it.line_of("name"), ifield + ".name",
                             "duplicate name '%s' (first at line %d)" % (iname, seen[iname]))
            seen.setdefault(iname, iline)
            count = it["size"]
            etype = ir.ELEM_TYPES[it.get("type", "u8")]
            if count < 1:
                self.d.error(it.line_of("size"), ifield + ".size",
                             "internal region '%s' has size %d; it must be at least 1 element"
                             % (iname, count))
            elif count * etype.size > MAX_REGION_BYTES:
                self.d.error(it.line_of("size"), ifield + ".size",
                             "internal region '%s' needs %d bytes; the limit is %d (1 GiB)"
                             % (iname, count * etype.size, MAX_REGION_BYTES))
            addr = it.get("naa_address", 0)
            if addr > MAX_NAA_ADDRESS:
                self.d.error(it.line_of("naa_address"), ifield + ".naa_address",
                             "NAA address 0x%x does not fit the 7-byte MRSP field (< 2^56)" % addr)
            rt.internals.append(ir.Internal(index=ii, name=iname, type=etype, count=count,
                                            naa_address=addr, doc=it.get("doc", "")))
        if not rt.inputs:
            self.d.error(r.line_of("params"), field + ".params",
                         "routine '%s' has no input parameter (direction in/inout); the call "
                         "is triggered by the last input write" % name)
        if not rt.outputs:
            self.d.error(r.line_of("params"), field + ".params",
                         "routine '%s' has no output parameter (direction out/inout); the "
                         "status travels with the last result write" % name)
        regions = len(rt.params) + len(rt.internals) + 1  # + spec metadata region
        if regions > MAX_MRSP_REGIONS:
            self.d.error(line, field, "routine '%s' needs %d regions (with the metadata "
                         "region); one MRSP message carries at most %d"
                         % (name, regions, MAX_MRSP_REGIONS))
        elif regions > NAA_DEFAULT_MAX_REGIONS:
            self.d.warning(line, field, "routine '%s' needs %d regions (with the metadata "
                           "region); NAAs accept %d by default (MRSP error 0x03)"
                           % (name, regions, NAA_DEFAULT_MAX_REGIONS))
        if rt.total_bytes > MAX_ROUTINE_BYTES:
            self.d.error(line, field, "routine '%s' needs %d bytes of regions in total; the "
                         "limit is %d (4 GiB, the NAA's per-connection budget)"
                         % (name, rt.total_bytes, MAX_ROUTINE_BYTES))
        return rt

    def _count(self, p, pfield, pline):
        has_size, has_max = "size" in p, "max" in p
        if has_size == has_max:
            self.d.error(pline, pfield, "give exactly one of 'size' (fixed element count) "
                         "and 'max' (variable length)")
            return 1, False
        key = "size" if has_size else "max"
        count = p[key]
        if count < 1:
            self.d.error(p.line_of(key), pfield + "." + key,
                         "parameter '%s' has %s %d; it must be at least 1 element"
                         % (p["name"], key, count))
            return 1, has_max
        return count, has_max
