"""Renders the IR with the Jinja2 templates in templates/ (one per section)."""
import os
import re
import textwrap

import jinja2

_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def hex_(n):
    return "0x%02x" % n


def comment(text, indent=""):
    text = (text or "").strip()
    if not text:
        return ""
    lines = []
    for para in text.splitlines():
        lines.extend(textwrap.wrap(para, 76 - len(indent)) or [""])
    return "\n".join("%s// %s" % (indent, l) if l else indent + "//" for l in lines)


def param_summary(p):
    size = "up to %d" % p.count if p.variable else "%d" % p.count
    s = "%s: %s, %s x %s" % (p.name, p.direction, size, p.type.idl)
    if p.single_send:
        s += ", single-send"
    if p.doc:
        s += "; " + " ".join(p.doc.split())
    return s


def client_arg(p):
    t = p.type.cpp
    if p.scalar:
        return ("%s %s" if p.direction == "in" else "%s* %s") % (t, p.name)
    if p.direction == "in":
        return "std::span<const %s> %s" % (t, p.name)
    if p.variable:
        return "std::vector<%s>* %s" % (t, p.name)
    return "std::span<%s> %s" % (t, p.name)


def kernel_arg(p):
    t = p.type.cpp
    if p.scalar:
        return ("%s %s" if p.direction == "in" else "%s& %s") % (t, p.name)
    if p.direction == "in":
        return "std::span<const %s> %s" % (t, p.name)
    if p.variable:
        return "naarpc::codegen::VarSpan<%s>& %s" % (t, p.name)
    return "std::span<%s> %s" % (t, p.name)


def kernel_value(p):
    t = p.type.cpp
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
    if p.scalar:
        return "  naarpc_c.%s()[0] = %s%s;" % (p.name, "" if p.direction == "in" else "*",
                                              p.name)
    ptr = p.variable and p.direction != "in"  # std::vector<T>* argument
    data = "%s->data()" % p.name if ptr else "%s.data()" % p.name
    n = "%s->size()" % p.name if ptr else "%s.size()" % p.name
    lines = ["  if (%s != 0) {" % n,
             "    std::memcpy(naarpc_c.%s().data(), %s, %s * sizeof(%s));"
             % (p.name, data, n, p.type.cpp),
             "  }"]
    if p.variable:
        lines.append("  naarpc_c.set_%s_size(%s);" % (p.name, n))
    return "\n".join(lines)


def copy_out(p):
    if p.scalar:
        return "  *%s = naarpc_c.%s()[0];" % (p.name, p.name)
    if p.variable:
        return "\n".join([
            "  {",
            "    const auto naarpc_out = naarpc_c.%s().first(naarpc_c.%s_size());" % (p.name, p.name),
            "    %s->assign(naarpc_out.begin(), naarpc_out.end());" % p.name,
            "  }"])
    return "  std::memcpy(%s.data(), naarpc_c.%s().data(), %s.size() * sizeof(%s));" % (
        p.name, p.name, p.name, p.type.cpp)


def send_length(p):
    if p.variable and p.is_input:
        return "naarpc::codegen::kLengthHeaderSize + %s_size_ * sizeof(%s)" % (p.name, p.type.cpp)
    return str(p.region_bytes)


def pool(r):
    return "pool_%s_" % re.sub(r"(?<!^)(?=[A-Z])", "_", r.name).lower()


def _env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    env.globals.update(hex=hex_, comment=comment, param_summary=param_summary,
                       client_arg=client_arg, kernel_arg=kernel_arg, kernel_value=kernel_value,
                       size_check=size_check, copy_in=copy_in, copy_out=copy_out, pool=pool,
                       send_length=send_length)
    return env


def _guard(path):
    return re.sub(r"[^A-Za-z0-9]", "_", path).upper() + "_"


def render_all(idl, stem, include_prefix):
    env = _env()
    prefix = include_prefix.strip("/")
    header = (prefix + "/" if prefix else "") + stem + ".naa.h"
    mock = (prefix + "/" if prefix else "") + stem + ".naa_mock.h"
    banner = ("// Generated by the naarpc code generator (codegen/naarpc_gen.py) from\n"
              "// %s. DO NOT EDIT: change the IDL and rebuild." % idl.path)
    common = dict(idl=idl, banner=banner, include_path=header)
    out = {
        stem + ".naa.h": env.get_template("header.h.j2").render(guard=_guard(header), **common),
        stem + ".naa.cc": env.get_template("source.cc.j2").render(**common),
        stem + ".naa_mock.h": env.get_template("mock.h.j2").render(guard=_guard(mock), **common),
    }
    # Collapse runs of blank lines left by template control blocks.
    return {k: re.sub(r"\n{3,}", "\n\n", v) for k, v in out.items()}
