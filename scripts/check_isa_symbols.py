#!/usr/bin/env python3
"""Fails when an ISA-flagged object defines a shared symbol that runs beyond the baseline ISA.

Files named *_avx2.cc / *_avx512.cc are compiled with -mavx2 / -mavx512*
(CMakeLists.txt). Inline functions, templates and STL instantiations they
emit are weak symbols: the linker keeps one copy per program, from whichever
object it meets first. If that copy came from an ISA-flagged object and uses
AVX instructions, every caller runs them, and an AVX2-only (or older) CPU dies
with SIGILL in baseline code (the one-definition rule broken by per-file
flags). So no weak symbol of such an object may contain a VEX- or
EVEX-encoded instruction (any mnemonic starting with 'v', or a ymm / zmm /
mask register operand), unless it lives in the namespace of the object's own
tier (tessera::cpu::avx512:: in *_avx512.cc objects, tessera::cpu::avx2:: in
*_avx2.cc ones): only objects of that tier define those, and only code that
checked the CPU calls them.

    python3 scripts/check_isa_symbols.py BUILD_DIR

objdump and nm come with binutils; the script reads the objects, writes nothing.
"""
import pathlib
import re
import subprocess
import sys

ISA_OBJECT = re.compile(r"_(avx2|avx512)\.cc\.o$")
LABEL = re.compile(r"^[0-9a-f]+ <(.+)>:$")
BEYOND = re.compile(r"%[yz]mm\d|%k[0-7]\b")


def weak_symbols(obj):
    out = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    return {line.split()[2] for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] in "WVu"}


def offending(obj, weak):
    """(symbol, instruction) for the weak functions of `obj` that use AVX instructions."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    found, current = {}, None
    for line in out.splitlines():
        m = LABEL.match(line)
        if m:
            current = m.group(1) if m.group(1) in weak else None
            continue
        if current is None or current in found or "\t" not in line:
            continue
        insn = line.split("\t", 1)[1].strip()
        if insn.startswith("v") or BEYOND.search(insn):
            found[current] = insn
    return found


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_isa_symbols.py BUILD_DIR")
    objects = sorted(p for p in pathlib.Path(sys.argv[1]).rglob("*.o") if ISA_OBJECT.search(p.name))
    if not objects:
        sys.exit(f"no *_avx2.cc.o / *_avx512.cc.o objects under {sys.argv[1]}: build first")
    found = []
    for obj in objects:
        for sym, insn in offending(obj, weak_symbols(obj)).items():
            found.append((obj, sym, insn))
    names = demangle([s for _, s, _ in found])
    own = lambda obj, sym: f"tessera::cpu::{ISA_OBJECT.search(obj.name).group(1)}::" in names.get(sym, sym)
    bad = [(obj, sym, insn) for obj, sym, insn in found if not own(obj, sym)]
    for obj, sym, insn in bad:
        print(f"{obj.name}: weak symbol {names.get(sym, sym)} runs '{insn}'")
    print(f"{len(objects)} ISA-flagged objects: {len(found) - len(bad)} weak symbols of their own tier's namespace, "
          f"{len(bad)} shared weak symbols beyond the baseline ISA")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
