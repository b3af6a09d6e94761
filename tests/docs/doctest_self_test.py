"""The doc test's own rules (tests/docs/doctest.py): a broken snippet, a
wrong flag, a wrong output, an unmarked block and an unbounded `-j` fail,
naming the document and the line; what is right passes."""

import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doctest as docs  # noqa: E402  (tests/docs/doctest.py, not the stdlib's)

ROOT = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])


class DocTestRules(unittest.TestCase):

  def check(self, markdown):
    """The errors of a document with this text (its path is absolute)."""
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    path = os.path.join(tmp, "doc.md")
    with open(path, "w") as f:
      f.write(textwrap.dedent(markdown))
    checker = docs.Checker(docs.Env(ROOT, tmp))
    errors = checker.check_document(path)
    try:
      checker.finish_cpp()
    except docs.DocError as e:
      errors.append(str(e))
    return path, errors, checker

  def test_a_broken_snippet_fails_at_its_line(self):
    path, errors, _ = self.check("""\
        # Doc
        ```cpp
        naarpc::Status ok = naarpc::Status::Ok();
        naarpc::Status bad = naarpc::NoSuchFunction();
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:2: the C++ snippet does not compile", errors[0])
    self.assertIn(f"{path}:4:", errors[0])  # the compiler's error, at the doc's line
    self.assertIn("NoSuchFunction", errors[0])

  def test_a_broken_setup_line_fails_at_its_line(self):
    path, errors, _ = self.check("""\
        <!-- doctest: wrap=function
        auto transport = naarpc::NewTransport("emulated");
        naarpc::Transport& t = *transport;
        -->
        ```cpp
        (void)t;
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:5: the C++ snippet does not compile", errors[0])
    self.assertIn(f"{path}:3:", errors[0])  # the hidden setup line, in the directive

  def test_the_output_of_a_failed_command_is_not_reported_again(self):
    path, errors, _ = self.check("""\
        ```sh
        naarpc describe --no-such-flag services/vector/vector.naa.yaml
        ```

        ```
        service VectorArith (6 routines)
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:2: `naarpc describe --no-such-flag", errors[0])

  def test_a_right_snippet_compiles(self):
    _, errors, checker = self.check("""\
        <!-- doctest: wrap=function
        std::vector<float> a(3);
        -->
        ```cpp
        naarpc::Deadline d = naarpc::Deadline::After(10ms);
        a[0] = d.expired() ? 1.0f : 2.0f;
        ```
        """)
    self.assertEqual(errors, [])
    self.assertEqual(checker.counts["compiled"], 1)

  def test_a_wrong_flag_fails_at_its_line(self):
    path, errors, _ = self.check("""\
        Describe it:

        ```sh
        ./tools/bazel run //tools/naarpc -- describe services/vector/vector.naa.yaml
        ./tools/bazel run //tools/naarpc -- describe --no-such-flag services/vector/vector.naa.yaml
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:5: `./tools/bazel run //tools/naarpc -- describe --no-such-flag",
                  errors[0])
    self.assertIn("failed (exit", errors[0])

  def test_a_wrong_output_fails_at_the_line_it_shows(self):
    path, errors, checker = self.check("""\
        ```
        $ naarpc describe services/vector/vector.naa.yaml VectorArith.Add
        service VectorArith (6 routines)
        ...
          Add  code 1 (0x01), kernel timeout 2000 ms, client deadline 3000 ms
        $ naarpc describe services/vector/vector.naa.yaml VectorArith.Add
          Add  code 7 (0x07), kernel timeout 2000 ms, client deadline 3000 ms
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:7: `naarpc describe", errors[0])
    self.assertIn("Add  code 7", errors[0])
    self.assertEqual(checker.counts["outputs"], 1)

  def test_a_server_still_running_on_the_port_is_named(self):
    path, errors, _ = self.check("""\
        ```sh
        naarpc serve --idl services/vector/vector.naa.yaml --transport emulated --port 12345 &
        naarpc serve --idl services/vector/vector.naa.yaml --transport emulated --port 12345 &
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:3:", errors[0])
    self.assertIn("is already in use", errors[0])

  def test_every_block_is_run_or_marked_with_a_reason(self):
    path, errors, checker = self.check("""\
        ```ruby
        puts 1
        ```

        <!-- doctest: skip="" -->
        ```ruby
        puts 2
        ```

        <!-- doctest: skip="no Ruby here" -->
        ```ruby
        puts 3
        ```
        """)
    self.assertEqual(len(errors), 2, errors)
    self.assertIn(f"{path}:1: a ```ruby block the doc test does not know how to run", errors[0])
    self.assertIn(f"{path}:6: skip needs a reason", errors[1])
    self.assertEqual(checker.skipped, [(f"{path}:11", "no Ruby here")])

  def test_an_unbounded_parallel_build_fails_even_when_not_run(self):
    path, errors, checker = self.check("""\
        <!-- doctest: skip="builds naarpc" -->
        ```sh
        cmake -S . -B build
        cmake --build build -j "$(nproc)"   # a count: fine
        cmake --build build -j && cmake --install build
        ```

        ```
        $ make -j
        ```
        """)
    self.assertEqual(len(errors), 2, errors)
    self.assertIn(f"{path}:5: `cmake --build build -j && cmake --install build`: a parallel "
                  "build without a job count", errors[0])
    self.assertIn(f"{path}:9: `make -j`", errors[1])

  def test_an_excerpt_must_match_its_file(self):
    path, errors, _ = self.check("""\
        ```python
        # services/vector/BUILD
        naarpc_cc_library(
            name = "vector_naa",
            src = "other.naa.yaml",
        )
        ```
        """)
    self.assertEqual(len(errors), 1, errors)
    self.assertIn(f"{path}:5: `src = \"other.naa.yaml\",` is not in services/vector/BUILD",
                  errors[0])


if __name__ == "__main__":
  unittest.main()
