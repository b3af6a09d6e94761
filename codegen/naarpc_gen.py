#!/usr/bin/python3
"""naarpc code generator, back-end: renders the IR of one IDL file (the JSON
that idl/naarpc_idlc writes after validating it) into <stem>.naa.h,
<stem>.naa.cc and <stem>.naa_mock.h.

Usage:
  naarpc_idlc X.naa.yaml --include_prefix DIR --out X.json
  naarpc_gen.py X.json --out_dir DIR

All parsing and validation of IDL files is the C++ front-end's (idl/); this
script only renders. Exit status 0 on success, 2 on a usage or I/O problem
(an IR it cannot read). Writes all three files or none.
"""
import argparse
import json
import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

IR_FORMAT = "naarpc-idl-ir/1"


def load_ir(path):
    """The IR as nested attribute objects (what the templates expect)."""
    with open(path, encoding="utf-8") as f:
        ir = json.load(f, object_hook=lambda d: types.SimpleNamespace(**d))
    if getattr(ir, "format", None) != IR_FORMAT:
        raise ValueError("%s: not a naarpc IR (format %r, expected %r)"
                         % (path, getattr(ir, "format", None), IR_FORMAT))
    if not hasattr(ir, "files"):
        raise ValueError("%s: the IR has no 'files' (run naarpc_idlc without --check)" % path)
    return ir


def write_all(out_dir, files):
    """Writes every file under a temporary name, then renames them all."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = []
    try:
        for name, content in files.items():
            t = os.path.join(out_dir, name + ".tmp")
            with open(t, "w", encoding="utf-8") as f:
                f.write(content)
            tmp.append((t, os.path.join(out_dir, name)))
        for t, final in tmp:
            os.replace(t, final)
    finally:
        for t, _ in tmp:
            if os.path.exists(t):
                os.remove(t)


def main(argv):
    ap = argparse.ArgumentParser(description="naarpc code generator (renders naarpc_idlc's IR)")
    ap.add_argument("ir", help="the IR as JSON, from naarpc_idlc")
    ap.add_argument("--out_dir", required=True, help="where to write the generated files")
    args = ap.parse_args(argv)
    try:
        ir = load_ir(args.ir)
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        print("naarpc_gen.py: error: %s" % e, file=sys.stderr)
        return 2
    import jinja2  # only needed for output
    import render
    try:
        files = render.render_all(ir)
    except (AttributeError, KeyError, TypeError, jinja2.UndefinedError) as e:
        # A field the templates need is missing or of the wrong kind.
        print("naarpc_gen.py: error: %s: not an IR this generator can render "
              "(incomplete, or from another naarpc version): %s" % (args.ir, e), file=sys.stderr)
        return 2
    try:
        write_all(args.out_dir, files)
    except OSError as e:
        print("naarpc_gen.py: error: cannot write to %s: %s" % (args.out_dir, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
