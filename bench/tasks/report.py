#!/usr/bin/env python3
"""Reads the raw lines that bench/tasks/run.sh collected and prints the
side-by-side table: benchmark | sflow | peer | ratio | goal.

Input lines (one file, any order):
  SIDE RESULT name count best_seconds     SIDE in sflow, omp, c, ray
  SIDE ERROR name message...              the side could not run `name`
Ratios are always sflow's speed over the peer's (count/seconds over
count/seconds), so above 1 means sflow is faster.  Usage:
  report.py RAW [--markdown]
"""
import sys

BENCHES = [
    # name, label, unit, peers, goals: [(peer or None, kind, threshold, text)]
    ("tasks_pipelined", "empty tasks, pipelined", "tasks/s", ["omp", "ray"],
     [(None, "rate", 1e6, ">= 1M tasks/s"), ("omp", "ratio", 0.25, ">= 0.25x OpenMP"),
      ("ray", "ratio", 100, ">= 100x Ray")]),
    ("tasks_one_by_one", "empty tasks, one by one", "tasks/s", ["omp", "ray"], []),
    ("actor_pipelined", "actor calls, pipelined", "calls/s", ["ray"],
     [(None, "rate", 2e5, ">= 200k calls/s")]),
    ("actor_one_by_one", "actor calls, one by one", "calls/s", ["ray"], []),
    ("chain", "chain of futures", "tasks/s", ["omp", "ray"], []),
    ("tasks_cold", "tiny tasks, cold (one round, fresh process, journal on)", "tasks/s", ["omp"],
     [("omp", "ratio", 0.5, ">= 0.5x OpenMP (#34)")]),
    ("tasks_cold_process", "tiny tasks, cold: the whole process", "tasks/s", ["omp"], []),
]
# allreduce inside the members' method: size -> the goal against the C loop (#34)
INSIDE_GOALS = {1024: 0.5, 65536: 1.0}
PEER_NAME = {"omp": "OpenMP", "c": "C loop", "ray": "Ray", None: "-"}


def si(x):
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return "%.3g%s" % (x / div, suf)
    return "%.3g" % x


def ratio_txt(r):
    if r is None:
        return "-"
    return "{:,.0f}x".format(r) if r >= 100 else "%.3gx" % r


def binsize(n):
    for div, suf in ((1 << 20, "M"), (1 << 10, "K")):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, suf)
    return str(n)


def dur(s):
    if s >= 1:
        return "%.3g s" % s
    if s >= 1e-3:
        return "%.3g ms" % (s * 1e3)
    return "%.3g us" % (s * 1e6)


def load(path):
    res, err = {}, {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 5 and p[1] == "RESULT":
                r = (int(p[3]), float(p[4]))
                old = res.get((p[0], p[2]))
                res[(p[0], p[2])] = r if not old or r[1] < old[1] else old  # best of repeats
            elif len(p) >= 3 and p[1] == "ERROR":
                err[(p[0], p[2])] = " ".join(p[3:])
    return res, err


def main():
    path = sys.argv[1]
    md = "--markdown" in sys.argv
    res, err = load(path)
    rows = []

    notes = []

    def cell(side, name, fmt):
        if (side, name) in res:
            return fmt(res[(side, name)]), res[(side, name)]
        why = err.get((side, name), "not run")
        if why not in notes:
            notes.append(why)
        return "n/a [%d]" % (notes.index(why) + 1), None

    for name, label, unit, peers, goals in BENCHES:
        s_txt, s = cell("sflow", name, lambda r: "%s %s" % (si(r[0] / r[1]), unit))
        n = res.get(("sflow", name), (0, 0))[0]
        lab = "%s (%s)" % (label, si(n)) if n else label
        for g_peer, kind, thr, text in goals:
            if g_peer is None and s:
                rate = s[0] / s[1]
                rows.append((lab, s_txt, "-", "-", "%s: %s" % (text, "met" if rate >= thr else "MISSED")))
            elif g_peer is None:
                rows.append((lab, s_txt, "-", "-", "%s: n/a" % text))
        for peer in peers:
            p_txt, p = cell(peer, name, lambda r: "%s %s %s%s" % (PEER_NAME[peer], si(r[0] / r[1]), unit, "" if r[0] == n else " (n=%s)" % si(r[0])))
            if not p:
                p_txt = "%s %s" % (PEER_NAME[peer], p_txt)
            ratio = (s[0] / s[1]) / (p[0] / p[1]) if s and p else None
            goal = ""
            for g_peer, kind, thr, text in goals:
                if g_peer == peer:
                    goal = "%s: %s" % (text, "n/a" if ratio is None else "met" if ratio >= thr else "MISSED")
            rows.append((lab, s_txt, p_txt, ratio_txt(ratio), goal))

    sizes = sorted({int(k[1].split("_")[1]) for k in list(res) + list(err) if k[1].startswith("allreduce_") and not k[1].startswith("allreduce_in_")})
    for size in sizes:
        name = "allreduce_%d" % size
        s_txt, s = cell("sflow", name, lambda r: "%s/op" % dur(r[1] / r[0]))
        lab = "allreduce_sum, f32[%s] x 2 members" % binsize(size)
        for peer in ("c", "ray"):
            p_txt, p = cell(peer, name, lambda r: "%s %s/op" % (PEER_NAME[peer], dur(r[1] / r[0])))
            if not p:
                if (peer, name) not in err:
                    continue
                p_txt = "%s %s" % (PEER_NAME[peer], p_txt)
            ratio = (p[1] / p[0]) / (s[1] / s[0]) if s and p else None
            rows.append((lab, s_txt, p_txt, ratio_txt(ratio), ""))

    for size in sorted(INSIDE_GOALS):
        name = "allreduce_in_%d" % size
        if not any(k[1] == name for k in list(res) + list(err)):
            continue
        s_txt, s = cell("sflow", name, lambda r: "%s/op" % dur(r[1] / r[0]))
        p_txt, p = cell("c", name, lambda r: "C loop %s/op" % dur(r[1] / r[0]))
        ratio = (p[1] / p[0]) / (s[1] / s[0]) if s and p else None
        thr = INSIDE_GOALS[size]
        goal = ">= %gx C loop (#34): %s" % (thr, "n/a" if ratio is None else "met" if ratio >= thr else "MISSED")
        rows.append(("allreduce_sum in a member's loop, f32[%s] x 2" % binsize(size), s_txt,
                     p_txt if p else "C loop " + p_txt, ratio_txt(ratio), goal))

    head = ("benchmark", "sflow", "peer", "ratio", "goal (issues #4, #34)")
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        line = lambda r: "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
        print(line(head))
        print("  ".join("-" * x for x in w))
        for r in rows:
            print(line(r))
    print()
    bullet = "- " if md else ""
    print(bullet + "ratio = sflow's speed / the peer's (above 1: sflow faster); best of 3 after a warm-up")
    print(bullet + "cold rows: best of 3 fresh processes per side, alternating, no warm-up")
    print(bullet + "n = the peer's count where it differs from sflow's (Ray is too slow for sflow's sizes)")
    for i, why in enumerate(notes, 1):
        print("%s[%d] %s" % ("- " if md else "", i, why))


if __name__ == "__main__":
    main()
