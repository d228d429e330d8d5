#!/usr/bin/env python3
"""Maps and function values through the journal and @checkpoint.

Compiles maps.sflow (tasks that take and return maps and a function
value, a @checkpoint actor whose state holds maps and a function value),
runs it once with --journal=false (the reference), then SIGKILLs runs
after a number of printed lines and resumes them: every resume must print
exactly the reference output, and past the first checkpoints the actor
must come back from one (its maps and function value read back from
bytes), not from init.

Usage: maps_resume_test.py --sflowc PATH
"""

import argparse
import os
import sys

import kill_resume


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    return kill_resume.check(a.sflowc, os.path.join(here, "maps.sflow"), (2, 7, 13, 20), restored_from=7)


if __name__ == "__main__":
    sys.exit(main())
