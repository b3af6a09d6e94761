"""Tests of the generator pipeline: the front-end (idl/naarpc_idlc) reports
bad IDLs as file:line:col diagnostics and writes nothing; the renderer
(codegen/naarpc_gen.py) turns the IR into code where every doc is a safe
comment, header guards are valid and mocks exist for every arity. The
validation rules themselves are tested in C++ (//tests/idl:load_test)."""
import json
import os
import subprocess
import tempfile
import unittest


def _find_root():
    # Under Bazel: the runfiles tree; else the source tree (two levels up).
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(os.environ.get("TEST_SRCDIR", ""), "naarpc"),
                 os.path.join(here, "..", "..")):
        if os.path.exists(os.path.join(cand, "codegen", "naarpc_gen.py")):
            return os.path.abspath(cand)
    raise RuntimeError("codegen/naarpc_gen.py not found")


ROOT = _find_root()
GEN = os.path.join(ROOT, "codegen", "naarpc_gen.py")
IDLC = os.path.join(ROOT, "idl", "naarpc_idlc")
if not os.path.exists(IDLC):  # outside Bazel: the last build's binary
    IDLC = os.path.join(ROOT, ".bazel", "bin", "idl", "naarpc_idlc")


def generate_files(idl_path, out_dir, include_prefix, label=None):
    """naarpc_idlc then naarpc_gen.py; returns the CompletedProcess of the step
    that failed, or of the renderer (with the warnings of both)."""
    ir = os.path.join(out_dir, os.path.basename(idl_path) + ".json")
    args = [IDLC, idl_path, "--include_prefix", include_prefix, "--out", ir]
    if label:
        args += ["--label", label]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return p
    r = subprocess.run(["/usr/bin/python3", GEN, ir, "--out_dir", out_dir],
                       capture_output=True, text=True)
    r.stderr = p.stderr + r.stderr  # the front-end's warnings too
    return r


def routine(name="Add", code=1, params=None, extra=""):
    params = params or (
        "          - {name: a, type: f32, size: 4, direction: in}\n"
        "          - {name: out, type: f32, size: 4, direction: out}\n")
    return ("      - name: %s\n        code: %s\n%s        params:\n%s"
            % (name, code, extra, params))


def idl(routines=None, service_extra="", package="t.pkg", file_extra=""):
    return ("package: %s\n%sservices:\n  - name: Svc\n%s    routines:\n%s"
            % (package, file_extra, service_extra, routines or routine()))


class GenCase(unittest.TestCase):
    def generate(self, text, include_prefix="t/pkg", name="x.naa.yaml"):
        """Returns (process, {file: content}) for `text` as an IDL file."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, name)
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            out = os.path.join(d, "out")
            os.mkdir(out)
            p = generate_files(path, out, include_prefix)
            files = {}
            for n in os.listdir(out):
                with open(os.path.join(out, n), encoding="utf-8") as f:
                    files[n] = f.read()
        return p, files


class PipelineTest(GenCase):
    def test_invalid_idl_exits_1_and_writes_nothing(self):
        p, files = self.generate(idl(routine(code=300)))
        self.assertEqual(p.returncode, 1)
        self.assertNotIn("Traceback", p.stderr)
        self.assertRegex(p.stderr, r"x\.naa\.yaml:6:15: error: services\[0\]\.routines\[0\]\.code: "
                                   r"function code 300 is out of range 1\.\.127")
        self.assertIn("1 error(s); nothing generated", p.stderr)
        self.assertEqual(files, {})

    def test_all_errors_reported_at_once(self):
        p, _ = self.generate(idl(routine("A", 1) + routine("B", 1) + routine("C", 200)))
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.count(": error: "), 2, p.stderr)

    def test_valid_idl_generates_three_files(self):
        p, files = self.generate(idl())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(files), ["x.naa.cc", "x.naa.h", "x.naa.yaml.json",
                                         "x.naa_mock.h"])
        ir = json.loads(files["x.naa.yaml.json"])
        r = ir["services"][0]["routines"][0]
        self.assertEqual(r["cpp"]["pool_member"], "pool_add_")
        self.assertEqual(r["cpp"]["routine_struct"], "SvcAddRoutine")
        self.assertEqual(r["params"][0]["cpp"]["client_type"], "std::span<const float>")
        self.assertEqual(ir["files"]["header"], "t/pkg/x.naa.h")

    def test_unreadable_file_is_an_io_problem(self):
        # Exit 2 (usage or I/O, docs/idl.md), not 1 (an invalid IDL).
        p = subprocess.run([IDLC, "/nonexistent/y.naa.yaml", "--check"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("/nonexistent/y.naa.yaml: error: cannot read file", p.stderr)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.naa.yaml")
            os.mkdir(path)
            p = subprocess.run([IDLC, path, "--check"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("x.naa.yaml: error: cannot read file: it is a directory", p.stderr)

    def test_file_name_must_end_in_naa_yaml(self):
        p, files = self.generate(idl(), name="x.yaml")
        self.assertEqual(p.returncode, 2)
        self.assertIn("must end in .naa.yaml", p.stderr)
        self.assertEqual(files, {})

    def test_renderer_rejects_what_is_not_an_ir(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.json")
            with open(bad, "w") as f:
                f.write('{"format": "something else"}')
            p = subprocess.run(["/usr/bin/python3", GEN, bad, "--out_dir", d],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertIn("not a naarpc IR", p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertEqual(os.listdir(d), ["bad.json"])

    def test_renderer_rejects_an_incomplete_ir(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.json")
            with open(bad, "w") as f:
                f.write('{"format": "naarpc-idl-ir/1", "files": {}}')
            p = subprocess.run(["/usr/bin/python3", GEN, bad, "--out_dir", d],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("not an IR this generator can render", p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertEqual(os.listdir(d), ["bad.json"])


HOSTILE_DOCS = (
    'package: t.pkg\n'
    'doc: |\n'
    '  File doc, line one.\n'
    '  A path C:\\data\\\n'
    '  closes */ a comment\n'
    'services:\n'
    '  - name: Svc\n'
    '    doc: "Ends in a backslash \\\\"\n'
    '    errors:\n'
    '      - {name: BAD, code: 0x10, doc: "two\\nlines and */ and \\\\"}\n'
    '    routines:\n'
    '      - name: Add\n'
    '        code: 1\n'
    '        doc: "first\\r\\nsecond\\rthird \\\\"\n'
    '        params:\n'
    '          - {name: a, type: f32, size: 4, direction: in, doc: "C:\\\\data\\\\"}\n'
    '          - {name: out, type: f32, size: 4, direction: out, doc: "x ??/"}\n'
    '        internal:\n'
    '          - {name: s, size: 4, doc: "trail \\\\\\n next"}\n'
)


class DocTest(GenCase):
    def test_every_doc_is_a_safe_comment(self):
        p, files = self.generate(HOSTILE_DOCS)
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in ("x.naa.h", "x.naa.cc", "x.naa_mock.h"):
            for n, line in enumerate(files[name].split("\n"), 1):
                self.assertFalse(line.rstrip().endswith("\\") or line.rstrip().endswith("??/"),
                                 "%s:%d continues onto the next line: %r" % (name, n, line))
                self.assertNotIn("\r", line)
        h = files["x.naa.h"]
        # The file doc, after the banner; every line a comment.
        self.assertIn("//\n// File doc, line one.\n// A path C:\\data\\ //\n"
                      "// closes */ a comment\n#ifndef", h)
        self.assertIn("// Ends in a backslash \\ //\n", h)
        self.assertIn("kBad = 0x10,  // two lines and */ and \\ //\n", h)
        self.assertIn("  // Add (function code 1): first\n  // second\n  // third \\ //\n", h)
        self.assertIn("  //   a: in, 4 x f32; C:\\data\\ //\n", h)
        self.assertIn("  //   out: out, 4 x f32; x ??/ //\n", h)
        self.assertIn("  //   s: internal, 4 x u8; trail \\ next\n", h)

    def test_header_guard_for_any_package_path(self):
        p, files = self.generate(idl(), include_prefix="3d/models")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("#ifndef NAARPC_3D_MODELS_X_NAA_H_\n", files["x.naa.h"])
        self.assertIn("#ifndef NAARPC_3D_MODELS_X_NAA_MOCK_H_\n", files["x.naa_mock.h"])
        self.assertIn('#include "3d/models/x.naa.h"', files["x.naa.cc"])
        p, files = self.generate(idl(), include_prefix="a-b/_c")
        self.assertIn("#ifndef A_B_C_X_NAA_H_\n", files["x.naa.h"])


class MockTest(GenCase):
    def params(self, n):
        return "".join("          - {name: p%d, type: u8, size: 1, direction: in}\n" % i
                       for i in range(n - 1)) + \
            "          - {name: out, type: u8, size: 1, direction: out}\n"

    def test_gmock_arity_limit_packs_arguments(self):
        text = idl(routine("Narrow", 1, self.params(13)) + routine("Wide", 2, self.params(14)))
        p, files = self.generate(text)
        self.assertEqual(p.returncode, 0, p.stderr)
        mock = files["x.naa_mock.h"]
        # 13 parameters + done + deadline = 15 arguments: MOCK_METHOD as is.
        self.assertIn("MOCK_METHOD(naarpc::Status, Narrow,\n", mock)
        # 14: packed into a tuple.
        self.assertIn("using WideArgs = std::tuple<\n      uint8_t,\n", mock)
        self.assertIn("MOCK_METHOD(naarpc::Status, Wide, (WideArgs args));", mock)
        self.assertIn("return Wide(WideArgs(p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, "
                      "p12, out, deadline));", mock)

    def test_the_largest_routine_is_accepted(self):
        p, files = self.generate(idl(routine("Big", 1, self.params(254))))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("warning: services[0].routines[0]: routine 'Big' needs 255 regions",
                      p.stderr)
        self.assertIn("using BigArgs = std::tuple<", files["x.naa_mock.h"])


class StreamTest(GenCase):
    STREAMS = ("          - {name: k, type: u32, size: 1, direction: in}\n"
               "          - {name: data, type: f32, direction: in, stream: {chunk: 256, window: 4}}\n"
               "          - {name: out, type: u16, direction: out, stream: {chunk: 3, window: 1}}\n")

    def test_routines_without_streams_have_no_stream_code(self):
        p, files = self.generate(idl())
        self.assertEqual(p.returncode, 0, p.stderr)
        for name, text in files.items():
            if name.endswith(".json"):
                continue  # the IR (fields for streams: null, false, 0)
            for word in ("Stream", "stream", "naarpc_s_"):
                self.assertNotIn(word, text.replace("naarpc/impl/codegen_support.h", ""), name)

    def test_stream_parameters(self):
        p, files = self.generate(idl(routine("Scale", 1, self.STREAMS)))
        self.assertEqual(p.returncode, 0, p.stderr)
        h, cc, mock = files["x.naa.h"], files["x.naa.cc"], files["x.naa_mock.h"]
        # Client: the span/vector form and the source/sink overload.
        self.assertIn("      std::span<const float> data,\n      std::vector<uint16_t>* out,", h)
        self.assertIn("      naarpc::codegen::StreamSource<float>& data,\n"
                      "      naarpc::codegen::StreamSink<uint16_t>& out,", h)
        self.assertIn(".chunk_bytes = 1024, .window = 4}", cc)
        self.assertIn(".chunk_bytes = 6, .window = 1}", cc)
        self.assertIn("engine_.RunBlocking([=, this, &data, &out] {", cc)
        # Skeleton: readers and writers, the host's streams checked.
        self.assertIn("naarpc::codegen::StreamReader<float>& data,", h)
        self.assertIn("naarpc::codegen::StreamWriter<uint16_t>& out)", h)
        self.assertIn("naarpc::codegen::RegionsMatch(call, SvcScaleRoutine::naarpc_desc)", cc)
        self.assertIn("naarpc::codegen::StreamReader<float> naarpc_s_data(*call.streams[0]);", cc)
        # Mocks of both overloads.
        self.assertIn("// The streaming form of Scale (sources and sinks).", mock)

    def test_the_ir_describes_streams(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.naa.yaml")
            with open(path, "w") as f:
                f.write(idl(routine("Scale", 1, self.STREAMS)))
            ir = os.path.join(d, "x.json")
            subprocess.run([IDLC, path, "--include_prefix", "t", "--out", ir], check=True)
            with open(ir) as f:
                r = json.load(f)["services"][0]["routines"][0]
        self.assertTrue(r["has_streams"])
        self.assertEqual(r["stream_count"], 2)
        k, data, out = r["params"]
        self.assertIsNone(k["stream"])
        self.assertEqual(data["stream"], {"chunk": 256, "window": 4, "index": 0,
                                          "chunk_bytes": 1024})
        self.assertEqual(out["stream"]["index"], 1)
        self.assertEqual(data["region_bytes"], 4096)
        self.assertEqual(data["cpp"]["stream_client_type"],
                         "naarpc::codegen::StreamSource<float>&")
        self.assertEqual(k["naa_index"], 0)


if __name__ == "__main__":
    unittest.main()
