"""Unit tests of the naarpc generator: every validation error names
file:line, the field and what is wrong; exit status 1, no traceback."""
import os
import subprocess
import sys
import tempfile
import textwrap
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
sys.path.insert(0, os.path.join(ROOT, "codegen"))
import naarpc_gen  # noqa: E402

PATH = "t.naa.yaml"


def routine(name="Add", code=1, params=None, extra=""):
    params = params or (
        "          - {name: a, type: f32, size: 4, direction: in}\n"
        "          - {name: out, type: f32, size: 4, direction: out}\n")
    return ("      - name: %s\n        code: %s\n%s        params:\n%s"
            % (name, code, extra, params))


def idl(routines=None, service_extra="", services_extra="", package="t.pkg"):
    return ("package: %s\nservices:\n  - name: Svc\n%s    routines:\n%s%s"
            % (package, service_extra, routines or routine(), services_extra))


class ErrorTest(unittest.TestCase):
    def errors(self, text, n=None):
        result, diags = naarpc_gen.parse(PATH, text)
        self.assertIsNone(result, "expected errors, IDL was accepted:\n" + text)
        msgs = [str(e) for e in diags.errors]
        if n is not None:
            self.assertEqual(len(msgs), n, msgs)
        return msgs

    def assertError(self, text, line, field, fragment):
        msgs = self.errors(text)
        prefix = "%s:%d: error: %s:" % (PATH, line, field)
        for m in msgs:
            if m.startswith(prefix) and fragment in m:
                return
        self.fail("no error starting %r containing %r in:\n%s" % (prefix, fragment,
                                                                 "\n".join(msgs)))

    def test_valid_idl_is_accepted(self):
        result, diags = naarpc_gen.parse(PATH, idl())
        self.assertEqual([str(e) for e in diags.errors], [])
        self.assertEqual(result.services[0].routines[0].code, 1)
        self.assertEqual(result.namespace, "t::pkg")

    def test_duplicate_function_code(self):
        text = idl(routine("Add", 1) + routine("Sub", 1))
        self.assertError(text, 11, "services[0].routines[1].code",
                         "function code 1 of routine 'Sub' is already used by 'Add'")

    def test_function_code_out_of_range(self):
        self.assertError(idl(routine(code=128)), 6, "services[0].routines[0].code",
                         "function code 128 is out of range 1..127")
        self.assertError(idl(routine(code=0)), 6, "services[0].routines[0].code",
                         "out of range 1..127")

    def test_function_code_not_an_integer(self):
        self.assertError(idl(routine(code="one")), 6, "services[0].routines[0].code",
                         "expected integer, got string 'one'")

    def test_unknown_type(self):
        p = "          - {name: a, type: float128, size: 4, direction: in}\n" \
            "          - {name: out, type: f32, size: 4, direction: out}\n"
        self.assertError(idl(routine(params=p)), 8, "services[0].routines[0].params[0].type",
                         "string 'float128' is not one of: u8, u16")

    def test_zero_size(self):
        p = "          - {name: a, type: f32, size: 0, direction: in}\n" \
            "          - {name: out, type: f32, max: -3, direction: out}\n"
        msgs = self.errors(idl(routine(params=p)))
        self.assertTrue(any(m.startswith("t.naa.yaml:8: error: services[0].routines[0]."
                                         "params[0].size: parameter 'a' has size 0") for m in msgs),
                        msgs)
        self.assertTrue(any("params[1].max: parameter 'out' has max -3" in m for m in msgs), msgs)

    def test_size_and_max(self):
        p = "          - {name: a, type: f32, size: 4, max: 8, direction: in}\n" \
            "          - {name: out, type: f32, direction: out}\n"
        msgs = self.errors(idl(routine(params=p)), n=2)
        self.assertIn("t.naa.yaml:8: error: services[0].routines[0].params[0]: give exactly "
                      "one of 'size'", msgs[0])
        self.assertIn("t.naa.yaml:9: error: services[0].routines[0].params[1]: give exactly",
                      msgs[1])

    def test_oversized_parameter(self):
        p = "          - {name: a, type: f64, size: 134217729, direction: in}\n" \
            "          - {name: out, type: u8, max: 1073741824, direction: out}\n"
        msgs = self.errors(idl(routine(params=p)))
        self.assertTrue(any("t.naa.yaml:8: error: services[0].routines[0].params[0].size: "
                            "parameter 'a' needs 1073741832 bytes" in m for m in msgs), msgs)
        self.assertTrue(any("t.naa.yaml:9:" in m and "including the 8-byte length header" in m
                            for m in msgs), msgs)

    def test_one_gib_parameter_is_fine(self):
        p = "          - {name: a, type: u8, size: 1073741824, direction: in}\n" \
            "          - {name: out, type: u8, size: 1, direction: out}\n"
        result, diags = naarpc_gen.parse(PATH, idl(routine(params=p)))
        self.assertEqual([str(e) for e in diags.errors], [])

    def test_total_over_budget(self):
        p = "".join("          - {name: a%d, type: u8, size: 1073741824, direction: in}\n" % i
                    for i in range(4))
        p += "          - {name: out, type: u8, size: 1, direction: out}\n"
        self.assertError(idl(routine(params=p)), 5, "services[0].routines[0]",
                         "needs 4294967297 bytes of regions in total")

    def test_no_inputs(self):
        p = "          - {name: out, type: f32, size: 4, direction: out}\n"
        self.assertError(idl(routine(params=p)), 8, "services[0].routines[0].params",
                         "routine 'Add' has no input parameter")

    def test_no_outputs(self):
        p = "          - {name: a, type: f32, size: 4, direction: in}\n"
        self.assertError(idl(routine(params=p)), 8, "services[0].routines[0].params",
                         "routine 'Add' has no output parameter")

    def test_too_many_regions(self):
        p = "".join("          - {name: a%d, type: u8, size: 1, direction: in}\n" % i
                    for i in range(254))
        p += "          - {name: out, type: u8, size: 1, direction: out}\n"
        self.assertError(idl(routine(params=p)), 5, "services[0].routines[0]",
                         "needs 256 regions (with the metadata region); one MRSP message "
                         "carries at most 255")

    def test_more_regions_than_naa_default_warns(self):
        p = "".join("          - {name: a%d, type: u8, size: 1, direction: in}\n" % i
                    for i in range(32))
        p += "          - {name: out, type: u8, size: 1, direction: out}\n"
        result, diags = naarpc_gen.parse(PATH, idl(routine(params=p)))
        self.assertIsNotNone(result)
        self.assertEqual(len(diags.warnings), 1)
        self.assertIn("t.naa.yaml:5: warning: services[0].routines[0]: routine 'Add' needs 34 "
                      "regions", diags.warnings[0])

    def test_cpp_keyword_names(self):
        p = "          - {name: class, type: f32, size: 4, direction: in}\n" \
            "          - {name: out, type: f32, size: 4, direction: out}\n"
        self.assertError(idl(routine(params=p)), 8, "services[0].routines[0].params[0].name",
                         "'class' is a C++ keyword")
        self.assertError(idl(routine(name="delete")), 5, "services[0].routines[0].name",
                         "'delete' is a C++ keyword")
        self.assertError(idl(package="t.new"), 1, "package", "'new' is a C++ keyword")

    def test_reserved_names(self):
        p = "          - {name: naarpc_x, type: f32, size: 4, direction: in}\n" \
            "          - {name: deadline, type: f32, size: 4, direction: out}\n"
        text = idl(routine(params=p))
        self.assertError(text, 8, "services[0].routines[0].params[0].name",
                         "prefix 'naarpc_' reserved for generated code")
        self.assertError(text, 9, "services[0].routines[0].params[1].name",
                         "'deadline' is reserved")
        p2 = "          - {name: a__b, type: f32, size: 4, direction: in}\n" \
             "          - {name: out, type: f32, size: 4, direction: out}\n"
        self.assertError(idl(routine(params=p2)), 8, "services[0].routines[0].params[0].name",
                         "reserved in C++ (double underscore")
        self.assertError(idl(routine(name="Handle")), 5, "services[0].routines[0].name",
                         "clashes with a member of the generated NAA handler")

    def test_bad_identifier(self):
        self.assertError(idl(routine(name="'9lives'")), 5, "services[0].routines[0].name",
                         "'9lives' does not match")

    def test_duplicate_routine_name(self):
        self.assertError(idl(routine("Add", 1) + routine("Add", 2)), 10,
                         "services[0].routines[1].name", "duplicate routine name 'Add'")

    def test_generated_member_clash(self):
        self.assertError(idl(routine("Add", 1) + routine("AddAsync", 2)), 10,
                         "services[0].routines[1].name",
                         "routine 'AddAsync' generates C++ member 'AddAsync'")

    def test_duplicate_parameter_and_internal_name(self):
        p = "          - {name: a, type: f32, size: 4, direction: in}\n" \
            "          - {name: a, type: f32, size: 4, direction: out}\n"
        self.assertError(idl(routine(params=p)), 9, "services[0].routines[0].params[1].name",
                         "duplicate name 'a' (first at line 8)")
        extra = "        internal:\n          - {name: out, size: 8}\n"
        self.assertError(idl(routine(extra=extra)), 8,
                         "services[0].routines[0].internal[0].name",
                         "duplicate name 'out' (first at line 11)")

    def test_duplicate_service_generated_names(self):
        text = idl(services_extra="  - name: MockSvc\n    routines:\n" + routine())
        self.assertError(text, 10, "services[1].name",
                         "service 'MockSvc' generates C++ name 'MockSvcClient', which service "
                         "'Svc' (line 3) also generates")

    def test_duplicate_service_name(self):
        text = idl(services_extra="  - name: Svc\n    routines:\n" + routine())
        self.assertError(text, 10, "services[1].name", "generates C++ name 'SvcClientInterface'")

    def test_bad_error_codes(self):
        extra = ("    errors:\n"
                 "      - {name: LOW, code: 0x05}\n"
                 "      - {name: HIGH, code: 0x80}\n"
                 "      - {name: lower_case, code: 0x11}\n")
        text = idl(service_extra=extra)
        self.assertError(text, 5, "services[0].errors[0].code", "5 is below the minimum 16 (0x10)")
        self.assertError(text, 6, "services[0].errors[1].code",
                         "128 is above the maximum 127 (0x7f)")
        self.assertError(text, 7, "services[0].errors[2].name", "'lower_case' does not match")

    def test_duplicate_error_code_and_name(self):
        extra = "    errors:\n      - {name: BAD, code: 0x10}\n"
        rextra = ("        errors:\n"
                  "          - {name: WORSE, code: 0x10}\n"
                  "          - {name: BAD, code: 0x11}\n"
                  "          - {name: OK, code: 0x12}\n")
        text = idl(routine(extra=rextra), service_extra=extra)
        self.assertError(text, 10, "services[0].routines[0].errors[0].code",
                         "error code 0x10 of 'WORSE' is already used by 'BAD' (line 5)")
        self.assertError(text, 11, "services[0].routines[0].errors[1].name",
                         "duplicate error name 'BAD' (first at line 5)")
        self.assertError(text, 12, "services[0].routines[0].errors[2].name",
                         "'OK' is reserved")

    def test_missing_and_unknown_fields(self):
        p = "          - {name: a, type: f32, size: 4}\n" \
            "          - {name: out, type: f32, size: 4, direction: out, color: red}\n"
        text = idl(routine(params=p))
        self.assertError(text, 8, "services[0].routines[0].params[0].direction",
                         "required field is missing")
        self.assertError(text, 9, "services[0].routines[0].params[1].color",
                         "unknown field (allowed: name, type, size")
        self.assertError("services: []\n", 1, "package", "required field is missing")

    def test_single_send_only_for_inputs(self):
        p = "          - {name: a, type: f32, size: 4, direction: in}\n" \
            "          - {name: out, type: f32, size: 4, direction: out, single_send: true}\n"
        self.assertError(idl(routine(params=p)), 9,
                         "services[0].routines[0].params[1].single_send",
                         "only 'in' parameters can be single_send")

    def test_naa_address_too_large(self):
        extra = "        internal:\n          - {name: s, size: 8, naa_address: 0x100000000000000}\n"
        self.assertError(idl(routine(extra=extra)), 8,
                         "services[0].routines[0].internal[0].naa_address",
                         "does not fit the 7-byte MRSP field")

    def test_yaml_syntax_error(self):
        msgs = self.errors("package: x\nservices: [\n  - name: {\n", n=1)
        self.assertRegex(msgs[0], r"^t\.naa\.yaml:\d+: error: YAML syntax error")

    def test_duplicate_yaml_key(self):
        self.assertError("package: a\npackage: b\nservices: []\n", 2, "package",
                         "duplicate key 'package' (first at line 1)")

    def test_document_not_a_mapping(self):
        self.assertError("- 1\n- 2\n", 1, "<document>", "expected object, got a list")

    def test_empty_routine_list(self):
        self.assertError("package: a\nservices:\n  - name: S\n    routines: []\n", 4,
                         "services[0].routines", "needs at least 1 entry")


class CommandLineTest(unittest.TestCase):
    def run_gen(self, text, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.naa.yaml")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run(["/usr/bin/python3", GEN, path, "--out_dir", d] + list(args),
                               capture_output=True, text=True)
            files = sorted(os.listdir(d))
        return p, path, files

    def test_invalid_idl_exits_1_without_traceback(self):
        p, path, files = self.run_gen(idl(routine(code=300)))
        self.assertEqual(p.returncode, 1)
        self.assertNotIn("Traceback", p.stderr)
        self.assertIn("%s:6: error: services[0].routines[0].code: function code 300" % path,
                      p.stderr)
        self.assertEqual(files, ["x.naa.yaml"])  # nothing generated

    def test_all_errors_reported_at_once(self):
        p, _, _ = self.run_gen(idl(routine("A", 1) + routine("B", 1) + routine("C", 200)))
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.count(": error: "), 2, p.stderr)

    def test_valid_idl_generates_three_files(self):
        p, _, files = self.run_gen(idl())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(files, ["x.naa.cc", "x.naa.h", "x.naa.yaml", "x.naa_mock.h"])

    def test_missing_file(self):
        p = subprocess.run(["/usr/bin/python3", GEN, "/nonexistent/y.naa.yaml", "--check"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("/nonexistent/y.naa.yaml: error: cannot read", p.stderr)
        self.assertNotIn("Traceback", p.stderr)


if __name__ == "__main__":
    unittest.main()
