"""Renders the IR (the JSON of naarpc_idlc, as attribute objects) with the
Jinja2 templates in templates/. No parsing or validation here: the IR is
already checked and every name in it is final (idl/)."""
import os
import re
import textwrap

import jinja2

_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

# Characters that must not reach a // comment as themselves: C0/C1 controls
# (except tab) and the bidirectional controls gcc warns about (-Wbidi-chars).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _comment_safe(line):
    """One line of comment text: unsafe characters as <U+XXXX>, and never a
    trailing backslash (or ??/), which would continue the comment onto the
    next line of code."""
    line = _UNSAFE.sub(lambda m: "<U+%04X>" % ord(m.group(0)), line).rstrip()
    if line.endswith("\\") or line.endswith("??/"):
        line += " //"
    return line


def _lines(text):
    return re.split(r"\r\n|\r|\n", text)


def hex_(n):
    return "0x%02x" % n


def comment(text, indent=""):
    """A block of // lines, wrapped at 80 columns."""
    text = (text or "").strip()
    if not text:
        return ""
    lines = []
    for para in _lines(text):
        lines.extend(textwrap.wrap(para, 76 - len(indent)) or [""])
    lines = [_comment_safe(l) for l in lines]
    return "\n".join("%s// %s" % (indent, l) if l else indent + "//" for l in lines)


def doc_continued(text, indent="  "):
    """The rest of a // line that already started; further lines of a
    multi-line doc continue as // lines at `indent`."""
    lines = [_comment_safe(l) for l in _lines((text or "").strip())]
    return "\n".join([lines[0]] + ["%s//%s" % (indent, " " + l if l else "") for l in lines[1:]])


def doc_inline(text):
    """A doc squeezed onto the end of one // line."""
    return _comment_safe(" ".join((text or "").split()))


def param_summary(p):
    if p.is_stream:
        s = "%s: %s stream, chunks of %d x %s, window %d" % (
            p.name, p.direction, p.stream.chunk, p.type.idl, p.stream.window)
        if p.doc:
            s += "; " + " ".join(p.doc.split())
        return _comment_safe(s)
    size = "up to %d" % p.count if p.variable else "%d" % p.count
    s = "%s: %s, %s x %s" % (p.name, p.direction, size, p.type.idl)
    if p.single_send:
        s += ", single-send"
    if p.layout:
        s += ", caller's layout %s (%d runs)" % (p.layout.text, p.layout.runs)
    if p.doc:
        s += "; " + " ".join(p.doc.split())
    return _comment_safe(s)


def client_arg(p):
    return "%s %s" % (p.cpp.client_type, p.name)


def stream_arg(p):
    """The general (streaming) overload's argument: a source or sink for a
    stream, the usual argument otherwise."""
    return "%s %s" % (p.cpp.stream_client_type if p.is_stream else p.cpp.client_type, p.name)


def kernel_arg(p):
    return "%s %s" % (p.cpp.kernel_type, p.name)


def stream_local(p):
    return "naarpc_s_" + p.name


def kernel_value(p):
    t = p.type.cpp
    if p.is_stream:
        return stream_local(p)
    v = "naarpc_v_" + p.name
    if p.scalar:
        return "%s[0]" % v
    if p.direction == "in":
        if p.variable:
            return "std::span<const %s>(%s.first(naarpc_n_%s))" % (t, v, p.name)
        return "std::span<const %s>(%s)" % (t, v)
    if p.variable:
        return "naarpc_var_" + p.name
    return v


def size_check(p, rname):
    t = p.type.idl
    fail = 'return naarpc::InvalidArgumentError("%s: parameter \'%s\' ' % (rname, p.name)
    if p.layout:
        # The view must match the declared layout (docs/idl.md "Layouts").
        return "\n".join([
            "  {",
            "    static const naarpc::Layout naarpc_layout = %s;" % p.cpp.layout_expr,
            "    NAARPC_RETURN_IF_ERROR(%s.Check(naarpc_layout, \"%s: parameter '%s'\"));"
            % (p.name, rname, p.name),
            "  }"])
    if p.is_stream:
        if p.direction == "in":
            return ""
        return "\n".join(["  if (%s == nullptr) {" % p.name,
                          '    %smust not be null; nothing was sent");' % fail,
                          "  }"])
    if p.scalar:
        if p.direction == "in":
            return ""
        return "\n".join(["  if (%s == nullptr) {" % p.name,
                          '    %smust not be null; nothing was sent");' % fail,
                          "  }"])
    if p.variable and p.direction != "in":
        lines = ["  if (%s == nullptr) {" % p.name,
                 '    %smust not be null; nothing was sent");' % fail,
                 "  }"]
        if p.is_input:
            lines += ["  if (%s->size() > %d) {" % (p.name, p.count),
                      '    %stakes at most %d elements (%s), got " +' % (fail, p.count, t),
                      '        std::to_string(%s->size()) + "; nothing was sent");' % p.name,
                      "  }"]
        return "\n".join(lines)
    if p.variable:
        return "\n".join([
            "  if (%s.size() > %d) {" % (p.name, p.count),
            '    %stakes at most %d elements (%s), got " +' % (fail, p.count, t),
            '        std::to_string(%s.size()) + "; nothing was sent");' % p.name,
            "  }"])
    return "\n".join([
        "  if (%s.size() != %d) {" % (p.name, p.count),
        '    %sneeds exactly %d elements (%s), got " +' % (fail, p.count, t),
        '        std::to_string(%s.size()) + "; nothing was sent");' % p.name,
        "  }"])


def copy_in(p):
    if p.layout:  # sent zero-copy from the caller's layout, or packed into the region
        return "  naarpc::codegen::GatherInput(naarpc_c, %d, %s, naarpc_c.%s());" % (
            p.index, p.name, p.cpp.accessor)
    if p.scalar:
        return "  naarpc_c.%s()[0] = %s%s;" % (p.cpp.accessor, "" if p.direction == "in" else "*",
                                              p.name)
    ptr = p.variable and p.direction != "in"  # std::vector<T>* argument
    data = "%s->data()" % p.name if ptr else "%s.data()" % p.name
    n = "%s->size()" % p.name if ptr else "%s.size()" % p.name
    lines = ["  if (%s != 0) {" % n,
             "    std::memcpy(naarpc_c.%s().data(), %s, %s * sizeof(%s));"
             % (p.cpp.accessor, data, n, p.type.cpp),
             "  }"]
    if p.variable:
        lines.append("  naarpc_c.%s(%s);" % (p.cpp.size_setter, n))
    return "\n".join(lines)


def copy_out(p):
    if p.layout:  # scattered from the packed region into the caller's layout
        return "  %s.ScatterFrom(naarpc_c.%s());" % (p.name, p.cpp.accessor)
    if p.scalar:
        return "  *%s = naarpc_c.%s()[0];" % (p.name, p.cpp.accessor)
    if p.variable:
        return "\n".join([
            "  {",
            "    const auto naarpc_out = naarpc_c.%s().first(naarpc_c.%s());"
            % (p.cpp.accessor, p.cpp.size_getter),
            "    %s->assign(naarpc_out.begin(), naarpc_out.end());" % p.name,
            "  }"])
    return "  std::memcpy(%s.data(), naarpc_c.%s().data(), %s.size() * sizeof(%s));" % (
        p.name, p.cpp.accessor, p.name, p.type.cpp)


def send_length(p):
    if p.is_stream:
        return "0"
    if p.variable and p.is_input:
        return "naarpc::kLengthHeaderSize + %s * sizeof(%s)" % (
            p.cpp.size_member, p.type.cpp)
    return str(p.region_bytes)


def pool(r):
    return r.cpp.pool_member


def _env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    env.globals.update(hex=hex_, comment=comment, param_summary=param_summary,
                       client_arg=client_arg, kernel_arg=kernel_arg, kernel_value=kernel_value,
                       stream_arg=stream_arg, stream_local=stream_local,
                       size_check=size_check, copy_in=copy_in, copy_out=copy_out, pool=pool,
                       send_length=send_length)
    env.filters.update(doc_continued=doc_continued, doc_inline=doc_inline)
    return env


def render_all(idl):
    """Returns {file name: content} for the IR's three files."""
    env = _env()
    files = idl.files
    path = " ".join(_lines(idl.path))
    banner = ("// Generated by the naarpc code generator (codegen/naarpc_gen.py) from\n"
              "// %s. DO NOT EDIT: change the IDL and rebuild." % _comment_safe(path))
    common = dict(idl=idl, banner=banner, include_path=files.header)
    stem = files.stem
    out = {
        stem + ".naa.h": env.get_template("header.h.j2").render(guard=files.header_guard,
                                                               **common),
        stem + ".naa.cc": env.get_template("source.cc.j2").render(**common),
        stem + ".naa_mock.h": env.get_template("mock.h.j2").render(guard=files.mock_guard,
                                                                  **common),
    }
    # Collapse runs of blank lines left by template control blocks.
    return {k: re.sub(r"\n{3,}", "\n\n", v) for k, v in out.items()}
