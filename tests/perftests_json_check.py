#!/usr/bin/env python3
"""perftests_json_check.py RUN.json --rows N [--table OUT] [--nranks R] [--compare [gloo]]
[--env N=V]

Proves that a *_perf -J file is what perftests/README.md says: it parses as JSON; it has the run's
description (program, versions, nranks, flags, environment) and a summary; it has exactly N rows
(the size sweep x dtypes x ops x roots, counted by the caller from the flags) and they are the rows
of the printed table (--table: rank 0's stdout), in order, with the same size, count, type, redop
and root; every checked row has 0 wrong elements. With --compare, a row has MPI numbers exactly
when MPI has its dtype (all but half and bfloat16), its "vs" names the Chorus time it is compared
with (in_place for broadcast_perf, whose MPI_Bcast has one buffer; out_of_place otherwise), its
ratio is MPI's time over that one (wall times: with -C 1 the Chorus group's wall_us), and the
summary's MPI counts, geometric mean, minimum and maximum are those of the rows of more than 0
bytes (its empty_rows counts the rows of 0 bytes with a ratio, left out); without, no row has
MPI numbers. --compare gloo: the same of Gloo's numbers (under the rows' "mpi" key;
flags.compare "gloo", a top-level "peer_library"), which Gloo has for every dtype but half,
bfloat16 and uint32, every op but avg, and calls of at least one element. --env NAME=VALUE: the
run recorded NAME with VALUE (NAME= : recorded as unset); for MALLOC_MMAP_MAX_ also the top-level
"malloc_mmap_max". Times are only checked to be numbers: a timing never fails a test. Exit 0:
all hold; 1: one does not.
"""
import argparse
import json
import math
import sys

NO_PEER_TYPES = {"mpi": {"half", "bfloat16"}, "gloo": {"half", "bfloat16", "uint32"}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--table")
    ap.add_argument("--nranks", type=int)
    ap.add_argument("--compare", nargs="?", const="mpi", choices=("mpi", "gloo"))
    ap.add_argument("--env", action="append", default=[])
    args = ap.parse_args()
    errors = []

    def err(msg):
        errors.append(msg)

    try:
        with open(args.json, encoding="utf-8") as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {args.json} is not valid JSON: {e}", file=sys.stderr)
        return 1

    for key in ("program", "chorus_version", "mpi_library", "init", "nranks", "host", "args",
                "flags", "environment", "malloc_mmap_max", "rows", "summary", "start_time",
                "end_time"):
        if key not in run:
            err(f"no top-level '{key}'")
    if errors:
        print("FAIL: " + "; ".join(errors), file=sys.stderr)
        return 1
    if args.nranks is not None and run["nranks"] != args.nranks:
        err(f"nranks {run['nranks']}, the run had {args.nranks}")
    if not run["program"].endswith("_perf"):
        err(f"program '{run['program']}'")
    for key in ("minbytes", "maxbytes", "iters", "warmup_iters", "check", "blocking",
                "local_register", "rewrite", "offset", "compare", "datatypes", "ops"):
        if key not in run["flags"]:
            err(f"no flags.{key}")
    if run["flags"].get("compare") != args.compare:
        err(f"flags.compare is {run['flags'].get('compare')!r}, expected {args.compare!r}")
    if args.compare == "gloo" and not str(run.get("peer_library", "")).startswith("Gloo"):
        err(f"peer_library is {run.get('peer_library')!r}, expected Gloo's version")

    rows = run["rows"]
    if len(rows) != args.rows:
        err(f"{len(rows)} rows, the sweep has {args.rows}")
    if run["summary"].get("rows") != len(rows):
        err(f"summary.rows {run['summary'].get('rows')} != {len(rows)} rows")
    if run["summary"].get("out_of_bounds") != 0:
        err(f"summary.out_of_bounds {run['summary'].get('out_of_bounds')}")

    if args.table:
        table = []
        with open(args.table, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if line.startswith("#") or len(fields) < 13 or not fields[0].isdigit():
                    continue
                table.append((int(fields[0]), int(fields[1]), fields[2], fields[3],
                              int(fields[4])))
        got = [(r.get("size"), r.get("count"), r.get("type"), r.get("redop"), r.get("root"))
               for r in rows]
        if got != table:
            diff = next((k for k, (a, b) in enumerate(zip(got, table)) if a != b),
                        min(len(got), len(table)))
            err(f"JSON rows differ from the table ({len(got)} vs {len(table)} rows; first at "
                f"{diff}: {got[diff] if diff < len(got) else None} vs "
                f"{table[diff] if diff < len(table) else None})")

    def is_num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    ratios, empty = [], 0
    for k, r in enumerate(rows):
        where = f"row {k} ({r.get('size')} B {r.get('type')} {r.get('redop')})"
        for group in ("out_of_place", "in_place"):
            g = r.get(group)
            if g is None and group == "in_place":
                continue
            if not isinstance(g, dict):
                err(f"{where}: no {group}")
                continue
            for key in ("time_us", "algbw", "busbw"):
                if not is_num(g.get(key)):
                    err(f"{where}: {group}.{key} is {g.get(key)!r}")
            if g.get("wrong") not in (0, None) or (run["flags"]["check"] and g.get("wrong") != 0):
                err(f"{where}: {group}.wrong is {g.get('wrong')!r}")
        mpi = r.get("mpi")
        want_mpi = args.compare is not None and r.get("type") not in NO_PEER_TYPES[args.compare]
        if args.compare == "gloo" and (r.get("redop") == "avg" or r.get("count") == 0):
            want_mpi = False  # Gloo has no average, and fails on a call of no element
        if want_mpi != (mpi is not None):
            err(f"{where}: mpi is {mpi!r}, expected {'numbers' if want_mpi else 'null'}")
        if mpi is not None:
            for key in ("time_us", "algbw", "busbw"):
                if not is_num(mpi.get(key)):
                    err(f"{where}: mpi.{key} is {mpi.get(key)!r}")
            vs = "in_place" if run.get("program") == "broadcast_perf" else "out_of_place"
            if mpi.get("vs") != vs:
                err(f"{where}: mpi.vs is {mpi.get('vs')!r}, expected {vs!r}")
            # the ratio is of wall times (with -C 1, time_us is Chorus' cputime, wall_us its time)
            cg = r.get(vs) or {}
            t, c = mpi.get("time_us"), cg.get("wall_us", cg.get("time_us"))
            if run["flags"].get("report_cputime") and not is_num(cg.get("wall_us")):
                err(f"{where}: -C 1 but {vs}.wall_us is {cg.get('wall_us')!r}")
            if is_num(t) and is_num(c) and t > 0 and c > 0:
                if not is_num(mpi.get("ratio")) or abs(mpi["ratio"] - t / c) > 1e-6 * (t / c):
                    err(f"{where}: mpi.ratio {mpi.get('ratio')!r} != {t / c}")
                elif r.get("size") == 0:
                    empty += 1  # an empty call for both: out of the summary's ratios
                else:
                    ratios.append(mpi["ratio"])

    summary_mpi = run["summary"].get("mpi")
    if args.compare and ratios:
        if not isinstance(summary_mpi, dict):
            err("summary.mpi is missing")
        else:
            want = {"rows": len(ratios), "slower_rows": sum(x < 1 for x in ratios),
                    "empty_rows": empty}
            for key, v in want.items():
                if summary_mpi.get(key) != v:
                    err(f"summary.mpi.{key} {summary_mpi.get(key)!r}, the rows give {v}")
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            for key, v in (("geomean_ratio", geo), ("min_ratio", min(ratios)),
                           ("max_ratio", max(ratios))):
                if not is_num(summary_mpi.get(key)) or abs(summary_mpi[key] - v) > 1e-6 * v:
                    err(f"summary.mpi.{key} {summary_mpi.get(key)!r}, the rows give {v}")
    elif summary_mpi is not None:
        err(f"summary.mpi is {summary_mpi!r} without MPI rows")

    for spec in args.env:
        name, _, value = spec.partition("=")
        got = run["environment"].get(name)
        if (got or "") != value or (value == "" and name in run["environment"]):
            err(f"environment {name} is {got!r}, expected {value or 'unset'!r}")
        if name == "MALLOC_MMAP_MAX_" and run["malloc_mmap_max"] != (value or None):
            err(f"malloc_mmap_max is {run['malloc_mmap_max']!r}, expected {value or None!r}")

    if errors:
        for e in errors[:20]:
            print(f"FAIL: {args.json}: {e}", file=sys.stderr)
        if len(errors) > 20:
            print(f"FAIL: ... and {len(errors) - 20} more", file=sys.stderr)
        return 1
    print(f"json ok: {args.json}: {len(rows)} rows, {len(ratios)} with an MPI ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
