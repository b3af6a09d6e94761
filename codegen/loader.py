"""YAML loading that keeps line numbers (for file:line diagnostics).

Mappings load as MarkedDict and sequences as MarkedList; both record their own
line and the line of every value (scalars cannot carry attributes).
"""
import yaml

from diagnostics import IdlError


class MarkedDict(dict):
    line = 0

    def __init__(self):
        super().__init__()
        self.value_lines = {}
        self.key_lines = {}

    def line_of(self, key):
        return self.value_lines.get(key, self.line)


class MarkedList(list):
    line = 0

    def __init__(self):
        super().__init__()
        self.item_lines = []

    def line_of(self, index):
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class _Loader(yaml.SafeLoader):
    pass


def _construct_map(loader, node):
    m = MarkedDict()
    m.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise IdlError(loader.name, key_node.start_mark.line + 1, "",
                           "mapping key %r is not a string" % (key,))
        if key in m:
            raise IdlError(loader.name, key_node.start_mark.line + 1, key,
                           "duplicate key '%s' (first at line %d)" % (key, m.key_lines[key]))
        m[key] = loader.construct_object(value_node, deep=True)
        m.key_lines[key] = key_node.start_mark.line + 1
        m.value_lines[key] = value_node.start_mark.line + 1
    return m


def _construct_seq(loader, node):
    seq = MarkedList()
    seq.line = node.start_mark.line + 1
    for item in node.value:
        seq.append(loader.construct_object(item, deep=True))
        seq.item_lines.append(item.start_mark.line + 1)
    return seq


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load(path, text=None):
    """Returns the document as MarkedDict/MarkedList/scalars."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise IdlError(path, 0, "", "cannot read file: %s" % e.strerror)
    loader = _Loader(text)
    loader.name = path
    try:
        doc = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise IdlError(path, line, "", "YAML syntax error: %s" % e.problem)
    except yaml.YAMLError as e:
        raise IdlError(path, 0, "", "YAML error: %s" % e)
    finally:
        loader.dispose()
    if doc is None:
        raise IdlError(path, 1, "", "empty IDL file")
    return doc
