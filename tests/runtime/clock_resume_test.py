#!/usr/bin/env python3
"""now() across a --resume: main's clock only goes forward.

Compiles clock_resume.sflow (main reads now() around each call of a
@checkpoint actor, after a 0.2 s task the journal answers on --resume, so
the resumed run is behind the killed one on its own clock), runs it once
with --journal=false (the reference), then SIGKILLs runs right after the
actor's "step i" line of several steps (main has journaled t0, not yet
t1) and resumes them: every resume must print exactly the reference
output, "clock forward" on every line, and past the first checkpoint the
actor must come back from it.  Before the fix a live now() after the
replayed ones read the resumed run's own clock, so t1 - t0 came out
negative ("clock BACKWARD"; examples/finetune printed "eval -2.356 s").

Usage: clock_resume_test.py --sflowc PATH
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
    # Line 2i+1 is "step i": kill right after steps 0, 1, 2, 4, 5 and 7.
    return kill_resume.check(a.sflowc, os.path.join(here, "clock_resume.sflow"),
                             (1, 3, 5, 9, 11, 15), restored_from=5)


if __name__ == "__main__":
    sys.exit(main())
