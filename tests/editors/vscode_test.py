#!/usr/bin/env python3
"""The VS Code extension folder (grammar/vscode) is a packageable extension.

Checks the manifest (what `vsce package` needs: name, publisher, version,
engines, license with its file, repository, main; every path it names
exists), that extension.js parses (node --check), and activates the
extension under node with a stand-in for the VS Code host API
(tests/editors/vscode_host): with sflowc given by `sflow.server.path` it must
start `sflowc --lsp` through its language client, whose initialize the real
server answers with the capabilities, and register sflow.restartServer;
with no sflowc it must register the command and start nothing.

    vscode_test.py SFLOWC
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXT = os.path.join(REPO, "grammar", "vscode")
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)


def main():
    sflowc = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build/bin/sflowc"))
    m = json.load(open(os.path.join(EXT, "package.json")))
    for key in ("name", "publisher", "version", "engines", "license", "repository", "main", "description"):
        check(key in m, "package.json has %s" % key)
    lic = m.get("license", "")
    if lic.startswith("SEE LICENSE IN "):
        check(os.path.exists(os.path.join(EXT, lic[len("SEE LICENSE IN "):])), "the license file exists")
    check(m.get("repository", {}).get("directory") == "grammar/vscode", "repository names the folder")
    check("vsce package" in m.get("scripts", {}).get("package", ""), "an npm script packages it")
    check("vscode-languageclient" in m.get("dependencies", {}), "the language client is a dependency")
    paths = [m.get("main", "")] + [g["path"] for g in m["contributes"]["grammars"]] + \
        [l["configuration"] for l in m["contributes"]["languages"] if "configuration" in l]
    for p in paths:
        check(os.path.exists(os.path.join(EXT, p)), "package.json names %s, which exists" % p)
    cmds = [c["command"] for c in m["contributes"].get("commands", [])]
    check("sflow.restartServer" in cmds, "the restart command is contributed")
    check(m["contributes"].get("configurationDefaults", {}).get("[sflow]", {}).get("editor.tabSize") == 2,
          "sflow files default to two-space indents")
    node = shutil.which("node")
    if not node:
        check(False, "node is needed to check extension.js (scripts/install-deps.sh)")
    else:
        r = subprocess.run([node, "--check", os.path.join(EXT, "extension.js")], capture_output=True, text=True)
        check(r.returncode == 0, "extension.js parses: %s" % r.stderr)
        run = os.path.join(HERE, "vscode_host", "run_extension.js")
        r = subprocess.run([node, run, os.path.join(EXT, "extension.js"), sflowc], capture_output=True, text=True,
                           timeout=60)
        out = json.loads(r.stdout or "{}")
        check(out.get("server") == {"command": sflowc, "args": ["--lsp"]}, "the client starts sflowc --lsp: %r" % out)
        check({"scheme": "file", "language": "sflow"} in (out.get("selector") or []), "for sflow files")
        caps = out.get("capabilities") or {}
        check(caps.get("completionProvider") and caps.get("documentFormattingProvider") and caps.get("renameProvider"),
              "the real server answered initialize through it: %r" % caps)
        check(out.get("restarted") is True, "sflow.restartServer restarts the client")
        r = subprocess.run([node, run, os.path.join(EXT, "extension.js"), "/nonexistent/sflowc"],
                           capture_output=True, text=True, timeout=60)
        out = json.loads(r.stdout or "{}")
        check(out.get("server") is None and out.get("commands") == ["sflow.restartServer"],
              "without sflowc: no client, the command still there: %r" % out)
    print("editors/vscode: %d passed, %d failed" % (checks - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
