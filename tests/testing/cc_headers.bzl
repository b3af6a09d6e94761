"""cc_headers: the headers of C++ libraries (transitively) as runfiles, for
tests that run a compiler themselves (the libFuzzer targets, the generator
fuzzer)."""

def _cc_headers_impl(ctx):
    headers = depset(transitive = [
        dep[CcInfo].compilation_context.headers
        for dep in ctx.attr.deps
    ])
    return [DefaultInfo(runfiles = ctx.runfiles(transitive_files = headers))]

cc_headers = rule(
    implementation = _cc_headers_impl,
    attrs = {"deps": attr.label_list(providers = [CcInfo])},
)
