"""Generated code includes only naarpc's public headers (include/naarpc/),
and public headers include only public headers: a user's project sees
nothing of runtime/ (issue 15).

Checked over the committed goldens (tests/codegen/golden), the files that
naarpc_cc_library generates (//tests/codegen:golden_naa, given as arguments)
and include/naarpc/ itself; docs/using.md's table of public headers lists
exactly include/naarpc/ (issue 27)."""
import glob
import os
import re
import sys
import unittest

ROOT = os.getcwd()  # the runfiles root (py_test.sh)
PUBLIC_DIR = os.path.join(ROOT, "include", "naarpc")
IMPL_DIR = os.path.join(PUBLIC_DIR, "impl")
GOLDEN_DIR = os.path.join(ROOT, "tests", "codegen", "golden")
_QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

GENERATED = []  # paths relative to ROOT, from the command line


def quoted_includes(path):
    with open(path, encoding="utf-8") as f:
        return _QUOTED.findall(f.read())


def user_headers():
    """include/naarpc/*.h: the user API."""
    return {"naarpc/" + n for n in os.listdir(PUBLIC_DIR) if n.endswith(".h")}


def impl_headers():
    """include/naarpc/impl/*.h: what only generated code needs."""
    return {"naarpc/impl/" + n for n in os.listdir(IMPL_DIR) if n.endswith(".h")}


def public_headers():
    return user_headers() | impl_headers()


def non_public(path, allowed_own):
    """The quoted includes of `path` that are neither public headers nor the
    generated file's own header (`allowed_own(include)`)."""
    public = public_headers()
    return [i for i in quoted_includes(path) if i not in public and not allowed_own(i)]


def own_generated_header(include):
    # A generated .naa.cc / _mock.h includes its own .naa.h by package path.
    return include.endswith(".naa.h")


class PublicHeadersTest(unittest.TestCase):
    def test_public_headers_include_only_public_headers(self):
        for name in sorted(public_headers()):
            with self.subTest(header=name):
                self.assertEqual(
                    non_public(os.path.join(ROOT, "include", name), lambda _: False), [],
                    "include/%s includes a header outside include/naarpc/" % name)

    def test_user_headers_do_not_include_impl(self):
        # The user API stands without the code-generation plumbing.
        self.assertTrue(impl_headers())
        for name in sorted(user_headers()):
            with self.subTest(header=name):
                self.assertEqual(
                    [i for i in quoted_includes(os.path.join(ROOT, "include", name))
                     if i.startswith("naarpc/impl/")], [],
                    "include/%s includes naarpc/impl/" % name)

    def test_user_headers_stand_alone(self):
        # A user header needs nothing of impl/ beyond what it includes: no
        # name of naarpc::codegen (impl/'s namespace) appears in one.
        for name in sorted(user_headers()):
            with self.subTest(header=name):
                with open(os.path.join(ROOT, "include", name), encoding="utf-8") as f:
                    code = re.sub(r"//.*", "", f.read())
                self.assertNotIn("codegen::", code, "include/%s uses naarpc/impl/" % name)

    def test_examples_and_docs_use_only_user_headers(self):
        # What users copy (examples/, the code blocks of README.md and
        # docs/*.md) includes nothing of impl/: generated headers bring it.
        files = [os.path.join(ROOT, "README.md")]
        files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        for d, _, names in os.walk(os.path.join(ROOT, "examples")):
            files += [os.path.join(d, n) for n in names if n.endswith((".cc", ".h"))]
        self.assertTrue(any(f.endswith(".cc") for f in files), "no examples found")
        for path in files:
            with self.subTest(file=os.path.relpath(path, ROOT)):
                self.assertEqual([i for i in quoted_includes(path)
                                  if i.startswith("naarpc/impl/")], [],
                                 "%s includes naarpc/impl/" % os.path.relpath(path, ROOT))

    def test_wire_helpers_are_internal(self):
        # Byte-order helpers and stream-frame codecs stay in runtime/wire/.
        with open(os.path.join(PUBLIC_DIR, "protocol.h"), encoding="utf-8") as f:
            text = f.read()
        for name in ("PutBe64", "GetBe64", "EncodeStreamChunk", "DecodeStreamFrame"):
            self.assertNotIn(name, text)

    def test_goldens_include_only_public_headers(self):
        names = sorted(os.listdir(GOLDEN_DIR))
        self.assertTrue(names)
        for name in names:
            with self.subTest(golden=name):
                self.assertEqual(
                    non_public(os.path.join(GOLDEN_DIR, name), own_generated_header), [],
                    "golden/%s includes a non-public header" % name)

    def test_macro_outputs_include_only_public_headers(self):
        self.assertTrue(GENERATED, "no generated files given")
        exts = {os.path.splitext(p)[1] for p in GENERATED}
        self.assertEqual(exts, {".h", ".cc"})
        for rel in GENERATED:
            with self.subTest(generated=rel):
                self.assertEqual(non_public(os.path.join(ROOT, rel), own_generated_header), [],
                                 "%s includes a non-public header" % rel)

    def test_using_md_lists_every_public_header(self):
        # docs/using.md's table of public headers names each of them (and no
        # other), and naarpc.h includes all but those the table says it leaves
        # to generated code.
        with open(os.path.join(ROOT, "docs", "using.md"), encoding="utf-8") as f:
            rows = [l for l in f.read().splitlines() if l.startswith("| `naarpc/")]
        listed = [re.match(r"\| `(naarpc/[\w./]+\.h)`", r).group(1) for r in rows]
        self.assertEqual(sorted(listed), sorted(public_headers()),
                         "docs/using.md's tables of public headers vs include/naarpc/")
        umbrella = [r for r in rows if r.startswith("| `naarpc/naarpc.h`")][0]
        left_out = set(re.findall(r"`(\w+\.h)`", umbrella.split("|")[2]))
        self.assertEqual(
            set(quoted_includes(os.path.join(PUBLIC_DIR, "naarpc.h"))),
            user_headers() - {"naarpc/naarpc.h"} - {"naarpc/" + h for h in left_out},
            "naarpc/naarpc.h vs docs/using.md's 'all of the below except ...'")

    def test_checker_rejects_internal_headers(self):
        # The check itself: an internal include is reported.
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
            f.write('#include "naarpc/status.h"\n#include "runtime/wire/mrsp.h"\n'
                    '#include <vector>\n#include "codegen/support/x.h"\n')
        try:
            self.assertEqual(non_public(f.name, own_generated_header),
                             ["runtime/wire/mrsp.h", "codegen/support/x.h"])
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    GENERATED.extend(sys.argv[1:])
    unittest.main(argv=sys.argv[:1])
