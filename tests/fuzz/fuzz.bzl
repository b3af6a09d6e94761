"""naarpc_fuzz_test: a libFuzzer target built with clang-14 inside the test
(tests/fuzz/run_fuzzer.sh) and run for a bounded number of executions over a
checked-in seed corpus. Tagged "fuzz": the sanitizer passes of .ci/run skip
it (the fuzzer is its own ASan+UBSan build)."""

load("//tests/testing:cc_headers.bzl", "cc_headers")

def naarpc_fuzz_test(name, fuzzer, srcs, hdrs = [], hdr_deps = [], corpus = None, max_len = 4096, runs = 50000, libs = [], **kwargs):
    """fuzzer: the file with LLVMFuzzerTestOneInput; srcs: the sources it
    links (labels of files); hdrs: headers they include, or hdr_deps:
    cc_library targets whose headers (transitively) they include; corpus:
    the seed directory (package-relative, default corpus/<name>)."""
    corpus = corpus or "corpus/" + name
    pkg = native.package_name()
    if hdr_deps:
        cc_headers(name = name + "_headers", deps = hdr_deps, testonly = True)
        hdrs = hdrs + [":" + name + "_headers"]
    native.sh_test(
        name = name,
        srcs = [Label("//tests/fuzz:run_fuzzer.sh")],
        args = [
            name,
            pkg + "/" + corpus,
            str(max_len),
            str(runs),
            "'" + " ".join(libs) + "'",
            "--",
            "$(rootpath " + fuzzer + ")",
        ] + ["$(rootpath " + s + ")" for s in srcs],
        data = [fuzzer] + srcs + hdrs + native.glob([corpus + "/*"]),
        tags = ["fuzz"] + kwargs.pop("tags", []),
        **kwargs
    )
