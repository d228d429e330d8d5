#!/usr/bin/env python3
"""Checks that the editor grammars know exactly the words in grammar/keywords.txt.

grammar/keywords.txt is the one list of sflow's reserved words: keywords one
per line, then the type names after `# types`, then the builtin functions after
`# builtins`, then predeclared constants after `# constants`.  The compiler's
lexer is checked against the same file elsewhere.

TextMate (grammar/vscode/syntaxes/sflow.tmLanguage.json): every word alternation
in a pattern, `\\b(?:a|b)\\b` or `\\b(a|b)`, is classified by the scope it gets (the
capture's scope for a capturing group, else the rule's name):
keyword.*, storage.type.* (not annotations) and constant.language.* are
keywords; support.type.* are types; support.function.builtin.* are builtins;
support.constant.builtin.* are constants.

Vim (grammar/vim/syntax/sflow.vim): every `syn keyword` line is classified by
its group.

Each class must equal its section of keywords.txt: nothing missing, nothing
extra.  A word list under a scope or group this test does not know fails too,
so a new class of words has to be added here deliberately.

Usage: keywords_test.py [--keywords FILE] [--textmate FILE] [--vim FILE]
"""
import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTIONS = ("keywords", "types", "builtins", "constants")

# Vim syntax groups by the section of keywords.txt they draw from.
VIM_GROUPS = {
    "sflowConditional": "keywords", "sflowRepeat": "keywords",
    "sflowStatement": "keywords", "sflowKeyword": "keywords",
    "sflowStructure": "keywords", "sflowStorage": "keywords",
    "sflowInclude": "keywords", "sflowBoolean": "keywords",
    "sflowType": "types", "sflowBuiltin": "builtins", "sflowConstant": "constants",
    "sflowTodo": None,  # TODO/FIXME inside comments, not language words
}
VIM_OPTIONS = {"contained", "skipwhite", "skipnl", "skipempty", "transparent",
               "oneline", "fold", "display", "extend", "conceal", "concealends"}

WORD_LIST = re.compile(r"\\b\((\?:)?([A-Za-z_][A-Za-z0-9_]*(?:\|[A-Za-z_][A-Za-z0-9_]*)*)\)")


def read_keywords(path):
    sections = {s: [] for s in SECTIONS}
    current = "keywords"
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            word = line.strip()
            if not word:
                continue
            if word.startswith("#"):
                current = word[1:].strip()
                if current not in sections:
                    sys.exit("%s:%d: unknown section %r" % (path, n, word))
                continue
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
                sys.exit("%s:%d: not a word: %r" % (path, n, word))
            if any(word in ws for ws in sections.values()):
                sys.exit("%s:%d: %r is listed twice" % (path, n, word))
            sections[current].append(word)
    return sections


def classify_scope(scope):
    """The section a TextMate scope belongs to, None to ignore, '?' if unknown."""
    if scope.startswith("keyword.other.todo."):
        return None
    if scope.startswith("storage.type.annotation."):
        return "?"
    if scope.startswith(("keyword.", "storage.type.", "constant.language.")):
        return "keywords"
    if scope.startswith("support.type."):
        return "types"
    if scope.startswith("support.function.builtin."):
        return "builtins"
    if scope.startswith("support.constant.builtin."):
        return "constants"
    return "?"


def group_number(pattern, pos):
    """The number of the capturing group opened at pattern[pos]."""
    n, i = 0, 0
    while i <= pos:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "(" and not pattern.startswith("(?", i):
            n += 1
        i += 1
    return n


def textmate_words(path):
    """Yields (section, word, where) for every word list in the grammar."""
    with open(path, encoding="utf-8") as f:
        grammar = json.load(f)

    def rules(node, where):
        if isinstance(node, dict):
            yield node, where
            for k, v in node.items():
                yield from rules(v, where + "/" + k)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from rules(v, "%s[%d]" % (where, i))

    for rule, where in rules(grammar, "#"):
        for key, caps_key in (("match", "captures"), ("begin", "beginCaptures"),
                              ("end", "endCaptures")):
            pattern = rule.get(key)
            if not isinstance(pattern, str):
                continue
            caps = rule.get(caps_key) or rule.get("captures") or {}
            for m in WORD_LIST.finditer(pattern):
                scope = rule.get("name", "")
                if not m.group(1):  # capturing group: its capture's scope wins
                    cap = caps.get(str(group_number(pattern, m.start() + 2)), {})
                    scope = cap.get("name", scope)
                section = classify_scope(scope)
                for word in m.group(2).split("|"):
                    yield section, word, "%s/%s (%s)" % (where, key, scope or "no scope")


def vim_words(path):
    """Yields (section, word, where) for every `syn keyword` line."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            parts = line.split('"')[0].split()
            if len(parts) < 3 or parts[0] not in ("syn", "synt", "synta", "syntax") \
                    or parts[1] not in ("keyword", "k", "ke", "key", "keyw", "keywo", "keywor"):
                continue
            group = parts[2]
            section = VIM_GROUPS.get(group, "?")
            for word in parts[3:]:
                if "=" in word or word in VIM_OPTIONS:
                    continue
                yield section, word, "%s:%d (%s)" % (path, n, group)


def compare(name, expected, found):
    """Returns the error messages for one grammar."""
    errors = []
    have = {s: {} for s in SECTIONS}
    for section, word, where in found:
        if section is None:
            continue
        if section == "?":
            errors.append("%s: %r is in a word list this test cannot classify: %s"
                          % (name, word, where))
            continue
        have[section].setdefault(word, where)
    for section in SECTIONS:
        for word in expected[section]:
            if word not in have[section]:
                errors.append("%s: %s %r from keywords.txt is missing" % (name, section[:-1], word))
        for word, where in sorted(have[section].items()):
            if word not in expected[section]:
                errors.append("%s: %s %r is not in keywords.txt (at %s)"
                              % (name, section[:-1], word, where))
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keywords", default=os.path.join(REPO, "grammar", "keywords.txt"))
    ap.add_argument("--textmate", default=os.path.join(
        REPO, "grammar", "vscode", "syntaxes", "sflow.tmLanguage.json"))
    ap.add_argument("--vim", default=os.path.join(REPO, "grammar", "vim", "syntax", "sflow.vim"))
    args = ap.parse_args()

    expected = read_keywords(args.keywords)
    errors = compare("textmate", expected, textmate_words(args.textmate))
    errors += compare("vim", expected, vim_words(args.vim))
    for e in errors:
        print(e)
    words = sum(len(v) for v in expected.values())
    checks = 2 * words
    print("editors/keywords: %d words x 2 grammars: %d passed, %d failed"
          % (words, max(0, checks - len(errors)), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
