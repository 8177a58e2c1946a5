"""Check a manylinux2014 wheel before it goes on the package index; exit 1 naming what is wrong.

    python scripts/check_wheel.py dist/bounded_router-*-manylinux_2_17_*.whl

For the architecture in the wheel's name (x86_64 or aarch64), the checks are:
- ``auditwheel show`` finds the wheel consistent with ``manylinux_2_17_<arch>`` and no other tag
  (its library needs no glibc symbol newer than 2.17 and no library outside the manylinux set);
- the wheel's own tags (its name and the Tag lines of its WHEEL file) are exactly
  ``py3-none-manylinux_2_17_<arch>`` and ``py3-none-manylinux2014_<arch>``;
- the library is an ELF shared object for that machine, stripped (no symbol table, no DWARF),
  and exports every function its C header (also in the wheel) declares.

Prints the auditwheel report and the library's size. Needs the auditwheel package (and its ELF
reader, pyelftools): ``pip install -r requirements-wheels.txt``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import zipfile

from elftools.elf.elffile import ELFFile

LIBRARY = "bounded_router/libbounded_router.so"
HEADER = "bounded_router/libbounded_router.h"
# Wheel architecture: the ELF e_machine of its library.
MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}


def check(path: str) -> list[str]:
    """Check one wheel; return the problems found (empty when it is fit to publish)."""
    name = os.path.basename(path)
    pattern = r"bounded_router-[^-]+-py3-none-manylinux_2_17_(\w+?)\.manylinux2014_\1\.whl"
    match = re.fullmatch(pattern, name)
    if not match or match.group(1) not in MACHINES:
        return ["%s: not named bounded_router-<version>-py3-none-manylinux_2_17_<arch>."
                "manylinux2014_<arch>.whl with <arch> one of %s" % (name, ", ".join(MACHINES))]
    arch = match.group(1)
    problems = []

    report = subprocess.run([sys.executable, "-m", "auditwheel", "show", path],
                            capture_output=True, text=True)
    print(report.stdout + report.stderr, flush=True)
    text = " ".join(report.stdout.split())
    consistent = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    if report.returncode != 0 or not consistent:
        problems.append("auditwheel show failed on %s (exit %d)" % (name, report.returncode))
    elif consistent.group(1) != "manylinux_2_17_" + arch:
        problems.append("auditwheel show: %s is consistent with %s, not manylinux_2_17_%s"
                        % (name, consistent.group(1), arch))

    with zipfile.ZipFile(path) as wheel:
        wheel_file = next(n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = set(re.findall(r"^Tag: (\S+)$", wheel.read(wheel_file).decode(), re.MULTILINE))
        expected = {"py3-none-manylinux_2_17_" + arch, "py3-none-manylinux2014_" + arch}
        if tags != expected:
            problems.append("%s: WHEEL tags %s, expected %s"
                            % (name, sorted(tags), sorted(expected)))
        try:
            library = wheel.read(LIBRARY)
            header = wheel.read(HEADER).decode()
        except KeyError as e:
            return problems + ["%s: missing %s" % (name, e)]

    print("%s: %s is %d bytes" % (name, LIBRARY, len(library)))
    elf = ELFFile(io.BytesIO(library))
    if elf["e_type"] != "ET_DYN" or elf["e_machine"] != MACHINES[arch]:
        problems.append("%s: %s is %s for %s, expected ET_DYN for %s"
                        % (name, LIBRARY, elf["e_type"], elf["e_machine"], MACHINES[arch]))
    unstripped = sorted(s.name for s in elf.iter_sections()
                        if s.name == ".symtab" or s.name.startswith(".debug_"))
    if unstripped:
        problems.append("%s: %s is not stripped: it has %s"
                        % (name, LIBRARY, ", ".join(unstripped)))
    declared = set(re.findall(r"^(?:extern )?(?:const )?\w+ \*?(br_\w+)\(", header, re.MULTILINE))
    dynsym = elf.get_section_by_name(".dynsym")
    exported = {s.name for s in dynsym.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    if not declared:
        problems.append("%s: %s declares no br_ function" % (name, HEADER))
    missing = sorted(declared - exported)
    if missing:
        problems.append("%s: %s does not export %s, declared in %s"
                        % (name, LIBRARY, ", ".join(missing), HEADER))
    return problems


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    problems = [problem for path in paths for problem in check(path)]
    for problem in problems:
        print("error: " + problem, file=sys.stderr)
    if not problems:
        print("ok: %s" % ", ".join(os.path.basename(p) for p in paths))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
