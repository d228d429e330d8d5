#!/usr/bin/env python3
"""Where NVRTC and cuBLAS are found (runtime/gpu/libs.c), with fake library
folders in a temporary directory, each file a link to the host emulator
(tests/gpu/emu), whose NVRTC says version 99.0 and cuBLAS 99.0.0:

 - the pip wheels' nvidia/*/lib folders under the prefix of the python3
   on PATH (as PyTorch installs them) are searched;
 - $CUDA_PATH wins over them, and $CUDA_HOME over $CUDA_PATH;
 - $SFLOW_NVRTC / $SFLOW_CUBLAS win over everything;
 - the report (nvrtc_check --which, gpu_check --which) names the file
   loaded and its version; a SFLOW_NVRTC that does not load is named.

Usage: libsearch.py NVRTC_CHECK GPU_CHECK LIBSFLOW_EMU
"""
import atexit, os, shutil, subprocess, sys, tempfile

nvrtc_check, gpu_check, emu = (os.path.abspath(p) for p in sys.argv[1:4])
tmp = tempfile.mkdtemp(prefix="sflow-libsearch-")
atexit.register(shutil.rmtree, tmp, True)
fails = []


def link(path, copy=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # A copy where the emulator is loaded under another name in the same
    # process: the loader takes the same file for the library already loaded.
    (shutil.copy if copy else os.symlink)(emu, path)
    return path


py = os.path.join(tmp, "venv")
os.makedirs(os.path.join(py, "bin"))
with open(os.path.join(py, "bin", "python3"), "w") as f:
    f.write("#!/bin/sh\nexit 0\n")
os.chmod(os.path.join(py, "bin", "python3"), 0o755)
site = os.path.join(py, "lib", "python3.11", "site-packages", "nvidia")
pip_nvrtc = link(os.path.join(site, "cuda_nvrtc", "lib", "libnvrtc.so.13"))
pip_cublas = link(os.path.join(site, "cublas", "lib", "libcublas.so.12"), copy=True)
cpath = link(os.path.join(tmp, "cuda-path", "lib64", "libnvrtc.so.13"))
chome = link(os.path.join(tmp, "cuda-home", "lib", "libnvrtc.so.12"))

base = {k: v for k, v in os.environ.items()
        if k not in ("CUDA_HOME", "CUDA_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "SFLOW_NVRTC",
                     "SFLOW_CUBLAS", "SFLOW_CUDA")}
base.update(PATH=os.path.join(py, "bin") + ":/usr/bin:/bin", HOME=tmp, SFLOW_NCCL="off",
            SFLOW_KERNEL_CACHE=os.path.join(tmp, "kc"))


def case(what, cmd, want, **env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(base, **env), timeout=60)
    ok = p.returncode == 0 and want in p.stdout
    print(("ok   " if ok else "FAIL ") + f"{what}: want '{want}'")
    if not ok:
        print(f"     rc {p.returncode}; stdout:\n{p.stdout}     stderr:\n{p.stderr}")
        fails.append(what)


which = [nvrtc_check, "--which"]
case("pip's nvidia/cuda_nvrtc/lib of the python3 on PATH", which, f"NVRTC 99.0 from {pip_nvrtc}")
case("$CUDA_PATH/lib64 before pip", which, f"NVRTC 99.0 from {cpath}",
     CUDA_PATH=os.path.dirname(os.path.dirname(cpath)))
case("$CUDA_HOME/lib before $CUDA_PATH", which, f"NVRTC 99.0 from {chome}",
     CUDA_HOME=os.path.dirname(os.path.dirname(chome)), CUDA_PATH=os.path.dirname(os.path.dirname(cpath)))
case("SFLOW_NVRTC before all", which, f"NVRTC 99.0 from {emu}", SFLOW_NVRTC=emu,
     CUDA_HOME=os.path.dirname(os.path.dirname(chome)))
p = subprocess.run(which, capture_output=True, text=True, timeout=60,
                   env=dict(base, SFLOW_NVRTC=os.path.join(tmp, "missing.so")))
ok = p.returncode == 77 and "SFLOW_NVRTC=" in p.stderr and "does not load" in p.stderr
print(("ok   " if ok else "FAIL ") + f"a SFLOW_NVRTC that does not load is named: {p.stderr.strip()[:120]}")
if not ok:
    fails.append("SFLOW_NVRTC missing")
case("cuBLAS from pip's nvidia/cublas/lib", [gpu_check, "--which"],
     f"cuBLAS 99.0.0 from {pip_cublas}", SFLOW_CUDA=emu, SFLOW_NVRTC=emu)
case("SFLOW_CUBLAS before pip", [gpu_check, "--which"], f"cuBLAS 99.0.0 from {emu}",
     SFLOW_CUDA=emu, SFLOW_NVRTC=emu, SFLOW_CUBLAS=emu)
sys.exit(f"libsearch: {len(fails)} check(s) failed" if fails else 0)
