#!/usr/bin/env python3
"""Grammar tests for the VS Code TextMate grammar, in vscode-tmgrammar-test's format.

Each test file starts with `// SYNTAX TEST "source.sflow" "description"`.  Lines
that start with `//` are assertions about the source line above them (they are
not part of the source, exactly as in vscode-tmgrammar-test):

    let x = 1
    // <--- storage.type.variable.sflow          columns 0..2 (one per '-')
    //  ^ variable.other.definition.sflow        the columns under the carets
    // <~~~~- keyword.operator.assignment.sflow  '~' skips columns
    //      ^ - string.quoted.double.sflow       '-' lists scopes that must be absent

The required scopes must appear in each token's scope stack in that order (not
necessarily adjacent); an excluded scope must not appear at all.  These rules
and the assertion syntax mirror vscode-tmgrammar-test's src/unit, so the files
also run under that tool.

The engine is babi.highlight from PyPI (babi, a text editor): a line-at-a-time
TextMate tokenizer that follows vscode-textmate (rule stack carried across
lines, end pattern tried before or after the patterns per applyEndPatternLast,
nested captures, back-references, \\G) on onigurumacffi, the Oniguruma regex
engine that VS Code also uses.  textmate-grammar-python was tried first and
dropped: it re-parses recursively and loses the third level of nested
parentheses.  scripts/install-pydeps.sh installs babi into build/pydeps (or
$SFLOW_PYDEPS); when this interpreter cannot import it, the script re-runs
itself under that environment's Python.

Usage: tmgrammar_test.py [--grammar FILE] [--dump] PATH...  (files or folders)
Exit status: 0 when every assertion holds, 1 otherwise.
"""
import argparse
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_GRAMMAR = os.path.join(REPO, "grammar", "vscode", "syntaxes", "sflow.tmLanguage.json")

# The assertion grammar of vscode-tmgrammar-test (src/unit/parsing.ts).
HEADER_RE = re.compile(r'^(\S+)\s+SYNTAX\s+TEST\s+"([^"]+)"(?:\s+"([^"]+)")?\s*$')
SCOPES = r"((?:\s*\w[-\w.]*)*)(?:\s*-)?((?:\s*\w[-\w.]*)*)\s*$"
UP_RE = re.compile(r"^\s*((?:\^+\s*)+)" + SCOPES)
LEFT_RE = re.compile(r"^(\s*)<(~*)(-+)" + SCOPES)


def import_tokenizer():
    """Returns babi.highlight, re-executing under build/pydeps if needed."""
    try:
        import babi.highlight
    except ImportError:
        venv = os.environ.get("SFLOW_PYDEPS") or os.path.join(REPO, "build", "pydeps")
        python = os.path.join(venv, "bin", "python")
        if os.path.exists(python) and os.environ.get("SFLOW_PYDEPS_REEXEC") != "1":
            os.environ["SFLOW_PYDEPS_REEXEC"] = "1"
            os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("tmgrammar_test: the TextMate engine (PyPI package babi) is not "
                 "installed (looked in %s); run scripts/install-pydeps.sh" % venv)
    return babi.highlight


class Tokenizer:
    """vscode-textmate's contract: one line at a time, each with its "\\n",
    the rule stack carried from line to line."""

    def __init__(self, grammar_path):
        hl = import_tokenizer()
        with open(grammar_path, encoding="utf-8") as f:
            self.scope = json.load(f)["scopeName"]
        # babi finds a grammar by file name: <scopeName>.json in a folder.
        self._dir = tempfile.TemporaryDirectory(prefix="sflow-tm-")
        os.symlink(os.path.abspath(grammar_path),
                   os.path.join(self._dir.name, self.scope + ".json"))
        self._hl = hl
        self._compiler = hl.Grammars(self._dir.name).compiler_for_scope(self.scope)

    def tokenize(self, source):
        """Returns, per source line, a list of tokens (start, end, [scopes])."""
        state, tokens = self._compiler.root_state, []
        for n, line in enumerate(source):
            state, regions = self._hl.highlight_line(
                self._compiler, state, line + "\n", first_line=(n == 0))
            row = [(r.start, min(r.end, len(line)), list(r.scope))
                   for r in regions if r.start < len(line)]
            tokens.append(row)
        return tokens


class Assertion:
    def __init__(self, line_no, src_index, start, end, scopes, exclude):
        self.line_no = line_no        # 1-based line of the assertion in the file
        self.src_index = src_index    # 0-based index into the source lines
        self.start, self.end = start, end
        self.scopes, self.exclude = scopes, exclude


def parse_assertion(text, comment, line_no, src_index):
    """Returns the assertions on one comment line ([] if it holds none)."""
    s = text[len(comment):]
    if s.strip().startswith("^"):
        m = UP_RE.match(s)
        if not m or not (m.group(2).strip() or m.group(3).strip()):
            raise ValueError("line %d: invalid assertion: %s" % (line_no, text))
        scopes, exclude = m.group(2).split(), m.group(3).split()
        return [Assertion(line_no, src_index, len(comment) + c.start(),
                          len(comment) + c.end(), scopes, exclude)
                for c in re.finditer(r"\^+", s[:m.end(1)])]
    m = LEFT_RE.match(s)
    if not m:
        return []
    if not (m.group(4).strip() or m.group(5).strip()):
        raise ValueError("line %d: assertion has no scopes: %s" % (line_no, text))
    start = len(m.group(2))
    return [Assertion(line_no, src_index, start, start + len(m.group(3)),
                      m.group(4).split(), m.group(5).split())]


def parse_test_file(path):
    """Returns (scope, source lines, their 1-based file lines, assertions)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    header = HEADER_RE.match(lines[0]) if lines else None
    if not header:
        raise ValueError('line 1: expected `// SYNTAX TEST "source.sflow" "description"`')
    comment, scope = header.group(1), header.group(2)
    source, source_lines, assertions = [], [], []
    for i, text in enumerate(lines[1:], start=2):
        if text.startswith(comment):
            if source:  # assertions before any source line have no target
                assertions += parse_assertion(text, comment, i, len(source) - 1)
        else:
            source.append(text)
            source_lines.append(i)
    return scope, source, source_lines, assertions


def missing_scopes(required, actual):
    """The required scopes not found in order in actual (as vscode-tmgrammar-test)."""
    j = 0
    for scope in actual:
        if j < len(required) and scope == required[j]:
            j += 1
    return required[j:]


def check_file(tokenizer, path, dump=False):
    """Returns (number of assertions, list of failure messages)."""
    scope, source, source_lines, assertions = parse_test_file(path)
    if scope != tokenizer.scope:
        return 0, ["%s:1:1: test is for %s, grammar is %s" % (path, scope, tokenizer.scope)]
    tokens = tokenizer.tokenize(source)
    if dump:
        for n, row in enumerate(tokens):
            for start, end, scopes in row:
                print("%s:%d:%d: %r %s" % (path, source_lines[n], start + 1,
                                           source[n][start:end], " ".join(scopes)))
    failures = []  # one message per failing assertion
    for a in assertions:
        problems = []
        row = tokens[a.src_index]
        hit = [t for t in row if a.start < t[1] and a.end > t[0]]
        where = "%s:%d:%d" % (path, source_lines[a.src_index], a.start + 1)
        if not hit and a.scopes:
            problems.append("%s: columns %d-%d are past the end of the line "
                            "(assertion on line %d expects %s)"
                            % (where, a.start + 1, a.end, a.line_no, " ".join(a.scopes)))
        for start, end, scopes in hit:
            missing = missing_scopes(a.scopes, scopes)
            unexpected = [s for s in a.exclude if s in scopes]
            if missing or unexpected:
                text = source[a.src_index][start:end]
                msg = "%s:%d:%d: %r (assertion on line %d)\n" % (
                    path, source_lines[a.src_index], start + 1, text, a.line_no)
                if missing:
                    msg += "    expected: %s\n    missing:  %s\n" % (
                        " ".join(a.scopes), " ".join(missing))
                if unexpected:
                    msg += "    must not have: %s\n" % " ".join(unexpected)
                msg += "    actual:   %s" % " ".join(scopes)
                problems.append(msg)
        if problems:
            failures.append("\n".join(problems))
    return len(assertions), failures


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".sflow"))
        else:
            files.append(p)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammar", default=DEFAULT_GRAMMAR)
    ap.add_argument("--dump", action="store_true", help="print every token's scopes")
    ap.add_argument("paths", nargs="*", default=[os.path.join(HERE, "syntax")])
    args = ap.parse_args()

    tokenizer = Tokenizer(args.grammar)

    files = collect(args.paths)
    if not files:
        sys.exit("tmgrammar_test: no .sflow test files in %s" % " ".join(args.paths))
    total = failed = 0
    for path in files:
        try:
            n, failures = check_file(tokenizer, os.path.relpath(path), args.dump)
        except ValueError as e:
            n, failures = 1, ["%s: %s" % (path, e)]
        total += n
        failed += len(failures)
        for msg in failures:
            print(msg)
        print("%s %s: %d assertions" % ("FAIL" if failures else "ok  ", os.path.relpath(path), n))
    if total == 0:
        print("tmgrammar_test: no assertions found")
        return 1
    print("editors/textmate: %d passed, %d failed" % (total - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
