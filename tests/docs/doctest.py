"""Executable documentation: runs the commands and compiles the snippets of
README.md and docs/*.md (after mdBook's and rustdoc's doc-tests).

Every fenced block of a checked document gets exactly one treatment, chosen
by its language and by an optional directive in an HTML comment right above
it (visible in the Markdown source, invisible when rendered):

    <!-- doctest: skip="why it cannot run here" -->
    <!-- doctest: by=//tests/cmake:cmake_test id=cmake-consumer -->
    <!-- doctest: cpp wrap=function include=services/stream/stream.naa.h
    setup code the snippet assumes (hidden, like rustdoc's '# ' lines)
    -->
    <!-- doctest: background="naarpc serve --idl X --port {port}" replace="10.0.0.7=127.0.0.1:{port}" -->
    <!-- doctest: numbers=any -->

Treatments:
  sh/bash/shell   each command runs, in order, in the document's session
                  (a scratch copy of the workspace; `./tools/bazel run //T --
                  ARGS` runs the built target T, `./tools/bazel build //T`
                  checks it is built; a trailing `&` starts a background job,
                  waited for until its port listens; `kill %N` ends job N;
                  `export` sets the session's environment). A command that
                  fails fails the test.
  bare block      after an sh block: the output of its last command. With
                  `$ ` lines: a transcript, each command run and its output
                  (the lines up to the next `$ `) checked.
  cpp/c++         compiled (g++ -std=c++20 -fsyntax-only) against the real
                  public and generated headers; `wrap=function` puts it (after
                  the setup lines) inside a function body; errors point at the
                  document's lines (#line).
  yaml            a whole IDL file (`package:` + `services:`): loaded by
                  `naarpc describe`; a block whose first line is `# PATH`: an
                  excerpt of that file (its lines appear there, in order).
  python          (Starlark) `# PATH` first line: an excerpt of that file.
  text            `golden:` byte vectors of docs/protocol.md, checked by
                  //runtime/wire:protocol_doc_test.
Anything else needs a directive. Ports: 12345 (the default port the docs
use) is replaced by a fresh free port per document, consistently in
commands and outputs.

Output checks: every expected line must appear, in order (other lines may
come between); whitespace runs compare equal; `...` alone skips any lines,
`...` inside a line matches anything; with numbers=any every number matches
any number.
"""

import dataclasses
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

DIRECTIVE = re.compile(r"^<!--\s*doctest:\s*(.*)$")
# `-j`, `--jobs` or `--parallel` without a count (end of the command, a shell
# separator or another option next).
UNBOUNDED_JOBS = re.compile(r"(?:^|\s)(?:-j|--jobs|--parallel)(?=\s*(?:$|[;&|)]|-))")


@dataclasses.dataclass
class Block:
  path: str          # the document, relative to the workspace
  line: int          # 1-based line of the opening fence
  lang: str
  lines: list        # the block's text, one entry per line
  options: dict      # directive key -> value ('' for a bare key)
  setup: list        # hidden setup lines of the directive
  setup_line: int = 0  # 1-based line of the first setup line

  def where(self, offset=0):
    return f"{self.path}:{self.line + 1 + offset}"


FAILED = object()  # stands for the output of a command block that failed


class DocError(Exception):
  """A documented command or snippet that does not do what the doc says."""


def parse_directive(text):
  """'a=1 b="x y" c' -> {'a': '1', 'b': 'x y', 'c': ''}."""
  options = {}
  for token in shlex.split(text):
    key, _, value = token.partition("=")
    options[key] = value
  return options


def parse_blocks(path, text):
  """The fenced blocks of a Markdown document with their directives."""
  lines = text.split("\n")
  blocks = []
  i = 0
  pending = None  # (options, setup) of a directive right above a fence
  while i < len(lines):
    line = lines[i]
    m = DIRECTIVE.match(line.strip())
    if m:
      first = m.group(1)
      setup = []
      setup_line = i + 2
      if first.rstrip().endswith("-->"):
        first = first.rstrip()[:-3]
      else:
        i += 1
        while i < len(lines) and lines[i].strip() != "-->":
          setup.append(lines[i])
          i += 1
        if i == len(lines):
          raise DocError(f"{path}:{i}: a doctest directive without its closing -->")
      pending = (parse_directive(first), setup, i + 1, setup_line)
      i += 1
      continue
    fence = re.match(r"^(\s*)(```+)\s*([\w+-]*)", line)
    if fence:
      indent, ticks, lang = fence.group(1), fence.group(2), fence.group(3)
      body = []
      j = i + 1
      while j < len(lines) and not lines[j].strip().startswith(ticks):
        body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
        j += 1
      options, setup, setup_line = {}, [], 0
      if pending is not None:
        options, setup, _, setup_line = pending
      blocks.append(Block(path, i + 1, lang.lower(), body, options, setup, setup_line))
      pending = None
      i = j + 1
      continue
    if line.strip() and pending is not None:
      raise DocError(f"{path}:{pending[2]}: a doctest directive must stand right above a "
                     "fenced block")
    i += 1
  return blocks


# ----- output matching ---------------------------------------------------------

NUMBER = r"[-+]?[0-9][0-9.,]*(?:[eE][-+]?[0-9]+)?"


def line_pattern(expected, numbers_any):
  parts = [p.strip() for p in expected.split("...")]
  regex = []
  for k, part in enumerate(parts):
    words = []
    for word in part.split():
      if numbers_any:
        pieces = re.split(f"({NUMBER})", word)
        words.append("".join(NUMBER if re.fullmatch(NUMBER, p) else re.escape(p)
                             for p in pieces if p))
      else:
        words.append(re.escape(word))
    regex.append(r"\s+".join(words))
  return re.compile(r"\s*" + r".*".join(regex) + r"\s*$")


def check_output(expected, actual, numbers_any, where, command):
  """Every expected line appears in `actual`, in order."""
  out = [l.rstrip() for l in actual.split("\n")]
  pos = 0
  for n, want in expected:
    if not want.strip():
      continue
    if want.strip() == "...":
      continue
    pattern = line_pattern(want, numbers_any)
    while pos < len(out) and not pattern.match(out[pos]):
      pos += 1
    if pos == len(out):
      shown = "\n".join("    " + l for l in actual.rstrip().split("\n")[-40:])
      raise DocError(f"{where(n)}: `{command}` did not print the documented line\n"
                     f"    {want.strip()}\n  it printed:\n{shown}")
    pos += 1


# ----- the document's shell session --------------------------------------------

def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def listening(port):
  """A TCP socket listens on `port` (IPv4 or IPv6): /proc, no connection."""
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      with open(table) as f:
        next(f)
        for row in f:
          fields = row.split()
          if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return True
    except OSError:
      pass
  return False


class Session:
  """One document's commands: a scratch workspace, its environment, its
  background jobs, and the port that stands for 12345."""

  def __init__(self, env, targets, path):
    self.env = env
    self.targets = targets
    self.path = path
    self.dir = tempfile.mkdtemp(prefix="doc-session-", dir=env.tmp)
    env.populate(self.dir)
    self.vars = dict(env.base_env)
    self.vars["HOME"] = os.path.join(self.dir, ".home")
    os.makedirs(self.vars["HOME"], exist_ok=True)
    self.vars["PATH"] = env.shim_bin + ":" + self.vars.get("PATH", "/usr/bin:/bin")
    self.jobs = []  # (Popen, command, log path)
    self.port = free_port()
    self.replacements = [("12345", str(self.port))]

  def substitute(self, text):
    for old, new in self.replacements:
      text = text.replace(old, new)
    return text

  def shell(self, command):
    """The bash command line, with the `./tools/bazel` shim defined."""
    return f"source {shlex.quote(self.env.shim)}\n{command}"

  def run(self, command, where, check=True, timeout=600):
    command = self.substitute(command)
    m = re.fullmatch(r"kill\s+%(\d+)", command.strip())
    if m:
      self.stop_job(int(m.group(1)), where)
      return ""
    m = re.fullmatch(r"export\s+(\w+)=(.*)", command.strip())
    if m:
      value = subprocess.run(["bash", "-c", f"printf %s {m.group(2)}"], capture_output=True,
                             text=True, env=self.vars).stdout
      self.vars[m.group(1)] = value
      return ""
    if command.rstrip().endswith("&"):
      self.start_job(command.rstrip()[:-1], where)
      return ""
    try:
      p = subprocess.run(["bash", "-c", self.shell(command)], cwd=self.dir, env=self.vars,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout)
    except subprocess.TimeoutExpired:
      raise DocError(f"{where}: `{command}` did not finish within {timeout} s")
    if check and p.returncode != 0:
      raise DocError(f"{where}: `{command}` failed (exit {p.returncode}):\n{p.stdout}")
    return p.stdout

  def start_job(self, command, where, timeout=120):
    command = self.substitute(command)
    m = re.search(r"--port[ =](\d+)", command)
    if m and listening(int(m.group(1))):
      raise DocError(f"{where}: `{command}`: port {m.group(1)} is already in use (a server "
                     "started earlier still runs: stop it first, e.g. `kill %1`)")
    log = os.path.join(self.dir, f".job{len(self.jobs) + 1}.log")
    with open(log, "w") as f:
      p = subprocess.Popen(["bash", "-c", self.shell(command)], cwd=self.dir, env=self.vars,
                           stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    self.jobs.append((p, command, log))
    m = re.search(r"--port[ =](\d+)", command)
    if not m:
      return
    port = int(m.group(1))
    deadline = time.monotonic() + timeout
    while not listening(port):
      if p.poll() is not None:
        raise DocError(f"{where}: the background job `{command}` ended (exit {p.returncode}) "
                       f"before it listened on port {port}:\n{open(log).read()}")
      if time.monotonic() > deadline:
        raise DocError(f"{where}: `{command}` did not listen on port {port} within {timeout} s")
      time.sleep(0.02)  # polls a condition (the port), bounded by the deadline

  def stop_job(self, number, where):
    if not 1 <= number <= len(self.jobs):
      raise DocError(f"{where}: kill %{number}: there are {len(self.jobs)} background job(s)")
    p, _, _ = self.jobs[number - 1]
    self.terminate(p)

  @staticmethod
  def terminate(p, timeout=30):
    """Stops a job's whole process group (the shell and what it started) and
    waits until every process of it is gone."""
    def signal_group(sig):
      try:
        os.killpg(p.pid, sig)
        return True
      except ProcessLookupError:
        return False
    signal_group(15)
    deadline = time.monotonic() + timeout
    while True:
      p.poll()  # reaps the shell
      if not signal_group(0):
        break
      if time.monotonic() > deadline:
        signal_group(9)
        deadline = time.monotonic() + timeout
      time.sleep(0.02)  # polls a condition (the group is gone), bounded

  def close(self):
    for p, _, _ in self.jobs:
      self.terminate(p)


class BlockJobs:
  """A block's `background="COMMAND"` (a server on a fresh {port}, stopped
  after the block) and `replace="OLD=NEW;..."` (the doc's example addresses
  mapped to it, in commands and outputs)."""

  def __init__(self, block, session):
    self.block, self.session = block, session
    self.job = None
    self.added = 0

  def __enter__(self):
    b, session = self.block, self.session
    port = str(free_port())
    for pair in filter(None, b.options.get("replace", "").split(";")):
      old, _, new = pair.partition("=")
      session.replacements.insert(self.added, (old, new.replace("{port}", port)))
      self.added += 1
    if "background" in b.options:
      session.start_job(b.options["background"].replace("{port}", port), b.where(-1))
      self.job = len(session.jobs)
    return self

  def __exit__(self, *exc):
    if self.job:
      self.session.stop_job(self.job, self.block.where(-1))
    del self.session.replacements[:self.added]
    return False


def logical_lines(lines):
  """Joins backslash continuations: [(index of first line, text)]."""
  out = []
  k = 0
  while k < len(lines):
    start, text = k, lines[k]
    while text.rstrip().endswith("\\") and k + 1 < len(lines):
      k += 1
      text = text.rstrip()[:-1] + " " + lines[k].strip()
    out.append((start, text))
    k += 1
  return out


def strip_comment(command):
  """A shell, YAML or Starlark line without its trailing `# comment` (quotes
  respected), stripped."""
  in_single = in_double = False
  for k, c in enumerate(command):
    if c == "'" and not in_double:
      in_single = not in_single
    elif c == '"' and not in_single:
      in_double = not in_double
    elif c == "#" and not in_single and not in_double and (k == 0 or command[k - 1].isspace()):
      return command[:k].strip()
  return command.strip()


# ----- the environment: runfiles, built targets, the ./tools/bazel shim ----------

SHIM = r'''
# ./tools/bazel as the docs use it, inside the doc test: `run` runs the built
# target (as `bazel run` does: BUILD_WORKING_DIRECTORY is where the command
# was typed), `build` checks that it is built. Targets are the doc test's data.
./tools/bazel() {
  local verb="$1"; shift
  local labels=() args=()
  while (($#)); do
    case "$1" in
      --) shift; args=("$@"); break ;;
      -c|--compilation_mode|--config) shift 2 ;;
      -*) shift ;;
      *) labels+=("$1"); shift ;;
    esac
  done
  local label bin pkg name
  for label in "${labels[@]}"; do
    pkg="${label#//}"
    if [[ "$pkg" == *:* ]]; then name="${pkg#*:}"; pkg="${pkg%%:*}"; else name="${pkg##*/}"; fi
    bin="$DOCTEST_ROOT/$pkg/$name"
    if [[ "$verb" != test && ! -x "$bin" ]]; then
      echo "doctest: $label is not built for the doc test (add it to the data of //tests/docs:doc_test)" >&2
      return 97
    fi
  done
  case "$verb" in
    run)
      local wd="$PWD"
      (cd "$DOCTEST_ROOT" && BUILD_WORKING_DIRECTORY="$wd" BUILD_WORKSPACE_DIRECTORY="$wd" \
        exec "$DOCTEST_ROOT/$pkg/$name" "${args[@]}") ;;
    build) echo "doctest: ${labels[*]} built" ;;
    *) echo "doctest: './tools/bazel $verb' is not run inside the doc test" >&2; return 98 ;;
  esac
}
'''


class Env:
  def __init__(self, root, tmp):
    self.root = root  # the runfiles tree of the workspace
    self.tmp = tmp
    self.shim = os.path.join(tmp, "bazel_shim.sh")
    with open(self.shim, "w") as f:
      f.write(SHIM)
    self.gen = os.path.join(tmp, "gen")  # code generated from the docs' IDL blocks
    os.makedirs(self.gen, exist_ok=True)
    self.shim_bin = os.path.join(tmp, "bin")
    os.makedirs(self.shim_bin, exist_ok=True)
    naarpc = os.path.join(root, "tools/naarpc/naarpc")
    if os.path.exists(naarpc):
      link = os.path.join(self.shim_bin, "naarpc")
      if not os.path.exists(link):
        os.symlink(naarpc, link)
    self.base_env = {k: v for k, v in os.environ.items()
                     if k in ("PATH", "TEST_SRCDIR", "TEST_WORKSPACE", "TEST_TMPDIR", "LANG",
                              "TZ", "RUNFILES_DIR")}
    self.base_env.setdefault("PATH", "/usr/bin:/bin")
    self.base_env["DOCTEST_ROOT"] = root
    self.base_env["NAARPC_NO_PROGRESS"] = "1"
    self.base_env["NAARPC_NO_INSTALL"] = "1"

  def populate(self, directory):
    """`directory` looks like a checkout: the workspace's files (links) and
    .bazel/bin (the built targets)."""
    for entry in os.listdir(self.root):
      if not entry.startswith("."):
        os.symlink(os.path.join(self.root, entry), os.path.join(directory, entry))
    os.makedirs(os.path.join(directory, ".bazel"), exist_ok=True)
    os.symlink(self.root, os.path.join(directory, ".bazel", "bin"))


# ----- the treatments -----------------------------------------------------------

CPP_PRELUDE = """\
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "naarpc/naarpc.h"
#include "naarpc/impl/codegen_support.h"
using namespace std::chrono_literals;
"""


class Checker:
  def __init__(self, env):
    self.env = env
    self.counts = {"commands": 0, "outputs": 0, "compiled": 0, "idl": 0, "excerpts": 0,
                   "golden": 0, "by": 0, "text": 0}
    self.skipped = []  # (where, reason)
    self.cpp_jobs = []

  # -- documents --
  def check_document(self, path):
    with open(os.path.join(self.env.root, path)) as f:
      blocks = parse_blocks(path, f.read())
    session = None
    previous = None  # (where, command, output) of the last sh block's last command
    errors = []
    try:
      for b in blocks:
        try:
          self.lint_commands(b)
          if "skip" in b.options:
            if not b.options["skip"].strip():
              raise DocError(f"{b.where(-1)}: skip needs a reason: skip=\"why\"")
            self.skipped.append((b.where(-1), b.options["skip"]))
            previous = None
            continue
          if "by" in b.options:
            self.check_by(b)
            previous = None
            continue
          if b.lang in ("sh", "bash", "shell", "console") or (b.lang == "" and self.is_transcript(b)):
            session = session or Session(self.env, None, path)
            with BlockJobs(b, session):
              if b.lang == "" or b.lang == "console":
                self.run_transcript(b, session)
                previous = None
              else:
                previous = self.run_commands(b, session)
            continue
          if b.lang == "":
            if previous is FAILED:
              previous = None  # the output of a command that failed (reported)
              continue
            if previous is None:
              raise DocError(f"{b.where(-1)}: a plain block the doc test cannot place: not "
                             "after a command block, no `$ ` command lines; mark it "
                             "<!-- doctest: skip=\"why\" --> or show its command")
            where, command, output = previous
            check_output([(k, l) for k, l in enumerate(session.substitute("\n".join(b.lines))
                                                       .split("\n"))],
                         output, "numbers" in b.options, b.where, command)
            self.counts["outputs"] += 1
            previous = None
            continue
          previous = None
          if b.lang in ("cpp", "c++"):
            self.compile_cpp(b)
          elif b.lang == "yaml":
            self.check_yaml(b)
          elif b.lang in ("python", "starlark"):
            self.check_excerpt(b, required=True)
          elif b.lang == "text" and b.lines and b.lines[0].startswith("golden:"):
            self.counts["golden"] += 1  # //runtime/wire:protocol_doc_test
          elif b.lang == "text":
            self.counts["text"] += 1  # a diagram or a sample: nothing to run
          else:
            raise DocError(f"{b.where(-1)}: a ```{b.lang} block the doc test does not know "
                           "how to run; mark it <!-- doctest: skip=\"why\" --> or "
                           "<!-- doctest: by=//its:test -->")
        except DocError as e:
          errors.append(str(e))
          previous = FAILED if b.lang in ("sh", "bash", "shell") else None
      try:
        self.finish_cpp()  # the document's last snippets: its errors and counts
      except DocError as e:
        errors.append(str(e))
    finally:
      if session:
        session.close()
    return errors

  @staticmethod
  def lint_commands(b):
    """Rules for every command a doc shows, run here or not (skip=, by=):
    no unbounded parallel build (`make -j`, `cmake --build DIR -j`): on a
    small machine it starves everything else."""
    if b.lang in ("sh", "bash", "shell", "console"):
      commands = [(k, strip_comment(t)) for k, t in logical_lines(b.lines)]
    elif b.lang == "":
      commands = [(k, strip_comment(l[2:])) for k, l in enumerate(b.lines) if l.startswith("$ ")]
    else:
      return
    for k, command in commands:
      if UNBOUNDED_JOBS.search(command):
        raise DocError(f"{b.where(k)}: `{command}`: a parallel build without a job count "
                       "starts every job at once; give one (`-j \"$(nproc)\"`)")

  @staticmethod
  def is_transcript(b):
    return any(l.startswith("$ ") for l in b.lines)

  # -- shell --
  def run_commands(self, b, session):
    last = None
    for k, text in logical_lines(b.lines):
      command = strip_comment(text)
      if not command:
        continue
      prefix = b.options.get("skip-lines")
      if prefix and command.startswith(prefix):
        reason = b.options.get("reason", "").strip()
        if not reason:
          raise DocError(f"{b.where(-1)}: skip-lines needs a reason: reason=\"why\"")
        self.skipped.append((b.where(k), f"`{command}`: {reason}"))
        continue
      output = session.run(command, b.where(k))
      self.counts["commands"] += 1
      last = (b.where(k), command, output)
    return last

  def run_transcript(self, b, session):
    if True:
      steps = []  # [first line, command, [(line, expected)]]
      k = 0
      while k < len(b.lines):
        line = b.lines[k]
        if line.startswith("$ "):
          start = k
          command = line[2:]
          while command.rstrip().endswith("\\") and k + 1 < len(b.lines):
            k += 1
            command = command.rstrip()[:-1] + " " + b.lines[k].strip()
          steps.append([start, command, []])
        elif steps:
          steps[-1][2].append((k, line))
        k += 1
      for start, command, expected in steps:
        expected = [(n, session.substitute(l)) for n, l in expected]
        if "serve" in b.options:
          self.check_job_output(b, session, start, command, expected)
        else:
          output = session.run(command, b.where(start), check=False)
          check_output(expected, output, "numbers" in b.options, b.where,
                       session.substitute(command))
        self.counts["commands"] += 1
        self.counts["outputs"] += 1

  def check_job_output(self, b, session, start, command, expected, timeout=60):
    """A command that serves until stopped: its output so far, once it
    shows every documented line (bounded by `timeout`)."""
    session.start_job(command if "--port" in command else command, b.where(start))
    p, _, log = session.jobs[-1]
    deadline = time.monotonic() + timeout
    try:
      while True:
        try:
          check_output(expected, open(log).read(), "numbers" in b.options, b.where,
                       session.substitute(command))
          return
        except DocError:
          if time.monotonic() > deadline or p.poll() is not None:
            raise
        time.sleep(0.02)  # polls a condition (the output), bounded by the deadline
    finally:
      session.terminate(p)

  # -- by another test --
  def check_by(self, b):
    target = b.options["by"]
    ident = b.options.get("id", "")
    if not ident:
      raise DocError(f"{b.where(-1)}: by={target} needs id=NAME, the name that test extracts")
    m = re.fullmatch(r"//([\w/]+):(\w+)", target)
    if not m:
      raise DocError(f"{b.where(-1)}: by={target}: not a //package:test label")
    package = os.path.join(self.env.root, m.group(1))
    found = False
    for entry in (os.listdir(package) if os.path.isdir(package) else []):
      full = os.path.join(package, entry)
      if os.path.isfile(full) and entry.endswith((".sh", ".py")):
        with open(full, errors="replace") as f:
          text = f.read()
        names_id = bool(re.search(rf"\b{re.escape(ident)}\b", text))
        found |= f"extract {b.path}" in text and names_id
    if not found:
      raise DocError(f"{b.where(-1)}: {target} does not run this block (its scripts in "
                     f"{m.group(1)}/ name neither 'extract {b.path}' nor '{ident}')")
    self.counts["by"] += 1

  # -- C++ --
  def compile_cpp(self, b):
    includes = [i for i in b.options.get("include", "").split(",") if i]
    # Hidden setup: the lines before a `---` line go before the snippet, the
    # rest after it (e.g. a class around a member function).
    before, after = b.setup, []
    after_line = 0
    if "---" in [l.strip() for l in b.setup]:
      k = [l.strip() for l in b.setup].index("---")
      before, after = b.setup[:k], b.setup[k + 1:]
      after_line = b.setup_line + k + 1
    # Errors in the hidden setup point at its lines in the directive.
    setup_at = f'#line {b.setup_line} "{b.path}"\n' if b.setup_line else ""
    after_at = f'#line {after_line} "{b.path}"\n' if after_line else '#line 1 "(setup)"\n'
    src = CPP_PRELUDE + "".join(f'#include "{i}"\n' for i in includes)
    if b.options.get("wrap") == "function":
      src += "int DocSnippet() {\n" + setup_at + "\n".join(before) + "\n"
      src += f'#line {b.line + 1} "{b.path}"\n' + "\n".join(b.lines) + "\n"
      src += after_at + "\n".join(after) + "\n}\n"
    else:
      src += setup_at + "\n".join(before) + "\n"
      src += f'#line {b.line + 1} "{b.path}"\n' + "\n".join(b.lines) + "\n"
      src += after_at + "\n".join(after) + "\n"
    fd, name = tempfile.mkstemp(suffix=".cc", dir=self.env.tmp)
    with os.fdopen(fd, "w") as f:
      f.write(src)
    command = ["g++", "-std=c++20", "-fsyntax-only", "-Wno-unused", "-I", self.env.gen,
               "-I", self.env.root,
               "-I", os.path.join(self.env.root, "include"), name]
    self.cpp_jobs.append((b, subprocess.Popen(command, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True)))
    if len(self.cpp_jobs) >= 2:
      self.finish_cpp()

  def finish_cpp(self):
    errors = []
    for b, p in self.cpp_jobs:
      out, _ = p.communicate()
      if p.returncode != 0:
        errors.append(f"{b.where(-1)}: the C++ snippet does not compile:\n" + "\n".join(
            l for l in out.split("\n") if b.path in l or "error" in l)[:4000])
      else:
        self.counts["compiled"] += 1
    self.cpp_jobs = []
    if errors:
      raise DocError("\n".join(errors))

  # -- YAML and Starlark --
  def check_yaml(self, b):
    keys = {l.split(":")[0] for l in b.lines if re.match(r"^\w+:", l)}
    excerpt = bool(b.lines) and re.match(r"^#\s*\S+\s*$", b.lines[0])
    if excerpt:
      self.check_excerpt(b, required=True)
    if {"package", "services"} <= keys:
      fd, name = tempfile.mkstemp(suffix=".naa.yaml", dir=self.env.tmp)
      with os.fdopen(fd, "w") as f:
        f.write("\n".join(b.lines) + "\n")
      p = subprocess.run([os.path.join(self.env.root, "tools/naarpc/naarpc"), "describe", name],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      if p.returncode != 0:
        raise DocError(f"{b.where(-1)}: the IDL does not load:\n" +
                       p.stdout.replace(name, b.path))
      self.counts["idl"] += 1
      if "generate" in b.options:
        self.generate(b, name)
      return
    if not excerpt:
      self.check_excerpt(b, required=True)

  def generate(self, b, idl):
    """The code generated from this IDL block, on the snippets' include path
    ahead of the workspace's: `generate=DIR/STEM.naa.yaml` names the file it
    stands for (C++ snippets include "DIR/STEM.naa.h")."""
    target = b.options["generate"]
    directory, _, base = target.rpartition("/")
    stem = base[:-len(".naa.yaml")]
    out = os.path.join(self.env.gen, directory)
    os.makedirs(out, exist_ok=True)
    ir = os.path.join(out, stem + ".naa.ir.json")
    copy = os.path.join(out, base)
    with open(idl) as src, open(copy, "w") as dst:
      dst.write(src.read())
    for command in (
        [os.path.join(self.env.root, "idl/naarpc_idlc"), copy, "--include_prefix", directory,
         "--label", target, "--out", ir],
        ["/usr/bin/python3", os.path.join(self.env.root, "codegen/naarpc_gen.py"), ir,
         "--out_dir", out]):
      p = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      if p.returncode != 0:
        raise DocError(f"{b.where(-1)}: generating code from this IDL failed:\n{p.stdout}")

  def check_excerpt(self, b, required):
    m = re.match(r"^#\s*(\S+)\s*$", b.lines[0]) if b.lines else None
    if not m or not os.path.isfile(os.path.join(self.env.root, m.group(1))):
      if required:
        raise DocError(f"{b.where(-1)}: a ```{b.lang} block that is neither a whole IDL nor "
                       "an excerpt (first line `# PATH` of a file in the data of "
                       "//tests/docs:doc_test); mark it <!-- doctest: skip=\"why\" -->")
      return
    with open(os.path.join(self.env.root, m.group(1))) as f:
      have = [strip_comment(l) for l in f.read().split("\n")]
    pos = 0
    for k, line in enumerate(b.lines[1:], start=1):
      want = strip_comment(line)
      if not want:
        continue
      while pos < len(have) and have[pos] != want:
        pos += 1
      if pos == len(have):
        raise DocError(f"{b.where(k)}: `{line.strip()}` is not in {m.group(1)} "
                       "(an excerpt shows the file's lines in order)")
      pos += 1
    self.counts["excerpts"] += 1


def extract(root, path, ident):
  """The text of the block marked id=IDENT (for tests that run it)."""
  with open(os.path.join(root, path)) as f:
    for b in parse_blocks(path, f.read()):
      if b.options.get("id") == ident:
        return "\n".join(b.lines) + "\n"
  raise SystemExit(f"doctest: no block with id={ident} in {path}")


def main(argv):
  root = os.path.join(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", ""))
  if len(argv) >= 2 and argv[1] == "extract":
    sys.stdout.write(extract(root if os.path.exists(os.path.join(root, argv[2])) else ".",
                             argv[2], argv[3]))
    return 0
  docs = [os.path.normpath(d) for d in argv[1:]]
  tmp = tempfile.mkdtemp(prefix="doctest-", dir=os.environ.get("TEST_TMPDIR"))
  checker = Checker(Env(root, tmp))
  errors = []
  for doc in docs:
    before, skipped = dict(checker.counts), len(checker.skipped)
    doc_errors = checker.check_document(doc)
    errors += doc_errors
    n = {k: checker.counts[k] - before[k] for k in before}
    print(f"doctest: {doc}: {n['commands']} commands, "
          f"{n['compiled'] + n['idl'] + n['excerpts'] + n['by']} snippets, "
          f"{len(checker.skipped) - skipped} not run"
          + (f", {len(doc_errors)} FAILED" if doc_errors else ""))
  try:
    checker.finish_cpp()
  except DocError as e:
    errors.append(str(e))
  c = checker.counts
  snippets = c["compiled"] + c["idl"] + c["excerpts"] + c["by"]
  print(f"doctest: {len(docs)} documents ({', '.join(docs)})")
  print(f"doctest: {c['commands']} commands run ({c['outputs']} outputs checked), {snippets} "
        f"snippets checked ({c['compiled']} C++ compiled, {c['idl']} IDL files loaded, "
        f"{c['excerpts']} excerpts matched, {c['by']} run by other tests), {c['golden']} byte "
        f"vectors (by protocol_doc_test), {c['text']} diagrams (```text), "
        f"{len(checker.skipped)} not run:")
  for where, reason in checker.skipped:
    print(f"  {where}: {reason}")
  for e in errors:
    print("FAIL " + e, file=sys.stderr)
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
