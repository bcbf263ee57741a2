#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Lists the innermost loops of compiled kernels that move vector registers through the stack.

    tools/check-kernel-spills.py [--min N] [--functions REGEX] OBJECT...

A tile kernel keeps its accumulators in registers; when the compiler cannot (an array indexed
by a run-time count, more live values than the ISA has registers), every step stores and
reloads them, which halved the AVX2 packed F32 kernel (17 against 34 GMAC/s on one Zen 3 core)
and put attention's score sums through memory. The compiler says nothing about it, and a
speed test cannot be part of CI; this reads the object code instead (objdump -d), so it runs
on any machine, whatever instruction sets the CPU has: AVX-512 kernels can be checked where
they cannot run.

A loop here is a conditional jump backwards with no other such loop inside it and no call; a
spill is a vector move or arithmetic instruction with a stack operand (%rsp or %rbp). A hit is
a lead, not a verdict: a partial-row epilogue that the compiler turned into a loop, or a
constant reloaded from the stack, shows up too; read the loop. Prints one line per loop with at least --min (default 1) stack accesses, and exits 1
when any is found (0 otherwise), so it can guard a build. Not part of CI: what gcc does with
a kernel changes with its version and flags; run it after changing a kernel (examples in
docs/testing.md).
"""
import argparse
import re
import subprocess
import sys

FUNC = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSN = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
TARGET = re.compile(r"^([0-9a-f]+) <")
VEC_STACK = re.compile(r"%[xyz]mm\d+.*\((%rsp|%rbp)\)|\((%rsp|%rbp)\).*%[xyz]mm\d+")


def functions(obj):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], check=True,
                         capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            cur = m.group(2)
            funcs[cur] = []
            continue
        m = INSN.match(line)
        if m and cur is not None:
            funcs[cur].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def innermost_loops(insns):
    loops = []
    for addr, op, arg in insns:
        if op.startswith("j") and op != "jmp":
            m = TARGET.match(arg)
            if m and int(m.group(1), 16) < addr:
                loops.append((int(m.group(1), 16), addr))
    for lo, hi in loops:
        if any(lo <= l2 and h2 <= hi and (l2, h2) != (lo, hi) for l2, h2 in loops):
            continue
        body = [(a, op, arg) for a, op, arg in insns if lo <= a <= hi]
        if any(op.startswith("call") for _, op, _ in body):
            continue
        yield lo, hi, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("objects", nargs="+")
    ap.add_argument("--min", type=int, default=1, help="stack accesses per loop to report")
    ap.add_argument("--functions", default=".", help="only functions matching this regex")
    args = ap.parse_args()
    want = re.compile(args.functions)
    found = 0
    for obj in args.objects:
        for name, insns in functions(obj).items():
            if not want.search(name):
                continue
            for lo, hi, body in innermost_loops(insns):
                n = sum(1 for _, op, arg in body if op.startswith("v") and VEC_STACK.search(arg))
                if n >= args.min:
                    found += 1
                    print(f"{obj}: {name}: loop {lo:x}-{hi:x} ({len(body)} instructions): "
                          f"{n} vector stack accesses")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
