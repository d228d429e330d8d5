#!/usr/bin/env python3
"""target_test.py — what machine code sflowc puts in an executable.

By default an executable targets the architecture's portable baseline
(x86-64-v2 on x86_64: SSE4.2 and POPCNT, no AVX), whatever the build
machine's CPU has, so it runs on any host of that architecture and under
valgrind (which stops at AVX-512's EVEX encoding).  -march=native and
--target-cpu=NAME opt in to more; an unknown CPU or feature name is a usage
error (exit 2) that names it.

    target_test.py --sflowc PATH CASE    run one case (exit 77: skipped)
    target_test.py --list                the case names

The disassembly cases need objdump (binutils) and an x86_64 build host.
"""
import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
# A loop LLVM vectorises with the widest vectors the target has.
PROGRAM = """fn dot(a: f32[], b: f32[]) -> f32 {
  var s: f32 = 0.0
  for i in 0..len(a) { s += a[i] * b[i] }
  return s
}
workflow main(n: i64 = 1000) {
  let a = [f32(i) * 0.5 for i in 0..n]
  let b = [f32(i) + 1.0 for i in 0..n]
  print(dot(a, b))
}
"""
EXPECT = "166666510.0"
# AVX (VEX) instructions are the SSE ones with a 'v' prefix; AVX-512 (EVEX)
# adds zmm registers and the k mask registers.
AVX = re.compile(r"\tv[a-z0-9]+\s.*%[xyz]mm")
AVX512 = re.compile(r"%zmm|%k[0-7]\b|\{%k[0-7]\}")


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what, *details):
    if not cond:
        raise Fail(what + "".join("\n--- " + str(d) for d in details))


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    return set()


class Env:
    def __init__(self, sflowc, tmp):
        self.sflowc, self.tmp = sflowc, tmp
        self.src = os.path.join(tmp, "dot.sflow")
        with open(self.src, "w") as f:
            f.write(PROGRAM)

    def compile(self, name, *flags):
        exe = os.path.join(self.tmp, name)
        r = subprocess.run([self.sflowc, *flags, self.src, "-o", exe], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"sflowc {' '.join(flags)} failed (exit {r.returncode})",
              r.stderr)
        out = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        check(out.returncode == 0 and out.stdout.strip() == EXPECT,
              f"{name} printed {out.stdout.strip()!r} (exit {out.returncode}), "
              f"expected {EXPECT}", out.stderr)
        return exe

    def disassembly(self, exe):
        if platform.machine() != "x86_64":
            raise Skip(f"disassembly checks are for x86_64 (this is {platform.machine()})")
        if not shutil.which("objdump"):
            raise Skip("needs objdump (binutils)")
        r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", exe], capture_output=True,
                           text=True)
        check(r.returncode == 0, "objdump failed", r.stderr)
        return r.stdout.splitlines()

    def usage_error(self, flags, pattern):
        r = subprocess.run([self.sflowc, *flags, self.src, "-o", os.path.join(self.tmp, "x")],
                           capture_output=True, text=True)
        check(r.returncode == 2, f"sflowc {' '.join(flags)}: exit {r.returncode}, expected 2",
              r.stderr)
        check(re.search(pattern, r.stderr), f"sflowc {' '.join(flags)}: no /{pattern}/",
              r.stderr)
        check("Traceback" not in r.stderr and "internal" not in r.stderr,
              "not a clean usage error", r.stderr)
        check(not os.path.exists(os.path.join(self.tmp, "x")), "an executable was written anyway")


# The runtime's only AVX code: functions named *_avx2, compiled for AVX2
# alone and called only where the CPU reports it (sf__have_avx2,
# runtime/nn/simd.h), and *_avx512, compiled for AVX-512F and called only
# where the CPU has that (sf__have_avx512).  Every other function must run
# on x86-64-v2, and only *_avx512 ones may hold AVX-512 instructions.
DISPATCHED = re.compile(r"^[0-9a-f]+ <([A-Za-z0-9_.]+_avx(2|512))(\.[a-z0-9.]+)?>:$")
DISPATCHED_512 = re.compile(r"^[0-9a-f]+ <([A-Za-z0-9_.]+_avx512)(\.[a-z0-9.]+)?>:$")
FUNC = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")


def case_default_no_avx(e):
    """The default executable (generated code and the runtime linked into
    it) holds AVX-512 instructions only inside the runtime's functions
    dispatched on AVX-512F (named *_avx512), and AVX only inside those and
    the ones dispatched on AVX2 (named *_avx2), on any build machine."""
    lines = e.disassembly(e.compile("dot_default"))
    func, avx, avx512, dispatched = "?", [], [], set()
    for l in lines:
        m = FUNC.match(l)
        if m:
            func = m.group(1)
            continue
        if AVX512.search(l) and not DISPATCHED_512.match(f"0 <{func}>:"):
            avx512.append(f"{func}: {l.strip()}")
        if AVX.search(l):
            if DISPATCHED.match(f"0 <{func}>:"):
                dispatched.add(func)
            else:
                avx.append(f"{func}: {l.strip()}")
    check(not avx512, f"{len(avx512)} AVX-512 instructions outside *_avx512 functions in the "
          "default executable", "\n".join(avx512[:10]))
    check(not avx, f"{len(avx)} AVX instructions outside *_avx2 and *_avx512 functions in the "
          "default executable (x86-64-v2 has none)", "\n".join(avx[:10]))


def case_native(e):
    """-march=native compiles for this machine: on a CPU with AVX2 the
    vectorised loop uses VEX instructions, and the program still prints
    the right sum."""
    lines = e.disassembly(e.compile("dot_native", "-march=native"))
    if "avx2" in cpu_flags():
        check(any(AVX.search(l) for l in lines),
              "-march=native on an AVX2 machine emitted no AVX instruction")
    if "avx512f" in cpu_flags():
        check(any("%zmm" in l or "%ymm" in l for l in lines),
              "-march=native on an AVX-512 machine used no wide vector register")


def case_target_cpu_named(e):
    """--target-cpu=x86-64-v3 (AVX2) runs here when this CPU has AVX2 and
    FMA, and contains VEX but no EVEX instructions (but in the runtime's
    functions dispatched on AVX-512F, *_avx512)."""
    if not {"avx2", "fma", "bmi2", "movbe"} <= cpu_flags():
        raise Skip("this CPU is below x86-64-v3")
    lines = e.disassembly(e.compile("dot_v3", "--target-cpu=x86-64-v3"))
    check(any(AVX.search(l) for l in lines), "x86-64-v3 emitted no AVX instruction")
    func, avx512 = "?", []
    for l in lines:
        m = FUNC.match(l)
        if m:
            func = m.group(1)
        elif AVX512.search(l) and not DISPATCHED_512.match(f"0 <{func}>:"):
            avx512.append(f"{func}: {l.strip()}")
    check(not avx512, "x86-64-v3 emitted AVX-512 instructions (outside the runtime's *_avx512 "
          "functions)", "\n".join(avx512[:10]))


def case_bad_cpu(e):
    """An unknown CPU is a usage error naming it, with a suggestion."""
    e.usage_error(["--target-cpu=bogus"], r"unknown CPU 'bogus'")
    e.usage_error(["-march=skylake-avx51"], r"unknown CPU 'skylake-avx51'.*did you mean "
                  r"'skylake-avx512'")


def case_bad_features(e):
    """An unknown feature, or one without its sign, is a usage error."""
    e.usage_error(["--target-features=+avx2,+nosuchfeature"], r"unknown CPU feature "
                  r"'nosuchfeature'")
    e.usage_error(["--target-features=avx2"], r"\+NAME and -NAME")
    e.usage_error(["--target-cpu="], r"needs a CPU name")


def case_self_check(e):
    """An executable compiled for a feature this CPU lacks says so when it
    starts, before any generated code runs (exit 69, naming the feature),
    instead of dying of SIGILL; SFLOW_SKIP_CPU_CHECK=1 runs it anyway."""
    if platform.machine() != "x86_64":
        raise Skip("the features chosen are x86 ones")
    flags = cpu_flags()
    feat = next((f for f, name in (("sse4a", "sse4a"), ("amx-tile", "amx_tile"),
                                   ("avx512fp16", "avx512_fp16")) if name not in flags), None)
    if not feat:
        raise Skip("this CPU has sse4a, amx_tile and avx512_fp16")
    exe = os.path.join(e.tmp, "needs_feature")
    r = subprocess.run([e.sflowc, "--target-features=+" + feat, e.src, "-o", exe],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"sflowc failed (exit {r.returncode})", r.stderr)
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(out.returncode == 69, f"exit {out.returncode}, expected 69", out.stdout, out.stderr)
    check(out.stdout == "", "the workflow ran", out.stdout)
    check(re.search(rf"this machine's CPU lacks {feat} \(/proc/cpuinfo: ", out.stderr),
          "no message naming the missing feature", out.stderr)
    env = dict(os.environ, SFLOW_SKIP_CPU_CHECK="1")
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60, env=env)
    check(out.returncode == 0 and out.stdout.strip() == EXPECT,
          f"SFLOW_SKIP_CPU_CHECK=1: exit {out.returncode}", out.stdout, out.stderr)


def case_help_lists_cpus(e):
    """--target-cpu=help lists LLVM's CPUs on stdout and exits 0."""
    r = subprocess.run([e.sflowc, "--target-cpu=help"], capture_output=True, text=True)
    check(r.returncode == 0, f"exit {r.returncode}", r.stderr)
    check("Available CPUs" in r.stdout, "no CPU list on stdout", r.stdout[:500])


CASES = {
    "default_no_avx": case_default_no_avx,
    "native": case_native,
    "target_cpu_named": case_target_cpu_named,
    "bad_cpu": case_bad_cpu,
    "bad_features": case_bad_features,
    "help_lists_cpus": case_help_lists_cpus,
    "self_check": case_self_check,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if a.case not in CASES:
        print(f"unknown case {a.case}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="sflow-target-") as tmp:
        try:
            CASES[a.case](Env(a.sflowc, tmp))
        except Skip as s:
            print(f"SKIP: {s}")
            return SKIP
        except Fail as f:
            print(f"FAIL {a.case}: {f}", file=sys.stderr)
            return 1
    print(f"ok {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
