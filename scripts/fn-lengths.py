#!/usr/bin/env python3
"""Lists the Rust functions of product code by length, longest first.

Usage: scripts/fn-lengths.py [--min N] [PATH...]   (default: crates/, N = 80)

Product code only: files under tests/, benches/, examples/ and fuzz/ and unit-test files
(`tests.rs`, a `#[cfg(test)] mod tests;` of their module) are skipped, and so
is every item after `#[cfg(test)]` (the `mod tests` block and test-only helpers). A
function's length counts its lines from `fn` to its closing brace, comments included.
STYLE.md's bound: none over ~100 lines on a hot path, none over 150 anywhere; the script
exits 1 when one is over 150.
"""

import os
import re
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
SKIP_DIRS = {"tests", "benches", "examples", "fuzz", "target", "node_modules"}


def mask(text):
    """The text with comments and string/char literals blanked (newlines kept), so braces
    inside them do not count. Handles strings over several lines and raw strings."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'b?r(#*)"', text[i:i + 12])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' + raw.group(1)
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
            continue
        lit = re.match(r"'(\\(x..|u\{[^}]*\}|.)|[^\\'])'", text[i:i + 12])
        if c == "'" and lit:
            out.append(" " * lit.end())
            i += lit.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def block_end(lines, start):
    """Index of the line that closes the item opened at or after `start`; None for a
    declaration without a body."""
    depth, opened = 0, False
    for j in range(start, len(lines)):
        code = lines[j]
        for ch in code:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return j
        if not opened and code.rstrip().endswith(";"):
            return None
    return len(lines) - 1


def functions(path):
    lines = mask(open(path, encoding="utf-8").read()).split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("#[cfg(test)]"):
            end = block_end(lines, i + 1)
            i = (end if end is not None else i) + 1
            continue
        m = FN.match(lines[i])
        if m:
            end = block_end(lines, i)
            if end is not None:
                yield m.group(1), i + 1, end - i + 1
        i += 1


def rust_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for f in sorted(files):
                if f.endswith(".rs") and f != "tests.rs":
                    yield os.path.join(d, f)


def main(argv):
    minimum = 80
    if argv[:1] == ["--min"]:
        minimum, argv = int(argv[1]), argv[2:]
    found = [
        (n, f"{p}:{line}", name)
        for p in rust_files(argv or ["crates"])
        for name, line, n in functions(p)
        if n >= minimum
    ]
    for n, at, name in sorted(found, reverse=True):
        print(f"{n:5} {at} {name}")
    return 1 if any(n > 150 for n, _, _ in found) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
