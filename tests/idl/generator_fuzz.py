#!/usr/bin/python3
"""Generator fuzzer: random IDL files from a grammar with hostile names (C++
keywords, std and runtime names, header macros, every name the templates
generate, case and underscore variants of the other names), docs with every
special character, arities from 1 to the limit. Each one must either be
rejected with file:line:col errors (exit 1, nothing written) or generate
code that compiles: g++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror on
the .naa.cc and the _mock.h.

Accepted cases are compiled in batches (one translation unit includes many
generated files, each in its own namespace); a failing batch is split to
name the case. On failure the IDL and the compiler's first errors are
printed; the seed reproduces the run:

  generator_fuzz.py --idlc ... --gen ... --include_root ... --seed S --cases N
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

KEYWORDS = ["class", "int", "new", "delete", "this", "template", "operator", "and",
            "not", "co_await", "requires", "final", "override", "import", "module",
            "namespace", "auto", "default"]
# Names of the standard library and of the runtime the generated code uses
# (qualified there, so most are fine as IDL names).
STD = ["std", "span", "vector", "string", "string_view", "size_t", "uint8_t", "int64_t",
       "byte", "move", "function", "future", "tuple", "optional", "memcpy", "to_string",
       "chrono", "milliseconds", "exchange", "array", "begin", "end", "data", "size",
       "first", "assign", "value", "testing", "naarpc", "codegen", "Status", "Result",
       "Deadline", "Transport", "NaaCall", "VarSpan", "TypedView", "SessionPool",
       "AsyncRunner", "Lease", "ok", "Ok", "RegionSpec", "Direction", "CallOptions",
       "StubOptions", "ServiceHandler", "NaaHandler", "main", "errno_t", "get", "swap"]
MACROS = ["EOF", "errno", "assert", "stdin", "si_value", "st_atime", "TEST", "EXPECT_CALL",
          "NULL", "INT_MAX", "linux", "unix", "major", "FD_SET", "MOCK_METHOD",
          "NAARPC_RETURN_IF_ERROR", "offsetof", "alloca", "sa_handler", "BUFSIZ"]
# Names the templates use themselves (arguments, locals, members).
FIXED = ["call", "done", "deadline", "lease_", "lease", "Invoke", "n", "async_runner_",
         "transport", "host", "port", "options", "regions", "function_code", "kCodes",
         "Handle", "KernelTimeout", "service_name", "function_codes", "kOk", "naarpc_c",
         "naarpc_v_x", "gmock_a0", "args", "status", "naarpc_status", "this_"]
YAML11 = ["yes", "no", "on", "off", "NO", "Off", "y", "n", "null", "true", "~"]
PLAIN_SERVICES = ["Svc", "Math", "A", "AB", "Kitchen", "S_", "s", "Svc2"]
PLAIN_ROUTINES = ["Add", "Get", "GetX", "Get_x", "get_x", "add", "ADD", "A", "BC", "AB",
                  "C", "Run", "Do_it", "X1"]
PLAIN_PARAMS = ["a", "b", "x", "y", "in_", "out", "value", "buf", "p1", "X", "a_b", "ab"]
ERROR_NAMES = ["BAD", "FOO_1", "FOO1", "OK_", "OK", "O_K", "NULL", "EOF", "BAD__X", "A_B",
               "AB", "TOO_HOT", "K", "BAD_"]
TYPES = ["u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f32", "f64", "bytes"]
DOC_BITS = ["*/", "/*", "\\", "C:\\data\\", "??/", "\r", "\n", "\r\n", "\t", '"', "'",
            "{{ x }}", "{% if x %}", "#include <x>", "%s", "é", "日本語", "😀", "\u2028",
            "\u00a0", "\u200f", "\u200d", "  ", "word", "$", "`", "\\n", "#define X 1",
            "*/ int x; /*", "// nested", "\\\n", "end\\", "x ??/"]
DOC_REJECTED = ["\u202e", "\x07", "\x00", "\x1b"]

DIAG = re.compile(r"^(?P<file>[^:]+\.naa\.yaml):(?P<line>\d+)(?::(?P<col>\d+))?: "
                  r"(?P<sev>error|warning): ")


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def variants(name):
    """Case and underscore variants of a name."""
    out = [name.lower(), name.upper(), name[:1].swapcase() + name[1:], name.replace("_", "")]
    if len(name) > 1:
        i = 1 + len(name) // 2
        out.append(name[:i] + "_" + name[i:])
    return [v for v in out if v and (v[0].isalpha() or v[0] == "_")]


class Grammar:
    def __init__(self, rng, hostility):
        self.rng = rng
        self.hostility = hostility

    def chance(self, p):
        return self.rng.random() < p

    def hostile(self):
        return self.chance(self.hostility)

    def pick(self, seq):
        return self.rng.choice(seq)

    def doc(self):
        bits = [self.pick(DOC_BITS) for _ in range(self.rng.randint(0, 6))]
        if self.chance(0.01):
            bits.append(self.pick(DOC_REJECTED))
        if self.chance(0.2):
            bits.append("\\")  # a trailing backslash
        return "".join(bits)

    def unique(self, pool, taken):
        """A plain name not taken yet (suffixed if needed)."""
        name = self.pick(pool)
        n = 2
        while name in taken:
            name = self.pick(pool) + str(n)
            n += 1
        return name

    def service_name(self, taken):
        if self.hostile():
            pool = KEYWORDS + STD + MACROS + YAML11
            for s in taken:
                pool += ["Mock" + s, s + "Client", s + "Error", s + "Service"] + variants(s)
            return self.pick(pool)
        return self.unique(PLAIN_SERVICES, taken)

    def routine_name(self, service, routines):
        if self.hostile():
            pool = KEYWORDS + STD + MACROS + FIXED + YAML11
            pool += [service + "Client", service + "Service", service + "ClientInterface",
                     service + "Error", service + "ErrorName", service + "ErrorFromStatus",
                     "Mock" + service + "Client"]
            for r in routines:
                pool += [r + "Async", "New" + r + "Call", r + "Call", "k" + r + "FunctionCode",
                         "k" + r + "DefaultDeadline", "k" + r + "Timeout", "Handle" + r,
                         "pool_" + snake(r) + "_", "gmock_" + r, r + "Args",
                         service + r + "Regions"] + variants(r)
            return self.pick(pool)
        return self.unique(PLAIN_ROUTINES, routines + [v for r in routines for v in variants(r)])

    def param_name(self, service, routine, siblings):
        if self.hostile():
            pool = KEYWORDS + STD + MACROS + FIXED + YAML11
            pool += [routine, routine + "Call", "New" + routine + "Call", routine + "Async",
                     "k" + routine + "DefaultDeadline", "k" + routine + "FunctionCode",
                     routine + "Args", service + "ErrorName", service + "Error",
                     service + "Client", service + routine + "Regions",
                     "pool_" + snake(routine) + "_", "naarpc_x"]
            for p in siblings:
                pool += [p + "_size", "set_" + p + "_size", p + "_size_"] + variants(p)
            return self.pick(pool)
        return self.unique(PLAIN_PARAMS, siblings)

    def error_name(self, taken):
        if self.hostile():
            return self.pick(ERROR_NAMES)
        return self.unique(["BAD", "TOO_HOT", "NOT_READY", "E"], taken)

    def arity(self, limit):
        r = self.rng.random()
        if r < 0.70:
            return self.rng.randint(1, 6)
        if r < 0.93:
            return self.rng.randint(7, 20)
        if r < 0.98:
            return self.rng.randint(21, 60)
        return limit


def yaml_string(s, rng):
    """A YAML scalar for s: double-quoted (JSON escapes are YAML's), or plain
    when it is a simple word (so plain YAML 1.1 surprises are exercised)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) and rng.random() < 0.6:
        return s
    return json.dumps(s, ensure_ascii=False)


def make_idl(g, case, limit):
    rng = g.rng
    lines = []
    pkg = "fz.c%d" % case
    if g.chance(0.1):
        pkg += "." + g.pick(["std", "naarpc", "testing", "codegen", "Svc", "SvcClient",
                             "x", "int", "detail", "internal"])
    lines.append("package: " + pkg)
    if g.chance(0.5):
        lines.append("doc: " + json.dumps(g.doc(), ensure_ascii=False))
    elif g.chance(0.2):
        lines += ["doc: |", "  block */ doc \\", "  second line C:\\"]
    lines.append("services:")
    services = []
    codes_used = set()
    for _ in range(rng.randint(1, 3)):
        sname = g.service_name(services)
        services.append(sname)
        lines.append("  - name: " + yaml_string(sname, rng))
        if g.chance(0.3):
            lines.append("    doc: " + json.dumps(g.doc(), ensure_ascii=False))
        if g.chance(0.2):
            lines.append("    timeout_ms: %d" % rng.randint(1, 5000))
        errors = []  # names and codes unique per service, mostly
        error_codes = list(range(0x10, 0x80))
        rng.shuffle(error_codes)
        if g.chance(0.3):
            lines.append("    errors:")
            for _ in range(rng.randint(1, 3)):
                errors.append(g.error_name(errors))
                code = error_codes.pop() if not g.hostile() else rng.randint(0x10, 0x7f)
                lines.append("      - {name: %s, code: 0x%x, doc: %s}" % (
                    errors[-1], code, json.dumps(g.doc(), ensure_ascii=False)))
        lines.append("    routines:")
        routines = []
        for _ in range(rng.randint(1, 4)):
            rname = g.routine_name(sname, routines)
            routines.append(rname)
            code = rng.randint(1, 127)
            while code in codes_used and not g.chance(0.05):
                code = rng.randint(1, 127)
            codes_used.add(code)
            lines.append("      - name: " + yaml_string(rname, rng))
            lines.append("        code: %d" % code)
            if g.chance(0.4):
                lines.append("        doc: " + json.dumps(g.doc(), ensure_ascii=False))
            elif g.chance(0.2):
                lines += ["        doc: |", "          multi */", "          line \\"]
            if g.chance(0.2):
                lines.append("        timeout_ms: %d" % rng.randint(1, 5000))
            lines.append("        params:")
            n = g.arity(limit)
            params = []
            for i in range(n):
                pname = g.param_name(sname, rname, params)
                params.append(pname)
                direction = "in" if i == 0 else ("out" if i == n - 1 else g.pick(
                    ["in", "out", "inout"]))
                if n == 1:
                    direction = "inout"
                t = g.pick(TYPES)
                stream = direction != "inout" and g.chance(0.15)
                if stream:  # docs/idl.md "Streams": no size, chunk and window
                    size = "stream: {chunk: %d, window: %d}" % (
                        g.pick([1, 3, 64, 4096]), g.pick([1, 2, 3]))
                elif g.chance(0.5):
                    size = "size: %d" % g.pick([1, 1, 2, 4, 16])
                else:
                    size = "max: %d" % g.pick([1, 3, 8, 100])
                extra = ""
                count = int(size.split(": ")[1]) if size.startswith("size:") else 0
                if count and (count >= 2 or g.hostile()) and g.chance(0.3):
                    # docs/idl.md "Layouts": valid for `count` elements (a
                    # hostile size 1 is rejected at its line).
                    half = max(count // 2, 1)
                    forms = ["{strided: {count: %d, block: 1, stride: %d}}" % (
                                 count, g.pick([1, 2, 5])),
                             "{subarray: {shape: [%d, 3], extents: [%d, 1], offsets: [0, 2]}}" % (
                                 count, count),
                             "{subarray: {shape: [2, %d, 4], extents: [1, %d, 1], offsets: [1, 0, 3]}}"
                             % (count, count),
                             "{composite: [[%d, %d], [0, %d]]}" % (half, max(count - half, 1), half)]
                    if count % 2 == 0:
                        forms += ["{strided: {count: %d, block: 2, stride: 3, offset: 1}}" % half,
                                  "{interleaved: {repeat: [1, 1]}}"]
                    extra += ", layout: " + g.pick(forms)
                if direction == "in" and not stream and g.chance(0.1):
                    extra += ", single_send: true"
                if g.chance(0.2):
                    extra += ", doc: " + json.dumps(g.doc(), ensure_ascii=False)
                lines.append("          - {name: %s, type: %s, %s, direction: %s%s}" % (
                    yaml_string(pname, rng), t, size, direction, extra))
            windowed = not any("stream:" in l or "single_send" in l
                               for l in lines[-n:])
            if (windowed or g.hostile()) and g.chance(0.15):
                # docs/idl.md `memory_windows` (a hostile one on a routine
                # with streams or single_send is rejected at its line).
                lines.append("        memory_windows: " + g.pick(["required", "none"]))
            if g.chance(0.2) and n < limit:
                lines.append("        internal:")
                for _ in range(rng.randint(1, 2)):
                    iname = g.param_name(sname, rname, params)
                    params.append(iname)
                    lines.append("          - {name: %s, size: %d, type: %s, doc: %s}" % (
                        yaml_string(iname, rng), rng.randint(1, 64), g.pick(TYPES),
                        json.dumps(g.doc(), ensure_ascii=False)))
            if g.chance(0.15):
                lines.append("        errors:")
                name = g.error_name(errors)
                errors.append(name)
                code = error_codes.pop() if not g.hostile() else rng.randint(0x10, 0x7f)
                lines.append("          - {name: %s, code: %d}" % (name, code))
    return "\n".join(lines) + "\n"


class Case:
    def __init__(self, index, text, directory):
        self.index = index
        self.text = text
        self.dir = directory
        self.prefix = "fz/case%d" % index
        self.idl = os.path.join(directory, "x.naa.yaml")
        self.accepted = False
        self.problem = None


def run_front_end(args, case):
    os.makedirs(case.dir)
    with open(case.idl, "w", encoding="utf-8", newline="") as f:
        f.write(case.text)
    ir = os.path.join(case.dir, "x.json")
    p = subprocess.run([args.idlc, case.idl, "--include_prefix", case.prefix,
                        "--label", "case%d/x.naa.yaml" % case.index, "--out", ir],
                       capture_output=True, text=True, errors="replace")
    nlines = case.text.count("\n") + 1
    if p.returncode == 1:
        errors = 0
        for line in p.stderr.splitlines():
            if line.endswith("error(s); nothing generated"):
                continue
            m = DIAG.match(line)
            if not m:
                case.problem = "unexpected diagnostic line: %r" % line
                return
            if int(m.group("line")) > nlines:
                case.problem = "diagnostic beyond the end of the file: %r" % line
                return
            errors += m.group("sev") == "error"
        if errors == 0:
            case.problem = "exit 1 without an error at a line:\n" + p.stderr
        elif os.path.exists(ir):
            case.problem = "rejected but the IR was written"
        return
    if p.returncode != 0:
        case.problem = "naarpc_idlc exit %d:\n%s" % (p.returncode, p.stderr[-3000:])
        return
    out = os.path.join(case.dir, "out", case.prefix)
    r = subprocess.run(["/usr/bin/python3", args.gen, ir, "--out_dir", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        case.problem = "naarpc_gen.py exit %d:\n%s" % (r.returncode, r.stderr[-3000:])
        return
    case.accepted = True


def compile_cases(args, cases, workdir, tag):
    """g++ -fsyntax-only on one TU including every case's .naa.cc and _mock.h."""
    tu = os.path.join(workdir, "batch_%s.cc" % tag)
    with open(tu, "w") as f:
        for c in cases:
            f.write('#include "%s/x.naa.cc"\n' % c.prefix)
            f.write('#include "%s/x.naa_mock.h"\n' % c.prefix)
    cmd = [args.cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
           "-fmax-errors=20"]
    for c in cases:
        cmd += ["-I", os.path.join(c.dir, "out")]
    for root in args.include_root:
        cmd += ["-I", root]
    cmd.append(tu)
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return p.returncode == 0, p.stderr


def find_culprits(args, cases, workdir, tag):
    ok, err = compile_cases(args, cases, workdir, tag)
    if ok:
        return []
    if len(cases) == 1:
        cases[0].problem = "accepted, but the generated code does not compile:\n" + err[:4000]
        return cases
    mid = len(cases) // 2
    return (find_culprits(args, cases[:mid], workdir, tag + "a") +
            find_culprits(args, cases[mid:], workdir, tag + "b"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idlc", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--include_root", action="append", default=[],
                    help="where the runtime and support headers are (repeatable)")
    ap.add_argument("--cxx", default="/usr/bin/g++")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--hostility", type=float, default=0.12,
                    help="probability that a name is drawn from the hostile pools")
    ap.add_argument("--limit", type=int, default=254,
                    help="the parameter limit (255 regions with the metadata region)")
    ap.add_argument("--keep", help="keep the cases in this directory")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("generator_fuzz: seed %d, %d cases" % (seed, args.cases), flush=True)

    workdir = args.keep or tempfile.mkdtemp(prefix="generator_fuzz_")
    os.makedirs(workdir, exist_ok=True)
    cases = []
    for i in range(args.cases):
        # Some files without hostile names at all, some with many.
        g = Grammar(rng, rng.choice([0.0, args.hostility / 2, args.hostility, args.hostility * 2]))
        cases.append(Case(i, make_idl(g, i, args.limit), os.path.join(workdir, "case%d" % i)))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda c: run_front_end(args, c), cases))
    accepted = [c for c in cases if c.accepted]
    batches = [accepted[i:i + args.batch] for i in range(0, len(accepted), args.batch)]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda ib: find_culprits(args, ib[1], workdir, str(ib[0])),
                      enumerate(batches)))
    failed = [c for c in cases if c.problem]
    widest = max((c.text.count("direction:") for c in accepted), default=0)
    streams = sum(c.text.count("stream:") for c in accepted)
    layouts = sum(c.text.count("layout:") for c in accepted)
    print("generator_fuzz: %d accepted (compiled), %d rejected at a line, %d failed; "
          "most parameters in an accepted file: %d; stream parameters in accepted files: %d; "
          "parameters with layouts in accepted files: %d"
          % (len(accepted) - len([c for c in failed if c.accepted]),
             len(cases) - len(accepted) - len([c for c in failed if not c.accepted]),
             len(failed), widest, streams, layouts))
    for c in failed[:5]:
        print("\n==== case %d (seed %d) ====\n%s\n---- IDL ----\n%s"
              % (c.index, seed, c.problem, c.text[:6000]))
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
