#!/usr/bin/env python3
"""Drives `sflowc --lsp` as an editor would and checks its answers.

Covers the framing (Content-Length), diagnostics on open and on change,
UTF-16 positions, document symbols, go to definition, hover, malformed
messages (which must never end the server) and the shutdown/exit handshake.
"""
import json
import subprocess
import sys
import time

from rpc import Rpc

SFLOWC = sys.argv[1] if len(sys.argv) > 1 else "build/bin/sflowc"
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)


class Client(Rpc):
    def __init__(self):
        super().__init__(SFLOWC)

    def wait(self, pred, what):
        for _ in range(50):
            m = self.read()
            if pred(m):
                return m
        raise AssertionError("no message: " + what)

    def request(self, method, params):
        i = self.send(method, params)
        return self.wait(lambda m: m.get("id") == i, method)["result"]


URI = "file:///tmp/lsp_test_doc.sflow"
BAD = '''fn f(x: i64) -> i64 {
  return x + "s"
}
workflow main() {
  let s = "😀😀"; let y = undefined_name
}
'''
GOOD = '''struct Point { x: f64, y: f64 }

actor Counter {
  var total: i64 = 0
  fn add(k: i64) -> i64 { total += k; return total }
}

fn norm(p: Point) -> f64 { return sqrt(p.x * p.x + p.y * p.y) }

task score(v: f64) -> f64 { return v * 2.0 }

workflow main() {
  let s = "😀"; let p = Point { x: 3.0, y: 4.0 }
  print(s, norm(p))
  var byname = map<str, Point>()
  let f: fn(Point) -> f64 = norm
  let ws = "a b".split(); print(sort(ws))
}
fn mm(a: tensor, b: tensor) -> tensor { return a @ b + 0.5 }
'''


def diags_of(c):
    m = c.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics", "diagnostics")
    return m["params"]["diagnostics"]


def main():
    c = Client()
    init = c.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    caps = init["capabilities"]
    check(caps["textDocumentSync"]["change"] == 1, "full document sync advertised")
    check(caps.get("hoverProvider") and caps.get("definitionProvider") and caps.get("documentSymbolProvider"),
          "hover/definition/symbols advertised")
    c.send("initialized", {}, request=False)

    c.send("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "sflow", "version": 1, "text": BAD}},
           request=False)
    d = diags_of(c)
    msgs = [x["message"] for x in d]
    check(len(d) == 2, "two diagnostics on open, got %r" % msgs)
    check(any("mismatched" in m for m in msgs), "type error reported")
    und = [x for x in d if "undefined_name" in x["message"]]
    check(len(und) == 1, "undefined name reported")
    if und:
        # `  let s = "😀😀"; let y = undefined_name`: each emoji is 2 UTF-16 units.
        start = und[0]["range"]["start"]
        check(start == {"line": 4, "character": 26}, "UTF-16 column of the error, got %r" % start)
        end = und[0]["range"]["end"]
        check(end == {"line": 4, "character": 40}, "UTF-16 end column, got %r" % end)
    check(all(x["severity"] == 1 for x in d), "errors have severity 1")

    c.send("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2},
                                      "contentChanges": [{"text": GOOD}]}, request=False)
    check(diags_of(c) == [], "no diagnostics once fixed")

    syms = c.request("textDocument/documentSymbol", {"textDocument": {"uri": URI}})
    names = [(s["name"], s["kind"]) for s in syms]
    check(("Point", 23) in names and ("Counter", 5) in names and ("norm", 12) in names
          and ("score", 12) in names and ("main", 12) in names, "document symbols, got %r" % names)
    counter = [s for s in syms if s["name"] == "Counter"]
    if counter:
        kids = [k["name"] for k in counter[0].get("children", [])]
        check(kids == ["total", "add"], "actor children, got %r" % kids)

    # Go to definition of `norm` in `  print(s, norm(p))` (line 13, characters 11-14).
    loc = c.request("textDocument/definition", {"textDocument": {"uri": URI}, "position": {"line": 13, "character": 12}})
    check(loc and loc["uri"] == URI and loc["range"]["start"] == {"line": 7, "character": 3},
          "definition of norm, got %r" % loc)
    # `p` is declared after an emoji on line 12 (`  let s = "😀"; let p = ...`,
    # the emoji counts 2 UTF-16 units) and used as `norm(p)` on line 13.
    loc = c.request("textDocument/definition", {"textDocument": {"uri": URI}, "position": {"line": 13, "character": 16}})
    check(loc and loc["range"]["start"] == {"line": 12, "character": 20}, "definition of local p (UTF-16), got %r" % loc)

    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 13, "character": 16}})
    check(hv and "let p: Point" in hv["contents"]["value"], "hover shows the type, got %r" % hv)
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 13, "character": 12}})
    check(hv and "fn norm(p: Point) -> f64" in hv["contents"]["value"], "hover on a call, got %r" % hv)
    # The data core's methods and builtins (line 16: `  let ws = "a b".split(); print(sort(ws))`).
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 16, "character": 20}})
    check(hv and "str.split() -> str[]" in hv["contents"]["value"], "hover on a str method, got %r" % hv)
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 16, "character": 34}})
    check(hv and "builtin sort(xs: str[]) -> str[]" in hv["contents"]["value"], "hover on sort, got %r" % hv)

    # map<str, Point>() and fn(Point) -> f64: a struct named inside a map or a
    # fn type goes to its definition; hover gives the map and fn types.
    loc = c.request("textDocument/definition", {"textDocument": {"uri": URI}, "position": {"line": 14, "character": 25}})
    check(loc and loc["range"]["start"] == {"line": 0, "character": 7},
          "definition of Point inside map<str, Point>(), got %r" % loc)
    loc = c.request("textDocument/definition", {"textDocument": {"uri": URI}, "position": {"line": 15, "character": 13}})
    check(loc and loc["range"]["start"] == {"line": 0, "character": 7},
          "definition of Point inside fn(Point) -> f64, got %r" % loc)
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 14, "character": 7}})
    check(hv and "var byname: map<str, Point>" in hv["contents"]["value"], "hover on a map, got %r" % hv)
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 15, "character": 6}})
    check(hv and "let f: fn(Point) -> f64" in hv["contents"]["value"], "hover on a fn value, got %r" % hv)

    # The tensor type (line 18: `fn mm(a: tensor, b: tensor) -> tensor { return a @ b + 0.5 }`).
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 18, "character": 10}})
    check(hv and "tensor: an n-dimensional f32 array" in hv["contents"]["value"], "hover on tensor, got %r" % hv)
    hv = c.request("textDocument/hover", {"textDocument": {"uri": URI}, "position": {"line": 18, "character": 48}})
    check(hv and "let a: tensor" in hv["contents"]["value"], "hover on a tensor parameter, got %r" % hv)

    # Malformed input must not end the server.
    c.send_raw(b"Content-Length: 5\r\n\r\n{bad}")
    m = c.read()
    check(m.get("error", {}).get("code") == -32700, "parse error answered, got %r" % m)
    c.send_raw(b"X-Nothing: 1\r\n\r\n")
    c.send_raw(b"Content-Length: 2\r\n\r\n[]")
    m = c.read()
    check("error" in m, "non-object answered with an error")
    i = c.send("no/such/method", {})
    m = c.wait(lambda m: m.get("id") == i, "unknown method")
    check(m.get("error", {}).get("code") == -32601, "unknown method answered with -32601")
    i = c.send("textDocument/hover", {"textDocument": {"uri": "file:///nope.sflow"}, "position": {"line": 0, "character": 0}})
    m = c.wait(lambda m: m.get("id") == i, "hover on unknown doc")
    check("error" in m, "request on an unknown document is an error, not a crash")

    c.request("shutdown", None)
    c.send("exit", None, request=False)
    try:
        code = c.p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        c.p.kill()
        code = None
    check(code == 0, "exit code 0 after shutdown/exit, got %r" % code)
    print("%d passed, %d failed" % (checks - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
