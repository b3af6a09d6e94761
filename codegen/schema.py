"""Checks a loaded IDL document against idl/schema.yaml (a JSON-Schema subset:
type, properties, required, additionalProperties, items, enum, pattern,
minimum, maximum, minItems, $ref to #/definitions/...)."""
import re

from loader import MarkedDict, MarkedList

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _describe(v):
    if isinstance(v, bool):
        return "boolean %s" % str(v).lower()
    if isinstance(v, int):
        return "integer %d" % v
    if isinstance(v, float):
        return "number %g" % v
    if isinstance(v, str):
        return "string '%s'" % v
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    if v is None:
        return "null (empty value)"
    return type(v).__name__


def _join(path, key):
    if isinstance(key, int):
        return "%s[%d]" % (path, key)
    return "%s.%s" % (path, key) if path else key


class SchemaChecker:
    def __init__(self, schema, diags):
        self.root = schema
        self.diags = diags

    def _resolve(self, s):
        while "$ref" in s:
            ref = s["$ref"]
            assert ref.startswith("#/"), ref
            node = self.root
            for part in ref[2:].split("/"):
                node = node[part]
            s = node
        return s

    def check(self, value, schema=None, path="", line=1):
        s = self._resolve(schema if schema is not None else self.root)
        t = s.get("type")
        if t and not _TYPES[t](value):
            self.diags.error(line, path or "<document>",
                             "expected %s, got %s" % (t, _describe(value)))
            return
        if "enum" in s and value not in s["enum"]:
            self.diags.error(line, path, "%s is not one of: %s" % (
                _describe(value), ", ".join(str(e) for e in s["enum"])))
        if "pattern" in s and isinstance(value, str) and not re.search(s["pattern"], value):
            self.diags.error(line, path, "'%s' does not match %s" % (value, s["pattern"]))
        if "minimum" in s and value < s["minimum"]:
            self.diags.error(line, path, "%d is below the minimum %d (0x%x)" % (
                value, s["minimum"], s["minimum"]))
        if "maximum" in s and value > s["maximum"]:
            self.diags.error(line, path, "%d is above the maximum %d (0x%x)" % (
                value, s["maximum"], s["maximum"]))
        if t == "array":
            if "minItems" in s and len(value) < s["minItems"]:
                self.diags.error(line, path, "needs at least %d entr%s" % (
                    s["minItems"], "y" if s["minItems"] == 1 else "ies"))
            items = s.get("items")
            if items is not None:
                for i, item in enumerate(value):
                    ln = value.line_of(i) if isinstance(value, MarkedList) else line
                    self.check(item, items, _join(path, i), ln)
        if t == "object":
            props = s.get("properties", {})
            for req in s.get("required", []):
                if req not in value:
                    self.diags.error(line, _join(path, req), "required field is missing")
            for key, v in value.items():
                ln = value.line_of(key) if isinstance(value, MarkedDict) else line
                if key in props:
                    self.check(v, props[key], _join(path, key), ln)
                elif s.get("additionalProperties", True) is False:
                    kl = value.key_lines.get(key, ln) if isinstance(value, MarkedDict) else ln
                    self.diags.error(kl, _join(path, key), "unknown field (allowed: %s)" %
                                     ", ".join(props))
