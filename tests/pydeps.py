"""The pinned test venv (scripts/install-pydeps.sh) for a test that needs
Python packages beyond the standard library (numpy, prometheus_client).

A test calls `ensure(name, module, ...)` before importing them: when one is
missing from the running Python, the test re-executes itself, once, under
the venv's Python ($SFLOW_PYDEPS or build/pydeps); when the venv lacks it
too, the test exits non-zero saying how to install it, rather than being
reported as passing or skipped.
"""
import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure(name, *modules):
    try:
        for m in modules:
            importlib.import_module(m)
        return
    except ImportError:
        pass
    venv = os.environ.get("SFLOW_PYDEPS") or os.path.join(ROOT, "build", "pydeps")
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and os.environ.get("SFLOW_PYDEPS_REEXEC") != "1":
        os.environ["SFLOW_PYDEPS_REEXEC"] = "1"
        script = os.path.abspath(sys.argv[0])
        os.execv(py, [py, script] + sys.argv[1:])
    sys.exit("%s: %s not installed (looked in %s); run scripts/install-pydeps.sh"
             % (name, " and ".join(modules) + (" is" if len(modules) == 1 else " are"), venv))
