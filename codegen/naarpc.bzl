"""naarpc_cc_library: C++ stubs and skeletons from a *.naa.yaml IDL file.

    load("//codegen:naarpc.bzl", "naarpc_cc_library")
    naarpc_cc_library(name = "vector_naa", src = "vector.naa.yaml")

yields :vector_naa (cc_library: vector.naa.h/.cc, include as
"<package>/vector.naa.h") and :vector_naa_mock (gMock mocks:
"<package>/vector.naa_mock.h"), like cc_grpc_library. Two steps: the C++
front-end //idl:naarpc_idlc validates the IDL and writes its IR
(:vector_naa_ir, vector.naa.ir.json); codegen/naarpc_gen.py renders the IR
with the Jinja2 templates.

From another workspace: load("@naarpc//codegen:naarpc.bzl", ...) and add
"@naarpc" (the runtime with the transports) to binaries (docs/using.md;
//tests/external_workspace). Labels here are Label()s, so they resolve in
naarpc's repository wherever the macro is called from; generated code
includes only the public headers ("naarpc/...", //codegen:support).
"""

_IDLC = Label("//idl:naarpc_idlc")
_GEN = Label("//codegen:naarpc_gen")
_GEN_FILES = Label("//codegen:generator_files")
_SUPPORT = Label("//codegen:support")
_GMOCK = Label("@system//:gmock")

def naarpc_cc_library(name, src, deps = [], visibility = None, testonly = False, **kwargs):
    if not src.endswith(".naa.yaml"):
        fail("naarpc_cc_library: src must end in .naa.yaml, got " + src)
    stem = src[:-len(".naa.yaml")]
    ir = stem + ".naa.ir.json"
    hdr = stem + ".naa.h"
    cc = stem + ".naa.cc"
    mock = stem + ".naa_mock.h"
    pkg = native.package_name()
    include_prefix = pkg + ("/" + stem.rpartition("/")[0] if "/" in stem else "")
    native.genrule(
        name = name + "_ir",
        srcs = [src],
        outs = [ir],
        tools = [_IDLC],
        cmd = ("$(location {idlc}) $(location {src}) --include_prefix '{prefix}' " +
               "--label '{label}' --out $@").format(
            idlc = str(_IDLC),
            src = src,
            prefix = include_prefix,
            label = (pkg + "/" if pkg else "") + src,
        ),
        testonly = testonly,
        visibility = visibility,
    )
    native.genrule(
        name = name + "_gen",
        srcs = [ir],
        outs = [hdr, cc, mock],
        tools = [_GEN, _GEN_FILES],
        cmd = "/usr/bin/python3 $(location {gen}) $(location {ir}) --out_dir $(@D)/{sub}".format(
            gen = str(_GEN),
            ir = ir,
            sub = stem.rpartition("/")[0],
        ),
        testonly = testonly,
        visibility = visibility,  # the generated files, e.g. for //tests/docs
    )
    native.cc_library(
        name = name,
        srcs = [cc],
        hdrs = [hdr],
        deps = deps + [_SUPPORT],
        visibility = visibility,
        testonly = testonly,
        **kwargs
    )
    native.cc_library(
        name = name + "_mock",
        hdrs = [mock],
        deps = [":" + name, _GMOCK],
        visibility = visibility,
        testonly = True,
    )
