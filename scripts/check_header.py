"""Check the hand-written public header against what the library really exports.

Usage: python3 scripts/check_header.py build/libbounded_router.h capi/bounded_router.h capi/*.c

The first file is the header cgo generates from capi/*.go, the second the hand-written public
header, the rest the C sources of the library. Every function the library exports (cgo's
``extern`` declarations, and the non-hidden functions the C sources define) must be declared in
the public header with the same return and parameter types, ignoring ``const`` (cgo cannot write
it) and parameter names; and the public header must declare nothing else. Exits 1 on any
difference, printing each one.
"""

from __future__ import annotations

import re
import sys
from typing import Dict

_PROTOTYPE = re.compile(r"(?:^|\n)\s*(?:extern\s+)?([A-Za-z_][\w\s\*]*?\**)\s*\b(br_\w+)\s*\(([^)]*)\)\s*[;{]", re.S)
_HIDDEN = "visibility(\"hidden\")"


def _type(declaration: str) -> str:
    """The type of a parameter declaration, without const, name or spacing: 'const char *key'
    gives 'char*'. (Types of two words, such as 'unsigned int', are not used by the API.)"""
    words = re.sub(r"\bconst\b", " ", declaration).replace("*", " * ").split()
    if len([w for w in words if w != "*"]) > 1 and words[-1] != "*":
        words = words[:-1]
    return "".join(words)


def prototypes(text: str, skip_hidden: bool = False) -> Dict[str, str]:
    found = {}
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    for match in _PROTOTYPE.finditer(text):
        result, name, params = match.groups()
        if skip_hidden and _HIDDEN in text[max(0, match.start() - 60) : match.start(2)]:
            continue
        result = re.sub(r"__attribute__\(\(.*?\)\)", " ", result)
        args = [_type(p) for p in params.split(",") if p.strip()] or ["void"]
        found[name] = "%s(%s)" % (_type(result + " name"), ", ".join(args))
    return found


def main(generated: str, public: str, *c_sources: str) -> int:
    exported = prototypes(open(generated).read())
    for source in c_sources:
        exported.update(prototypes(open(source).read(), skip_hidden=True))
    declared = prototypes(open(public).read())
    problems = []
    for name in sorted(set(exported) | set(declared)):
        if name not in declared:
            problems.append("%s is exported but not declared in %s: %s" % (name, public, exported[name]))
        elif name not in exported:
            problems.append("%s is declared in %s but not exported: %s" % (name, public, declared[name]))
        elif exported[name] != declared[name]:
            problems.append("%s differs: the library has %s, %s declares %s" % (name, exported[name], public, declared[name]))
    for problem in problems:
        print(problem)
    if not problems:
        print("%s declares the %d exports of the library" % (public, len(declared)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
