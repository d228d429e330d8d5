"""Word count in Python, the same program as wordcount.sflow: split on
whitespace, count in a dict.  `--counter` uses collections.Counter instead
(its counting loop is C).  Prints distinct, total, top word, its count and
the seconds of the split and count."""
import collections
import sys
import time

path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    text = f.read()
t0 = time.perf_counter()
if "--counter" in sys.argv:
    counts = collections.Counter(text.split())
else:
    counts = {}
    for w in text.split():
        counts[w] = counts.get(w, 0) + 1
secs = time.perf_counter() - t0
best, most = "", 0
for k, c in counts.items():
    if c > most or (c == most and k < best):
        best, most = k, c
print(len(counts), sum(counts.values()), best, most, secs)
