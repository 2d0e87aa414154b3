#!/usr/bin/env python3
"""A/B table of two moegen-bench outputs of the same call: base.jsonl new.jsonl.

Prints a markdown table (stage, model, tokens, base ms, new ms, change) of
the moegen rows, and with --max-slower P exits 1 if a row is more than P
percent slower in new (the rows over it are listed)."""
import argparse
import json


def load(path):
    rows = {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("peer") == "moegen" and "ms" in r:
            rows[(r["stage"], r["model"], r["tokens"])] = r["ms"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--max-slower", type=float, default=None, metavar="P")
    a = ap.parse_args()
    base, new = load(a.base), load(a.new)
    print("| stage | model | tokens | base ms | new ms | change |\n|---|---|---|---|---|---|")
    slower = []
    for k in sorted(set(base) | set(new), key=lambda k: (k[0], k[1], k[2])):
        b, n = base.get(k), new.get(k)
        ch = (n / b - 1) * 100 if b and n else None
        print(f"| {k[0]} | {k[1]} | {k[2]} | {b if b else '-'} | {n if n else '-'} | "
              f"{f'{ch:+.1f}%' if ch is not None else '-'} |")
        if a.max_slower is not None and ch is not None and ch > a.max_slower:
            slower.append((k, ch))
    for k, ch in slower:
        print(f"slower than {a.max_slower}%: {k} {ch:+.1f}%")
    return 1 if slower else 0


if __name__ == "__main__":
    raise SystemExit(main())
