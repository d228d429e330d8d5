"""The Python peer of append.sflow: s += "ab" in a loop (CPython resizes a
string in place when the loop holds its only reference)."""
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 160000
    t0 = time.perf_counter()
    s = ""
    for _ in range(n):
        s += "ab"
    dt = time.perf_counter() - t0
    print(len(s), "%.6f" % dt)


main()
