"""naarpc_cc_library: C++ stubs and skeletons from a *.naa.yaml IDL file.

    load("//codegen:naarpc.bzl", "naarpc_cc_library")
    naarpc_cc_library(name = "vector_naa", src = "vector.naa.yaml")

yields :vector_naa (cc_library: vector.naa.h/.cc, include as
"<package>/vector.naa.h") and :vector_naa_mock (gMock mocks:
"<package>/vector.naa_mock.h"), like cc_grpc_library.
"""

_GEN = Label("//codegen:naarpc_gen")
_GEN_FILES = Label("//codegen:generator_files")
_SUPPORT = Label("//codegen:support")
_RUNTIME = Label("//runtime:engine")

def naarpc_cc_library(name, src, deps = [], visibility = None, testonly = False, **kwargs):
    if not src.endswith(".naa.yaml"):
        fail("naarpc_cc_library: src must end in .naa.yaml, got " + src)
    stem = src[:-len(".naa.yaml")]
    hdr = stem + ".naa.h"
    cc = stem + ".naa.cc"
    mock = stem + ".naa_mock.h"
    pkg = native.package_name()
    include_prefix = pkg + ("/" + stem.rpartition("/")[0] if "/" in stem else "")
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = [hdr, cc, mock],
        tools = [_GEN, _GEN_FILES],
        cmd = ("/usr/bin/python3 $(location {gen}) $(location {src}) " +
               "--out_dir $(@D)/{sub} --include_prefix {prefix} " +
               "--idl_label {label}").format(
            gen = str(_GEN),
            src = src,
            sub = stem.rpartition("/")[0],
            prefix = include_prefix,
            label = (pkg + "/" if pkg else "") + src,
        ),
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [cc],
        hdrs = [hdr],
        deps = deps + [_SUPPORT, _RUNTIME],
        visibility = visibility,
        testonly = testonly,
        **kwargs
    )
    native.cc_library(
        name = name + "_mock",
        hdrs = [mock],
        deps = [":" + name, "@system//:gmock"],
        visibility = visibility,
        testonly = True,
    )
