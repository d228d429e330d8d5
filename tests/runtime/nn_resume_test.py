#!/usr/bin/env python3
"""A training run killed with SIGKILL and resumed ends with the same weights.

Compiles nn_train.sflow (a @checkpoint actor holding an MLP and its AdamW
state, tensors in struct fields, stepped 40 times on seeded batches), runs
it once with --journal=false (the reference), then SIGKILLs runs after a
number of printed lines and resumes them: every resume must print exactly
the reference output (every loss, then every weight as its shortest
round-trip text, so equal text is equal bits), and past the first
checkpoints the actor must come back from one (its tensors read back from
bytes), not from init.

Usage: nn_resume_test.py --sflowc PATH
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
    return kill_resume.check(a.sflowc, os.path.join(here, "nn_train.sflow"), (3, 12, 27, 38), restored_from=12)


if __name__ == "__main__":
    sys.exit(main())
