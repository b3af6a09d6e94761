#!/usr/bin/python3
"""naarpc code generator: *.naa.yaml -> <name>.naa.h, <name>.naa.cc, <name>.naa_mock.h.

Usage:
  naarpc_gen.py IDL --out_dir DIR [--include_prefix PKG] [--idl_label PATH]
  naarpc_gen.py IDL --check          # validate only
Exit status 0 on success, 1 on IDL errors (printed as file:line: error: ...),
2 on usage errors. Never prints a traceback for a bad IDL.
"""
import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from diagnostics import Diagnostics, IdlError  # noqa: E402
import loader  # noqa: E402
import schema  # noqa: E402
import validate  # noqa: E402

DEFAULT_SCHEMA = os.path.join(_HERE, "..", "idl", "schema.yaml")


def parse(path, text=None, schema_path=DEFAULT_SCHEMA):
    """Returns (IdlFile or None, Diagnostics)."""
    diags = Diagnostics(path)
    try:
        doc = loader.load(path, text)
    except IdlError as e:
        diags.errors.append(e)
        return None, diags
    with open(schema_path, encoding="utf-8") as f:
        import yaml
        sch = yaml.safe_load(f)
    schema.SchemaChecker(sch, diags).check(doc)
    if diags.errors:
        return None, diags
    result = validate.Validator(path, doc, diags).run()
    if diags.errors:
        return None, diags
    return result, diags


def main(argv):
    ap = argparse.ArgumentParser(description="naarpc IDL code generator")
    ap.add_argument("idl", help="the *.naa.yaml file")
    ap.add_argument("--out_dir", help="where to write the generated files")
    ap.add_argument("--include_prefix", default="",
                    help="directory of the generated files as #included (e.g. services/vector)")
    ap.add_argument("--idl_label", default=None,
                    help="IDL path named in the generated banner (default: the path given)")
    ap.add_argument("--schema", default=DEFAULT_SCHEMA)
    ap.add_argument("--check", action="store_true", help="validate only")
    args = ap.parse_args(argv)
    if not args.check and not args.out_dir:
        ap.error("--out_dir is required unless --check")
    base = os.path.basename(args.idl)
    if not base.endswith(".naa.yaml"):
        print("%s: error: IDL file names must end in .naa.yaml" % args.idl, file=sys.stderr)
        return 2
    shown = args.idl_label or args.idl
    try:
        with open(args.idl, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print("%s: error: cannot read: %s" % (args.idl, e.strerror), file=sys.stderr)
        return 1
    idl, diags = parse(shown, text, args.schema)
    for w in diags.warnings:
        print(w, file=sys.stderr)
    for e in diags.errors:
        print(str(e), file=sys.stderr)
    if idl is None:
        print("%s: %d error(s); nothing generated" % (shown, len(diags.errors)), file=sys.stderr)
        return 1
    if args.check:
        return 0
    import render  # jinja2 only needed for output
    stem = base[: -len(".naa.yaml")]
    files = render.render_all(idl, stem, args.include_prefix)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as f:
            f.write(content)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
