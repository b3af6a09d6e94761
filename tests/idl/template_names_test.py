"""The C++ clash analysis (idl/cpp/clash.cc) reserves the names the
templates (codegen/templates/*.j2) declare themselves; it copies them by
hand, so this test fails when the two drift apart (issue 23: clash.cc still
reserved `async_runner_` after the template's member became `engine_`).

Checked: the members the templates spell out (identifiers ending in '_'
that are neither templated nor prefixed 'naarpc_', which user names cannot
take) are exactly the members clash.cc declares as fixed."""
import glob
import os
import re
import unittest

ROOT = os.getcwd()  # the runfiles root (py_test.sh)
TEMPLATES = sorted(glob.glob(os.path.join(ROOT, "codegen", "templates", "*.j2")))
CLASH = os.path.join(ROOT, "idl", "cpp", "clash.cc")
CLASH_H = os.path.join(ROOT, "idl", "cpp", "clash.h")

# An identifier ending in '_' not glued to a Jinja expression
# ("{{ p.name }}_size_", "set_{{ p.name }}_size").
_MEMBER = re.compile(r"(?<![\w}])([a-z][a-z0-9_]*_)(?![\w{])")
# A fixed declaration in clash.cc: m.Declare(scope, "name_", kFixed, ...).
_DECLARED = re.compile(r'Declare\([^,]+,\s*"([a-z][a-z0-9_]*_)",\s*kFixed')
# The channel client's members, declared from a list in clash.h.
_CHANNEL_LIST = re.compile(r"kChannelClientMembers\[\]\s*=\s*\{(.*?)\}", re.S)


def template_members():
    names = set()
    for path in TEMPLATES:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Jinja statements and comments are not C++.
        text = re.sub(r"\{%.*?%\}|\{#.*?#\}", "", text, flags=re.S)
        names |= {n for n in _MEMBER.findall(text) if not n.startswith("naarpc_")}
    return names


def clash_members():
    with open(CLASH, encoding="utf-8") as f:
        names = set(_DECLARED.findall(f.read()))
    with open(CLASH_H, encoding="utf-8") as f:
        listed = _CHANNEL_LIST.search(f.read())
    names |= {n for n in re.findall(r'"(\w+)"', listed.group(1)) if n.endswith("_")}
    return names


class TemplateNamesTest(unittest.TestCase):
    def test_templates_found(self):
        self.assertTrue(TEMPLATES)
        self.assertIn("lease_", template_members())

    def test_clash_reserves_exactly_the_templates_members(self):
        self.assertEqual(sorted(clash_members()), sorted(template_members()),
                         "idl/cpp/clash.cc's fixed members vs codegen/templates/")


if __name__ == "__main__":
    unittest.main()
