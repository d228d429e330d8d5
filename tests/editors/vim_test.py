#!/usr/bin/env python3
"""Checks the Vim files in grammar/vim with a real headless Vim.

Vim starts with no user configuration (-u NONE), grammar/vim first on
'runtimepath', and filetype detection, plugins, indent and syntax on; it opens
tests/editors/vim/sample.sflow and runs a generated script that writes, for
every position in CHECKS, the syntax group there (synID), the standard group
it links to (from :highlight) and the group the whole link chain ends in
(synIDtrans).  It also records the buffer's 'filetype', 'commentstring',
'comments', b:current_syntax, b:undo_ftplugin, and how `=` re-indents a
snippet.  Python then compares; every mismatch names sample.sflow:line:col.

Usage: vim_test.py [--vim PROGRAM]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SAMPLE = os.path.join(HERE, "vim", "sample.sflow")

# (line, text on that line, which occurrence of it, syntax group, group it links to).
# The column is where the text starts, so the table survives edits to the line.
CHECKS = [
    (1, "import", 1, "sflowInclude", "Include"),
    (2, "//", 1, "sflowComment", "Comment"),
    (2, "TODO", 1, "sflowTodo", "Todo"),
    (2, "line", 1, "sflowComment", "Comment"),
    (3, "const", 1, "sflowStorage", "StorageClass"),
    (3, "i64", 1, "sflowType", "Type"),
    (3, "=", 1, "sflowOperator", "Operator"),
    (3, "1_000_000", 1, "sflowNumber", "Number"),
    (3, "000_000", 1, "sflowNumber", "Number"),
    (5, "@gpus", 1, "sflowAnnotation", "PreProc"),
    (5, "gpus", 1, "sflowAnnotation", "PreProc"),
    (5, "0.5", 1, "sflowFloat", "Float"),
    (5, "@retry", 1, "sflowAnnotation", "PreProc"),
    (6, "task", 1, "sflowKeyword", "Keyword"),
    (6, "score", 1, "sflowFunction", "Function"),
    (6, "chunk", 1, "", ""),
    (6, "f32", 1, "sflowType", "Type"),
    (6, "->", 1, "sflowOperator", "Operator"),
    (6, "f64", 1, "sflowType", "Type"),
    (7, "let", 1, "sflowStorage", "StorageClass"),
    (7, '"tab', 1, "sflowString", "String"),
    (7, "\\t", 1, "sflowEscape", "SpecialChar"),
    (7, "\\q", 1, "sflowEscapeError", "Error"),
    (7, "// not", 1, "sflowString", "String"),
    (7, "not a", 1, "sflowString", "String"),
    (7, "\\u{1F600}", 1, "sflowEscape", "SpecialChar"),
    (7, '"', 2, "sflowString", "String"),
    (8, "var", 1, "sflowStorage", "StorageClass"),
    (8, "0x2A", 1, "sflowNumber", "Number"),
    (8, "3e-4", 1, "sflowFloat", "Float"),
    (8, "-4", 1, "sflowFloat", "Float"),
    (8, ".5", 1, "sflowFloat", "Float"),
    (8, "1.0", 1, "sflowFloat", "Float"),
    (8, "1e+20", 1, "sflowFloat", "Float"),
    (8, "+", 1, "sflowOperator", "Operator"),
    (9, "for", 1, "sflowRepeat", "Repeat"),
    (9, "in", 1, "sflowRepeat", "Repeat"),
    (9, "0..10", 1, "sflowNumber", "Number"),
    (9, "..", 1, "sflowOperator", "Operator"),
    (9, "10", 1, "sflowNumber", "Number"),
    (9, "if", 1, "sflowConditional", "Conditional"),
    (9, "%", 1, "sflowOperator", "Operator"),
    (9, "==", 1, "sflowOperator", "Operator"),
    (9, "continue", 1, "sflowStatement", "Statement"),
    (9, "else", 1, "sflowConditional", "Conditional"),
    (9, "break", 1, "sflowStatement", "Statement"),
    (10, "while", 1, "sflowRepeat", "Repeat"),
    (10, "-=", 1, "sflowOperator", "Operator"),
    (11, "return", 1, "sflowStatement", "Statement"),
    (11, "format", 1, "", ""),   # 'for' inside an identifier is not a keyword
    (11, "fmt", 1, "sflowBuiltin", "Function"),
    (11, "sqrt", 1, "sflowBuiltin", "Function"),
    (14, "/*", 1, "sflowComment", "Comment"),
    (15, "fn", 1, "sflowComment", "Comment"),
    (15, '"quotes"', 1, "sflowComment", "Comment"),
    (15, "*/", 1, "sflowComment", "Comment"),
    (16, "actor", 1, "sflowStructure", "Structure"),
    (16, "Counter", 1, "sflowTypeName", "Typedef"),
    (17, "var", 1, "sflowStorage", "StorageClass"),
    (18, "fn", 1, "sflowKeyword", "Keyword"),
    (18, "add", 1, "sflowFunction", "Function"),
    (18, "future", 1, "sflowType", "Type"),
    (18, "await", 1, "sflowKeyword", "Keyword"),
    (20, "struct", 1, "sflowStructure", "Structure"),
    (20, "Batch", 1, "sflowTypeName", "Typedef"),
    (20, "bool", 1, "sflowType", "Type"),
    (21, "kernel", 1, "sflowKeyword", "Keyword"),
    (21, "saxpy", 1, "sflowFunction", "Function"),
    (21, "launch", 1, "sflowKeyword", "Keyword"),
    (21, "saxpy", 2, "", ""),
    (22, "workflow", 1, "sflowKeyword", "Keyword"),
    (22, "main", 1, "sflowFunction", "Function"),
    (22, "spawn", 1, "sflowKeyword", "Keyword"),
    (22, "print", 1, "sflowBuiltin", "Function"),
    (22, "true", 1, "sflowBoolean", "Boolean"),
    (22, "false", 1, "sflowBoolean", "Boolean"),
    (23, "round", 1, "sflowBuiltin", "Function"),
    (23, "PI", 1, "sflowConstant", "Constant"),
    (23, "sort", 1, "sflowBuiltin", "Function"),
    (24, "tensor", 1, "sflowType", "Type"),
    (24, "@", 1, "sflowOperator", "Operator"),
    (5, "@retry", 1, "sflowAnnotation", "PreProc"),
]

# Buffer settings the ftplugin must make.
SETTINGS = {
    "filetype": "sflow",
    "commentstring": "// %s",
    "comments": "s1:/*,mb:*,ex:*/,://",
    "current_syntax": "sflow",
    # sflow's layout: two spaces, no tabs (so `gg=G` writes no tabs).
    "shiftwidth": 2,
    "softtabstop": 2,
    "expandtab": 1,
}

# `=` over these lines (the ftplugin's settings) must give INDENTED: the
# layout `sflowc fmt` writes.
UNINDENTED = ["fn f(x: i64) -> i64 {", "if x > 0 {", "return 1", "}", "let xs = [",
              "1, 2", "]", "return 0 // done {", "}",
              "fn g(a: i64,", "b: i64) -> i64 {", "let s = \"(\" + str(a) +", "str(b)",
              "print(a, [b,", "a])", "let p = Point { x: 1.0,", "y: 2.0 }", "let t = zeros([2])",
              ".sum(0)", "return a // the sum", "// of both", "}"]
INDENTED = ["fn f(x: i64) -> i64 {", "  if x > 0 {", "    return 1", "  }", "  let xs = [",
            "    1, 2", "  ]", "  return 0 // done {", "}",
            "fn g(a: i64,", "     b: i64) -> i64 {", "  let s = \"(\" + str(a) +", "    str(b)",
            "  print(a, [b,", "            a])", "  let p = Point { x: 1.0,", "                  y: 2.0 }",
            "  let t = zeros([2])", "    .sum(0)", "  return a // the sum", "  // of both", "}"]

# Files in the canonical layout that `gg=G` must leave as they are.
REINDENT = ["examples/finetune.sflow", "examples/scoring.sflow", "stdlib/nn.sflow", "stdlib/train.sflow"]


def column(lines, line, text, nth):
    """1-based byte column of the nth occurrence of text on line."""
    s, col = lines[line - 1], -1
    for _ in range(nth):
        col = s.find(text, col + 1)
        if col < 0:
            sys.exit("vim_test: %r (occurrence %d) not on line %d of %s"
                     % (text, nth, line, SAMPLE))
    return len(s[:col].encode("utf-8")) + 1


def query_script(positions, out):
    """The Vim script that records everything as one JSON object in out."""
    pos = ", ".join("[%d, %d]" % p for p in positions)
    return r"""
function! s:Link(name) abort
  if a:name ==# ''
    return ''
  endif
  let out = execute('highlight ' . a:name)
  let m = matchlist(out, 'links to \(\w\+\)')
  return empty(m) ? '' : m[1]
endfunction
let s:res = {'filetype': &filetype, 'commentstring': &commentstring,
      \ 'comments': &comments, 'current_syntax': get(b:, 'current_syntax', ''),
      \ 'undo_ftplugin': get(b:, 'undo_ftplugin', ''), 'indentexpr': &indentexpr,
      \ 'shiftwidth': &shiftwidth, 'softtabstop': &softtabstop, 'expandtab': &expandtab,
      \ 'positions': []}
for [s:l, s:c] in [%(pos)s]
  let s:id = synID(s:l, s:c, 1)
  let s:name = synIDattr(s:id, 'name')
  call add(s:res.positions, [s:name, s:Link(s:name), synIDattr(synIDtrans(s:id), 'name')])
endfor
new
setlocal filetype=sflow
call setline(1, %(unindented)s)
normal! gg=G
let s:res.indented = getline(1, '$')
let s:res.reindent = {}
for s:f in %(reindent)s
  execute 'edit! ' . fnameescape(s:f)
  let s:before = getline(1, '$')
  normal! gg=G
  let s:after = getline(1, '$')
  let s:res.reindent[s:f] = [len(filter(range(len(s:before)), 's:before[v:val] !=# s:after[v:val]')),
        \ len(filter(copy(s:after), 'v:val =~# "\t"'))]
  set nomodified
endfor
call writefile([json_encode(s:res)], %(out)s)
qa!
""" % {"pos": pos, "unindented": json.dumps(UNINDENTED), "out": json.dumps(out),
       "reindent": json.dumps([os.path.join(REPO, f) for f in REINDENT])}


def run_vim(vim, script_path):
    rtp = os.path.join(REPO, "grammar", "vim")
    cmd = [vim, "-N", "-n", "-i", "NONE", "-es", "-u", "NONE",
           "--cmd", "set rtp^=" + rtp.replace(" ", "\\ "),
           "--cmd", "filetype plugin indent on", "--cmd", "syntax on",
           "-S", script_path, SAMPLE]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
    except FileNotFoundError:
        sys.exit("vim_test: %s not found (scripts/install-deps.sh installs vim-nox)" % vim)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vim", default=os.environ.get("VIM_PROGRAM", "vim"))
    args = ap.parse_args()

    with open(SAMPLE, encoding="utf-8") as f:
        lines = f.read().split("\n")
    positions = [(line, column(lines, line, text, nth)) for line, text, nth, _, _ in CHECKS]

    with tempfile.TemporaryDirectory(prefix="sflow-vim-") as tmp:
        out = os.path.join(tmp, "out.json")
        script = os.path.join(tmp, "query.vim")
        with open(script, "w", encoding="utf-8") as f:
            f.write(query_script(positions, out))
        p = run_vim(args.vim, script)
        if not os.path.exists(out):
            sys.exit("vim_test: Vim wrote no results (exit %d)\n%s%s"
                     % (p.returncode, p.stdout, p.stderr))
        with open(out, encoding="utf-8") as f:
            res = json.load(f)

    rel = os.path.relpath(SAMPLE)
    failures, total = [], 0
    for key, want in SETTINGS.items():
        total += 1
        if res[key] != want:
            failures.append("%s: %s is %r, expected %r" % (rel, key, res[key], want))
    for key in ("undo_ftplugin", "indentexpr"):
        total += 1
        if not res[key]:
            failures.append("%s: %s is not set" % (rel, key))
    for (line, text, _, group, link), (_, col), (got, got_link, trans) in zip(
            CHECKS, positions, res["positions"]):
        total += 1
        if got != group or got_link != link:
            failures.append("%s:%d:%d: %r is %s (links to %s, shown as %s), expected %s (links to %s)"
                            % (rel, line, col, text, got or "no group", got_link or "nothing",
                               trans or "nothing", group or "no group", link or "nothing"))
    total += 1
    if res["indented"] != INDENTED:
        failures.append("indent: `=` gave\n    %s\nexpected\n    %s"
                        % ("\n    ".join(res["indented"]), "\n    ".join(INDENTED)))
    for f in REINDENT:
        total += 1
        changed, tabs = res["reindent"].get(os.path.join(REPO, f), [-1, -1])
        if changed or tabs:
            failures.append("indent: gg=G on %s changed %d lines, left %d with tabs" % (f, changed, tabs))
    for msg in failures:
        print(msg)
    print("editors/vim: %d passed, %d failed" % (total - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
