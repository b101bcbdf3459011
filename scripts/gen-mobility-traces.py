#!/usr/bin/env python3
"""Generate the mobility capacity traces of the paper catalogue (paper 002, WiFi + 3G).

Writes CSV traces in the simulator's format (`time_s,rate_mbit`, piecewise constant, see
docs/scenarios.md "Capacity traces") into scenarios/traces/ (or --out):

  mobility-walking-3g.csv             3G while walking: always covered, rate varying
  mobility-walking-wifi-<C>.csv       WiFi while walking, coverage C = 0, 25, 50, 75, 100 %
  mobility-driving-3g.csv             3G while driving at 60 km/h
  mobility-driving-wifi-<C>.csv       WiFi while driving, same coverages

The shapes follow the paper's description (its numbers, our own model):

* Walking: WiFi associations last minutes (here: exponential, mean 120 s, at least 20 s).
  During one association the rate follows the distance to the access point: low at the
  edges (0.3 Mbit/s), a peak in the middle drawn from 4-10 Mbit/s (hotspots limited to
  10 Mbit/s by their DSL backhaul), profile (1 - |2x - 1|)^3 over the association, times
  per-second noise of +-20 %. 3G: always covered, 1 to 3 Mbit/s shared cell capacity, an
  AR(1) process around 1.4 Mbit/s (0.3-3 Mbit/s).
* Driving (60 km/h): WiFi encounters of 13 s on average (exponential, at least 4 s) at the
  lowest 802.11 rate, 1 Mbit/s, of which the first 2 s go to association (rate 0). 3G:
  always covered, AR(1) around 0.6 Mbit/s (0.1-1.2 Mbit/s).
* Coverage C is the fraction of the trace during which WiFi is in range: off periods are
  exponential with mean on_mean * (1 - C) / C, then scaled so that the in-range time is
  exactly C of the trace. C = 0: WiFi never in range (all zero). C = 100: encounters back
  to back (while walking, the rate dips at each hand-over between access points; while
  driving, each encounter still starts with its association time).

The same 3G trace serves every coverage, so comparisons across coverages are paired.
Everything is seeded (--seed, default 2), so the committed traces are reproducible:

  python3 scripts/gen-mobility-traces.py            # rewrites scenarios/traces/mobility-*
  python3 scripts/gen-mobility-traces.py --check    # fails if the committed ones differ

Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

DURATION_S = 3600
COVERAGES = (0, 25, 50, 75, 100)

MOBILITY = {
    "walking": {
        "wifi_on_mean_s": 120.0,
        "wifi_on_min_s": 20,
        "wifi_assoc_s": 0,
        "wifi_edge_mbit": 0.3,
        "wifi_peak_mbit": (4.0, 10.0),
        "wifi_profile": True,
        "g3_mean_mbit": 1.4,
        "g3_range_mbit": (0.3, 3.0),
        "g3_sigma_mbit": 0.25,
    },
    "driving": {
        "wifi_on_mean_s": 13.0,
        "wifi_on_min_s": 4,
        "wifi_assoc_s": 2,
        "wifi_edge_mbit": 1.0,
        "wifi_peak_mbit": (1.0, 1.0),
        "wifi_profile": False,
        "g3_mean_mbit": 0.6,
        "g3_range_mbit": (0.1, 1.2),
        "g3_sigma_mbit": 0.1,
    },
}


def three_g(rng: random.Random, m: dict) -> list[float]:
    """Per-second 3G rate: AR(1) around the mean, clamped to the range."""
    lo, hi = m["g3_range_mbit"]
    mean = m["g3_mean_mbit"]
    r = mean
    out = []
    for _ in range(DURATION_S):
        r = mean + 0.9 * (r - mean) + rng.gauss(0.0, m["g3_sigma_mbit"])
        r = min(hi, max(lo, r))
        out.append(r)
    return out


def periods(rng: random.Random, m: dict, coverage: int) -> list[tuple[bool, int]]:
    """Alternating (in_range, seconds) periods covering DURATION_S, in range `coverage` %."""
    if coverage == 0:
        return [(False, DURATION_S)]
    on_mean, on_min = m["wifi_on_mean_s"], m["wifi_on_min_s"]
    ons: list[int] = []
    offs: list[float] = []
    total_on = 0
    off_mean = on_mean * (100 - coverage) / coverage
    while total_on < DURATION_S * coverage / 100:
        d = max(on_min, round(rng.expovariate(1.0 / on_mean)))
        ons.append(d)
        total_on += d
        offs.append(rng.expovariate(1.0 / off_mean) if coverage < 100 else 0.0)
    # Scale the off periods so the in-range share is exactly the coverage over the trace.
    want_off = total_on * (100 - coverage) / coverage
    scale = want_off / sum(offs) if sum(offs) > 0 else 0.0
    out: list[tuple[bool, int]] = []
    # Start in range, so that the session can set up its WiFi path (see the scenarios).
    for on, off in zip(ons, offs):
        out.append((True, on))
        off_s = round(off * scale)
        if off_s > 0:
            out.append((False, off_s))
    return out


def wifi(rng: random.Random, m: dict, coverage: int) -> list[float]:
    """Per-second WiFi rate for one coverage."""
    out: list[float] = []
    for in_range, secs in periods(rng, m, coverage):
        if not in_range:
            out.extend([0.0] * secs)
            continue
        peak = rng.uniform(*m["wifi_peak_mbit"])
        edge = m["wifi_edge_mbit"]
        for s in range(secs):
            if s < m["wifi_assoc_s"]:
                out.append(0.0)
                continue
            if m["wifi_profile"]:
                x = (s + 0.5) / secs
                shape = (1.0 - abs(2.0 * x - 1.0)) ** 3
                r = (edge + (peak - edge) * shape) * rng.uniform(0.8, 1.2)
            else:
                r = edge
            out.append(r)
    return out[:DURATION_S] + [0.0] * max(0, DURATION_S - len(out))


def csv_text(rates: list[float], header: str) -> str:
    """Rows only where the rate changes (rounded to 10 kbit/s)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("time_s,rate_mbit")
    last = None
    for t, r in enumerate(rates):
        r = round(r, 2)
        if r != last:
            lines.append(f"{t},{r:g}")
            last = r
    return "\n".join(lines) + "\n"


def generate(seed: int) -> dict[str, str]:
    files: dict[str, str] = {}
    for k, (name, m) in enumerate(MOBILITY.items()):
        rng = random.Random(seed * 1000 + k)
        g3 = three_g(rng, m)
        mean = sum(g3) / len(g3)
        files[f"mobility-{name}-3g.csv"] = csv_text(
            g3,
            f"3G capacity while {name}, {DURATION_S} s, mean {mean:.2f} Mbit/s.\n"
            f"Generated by scripts/gen-mobility-traces.py --seed {seed}; do not edit.",
        )
        for c in COVERAGES:
            w = wifi(random.Random(seed * 1000 + k * 100 + c + 1), m, c)
            on = sum(1 for r in w if r > 0) / len(w)
            wmean = sum(w) / len(w)
            files[f"mobility-{name}-wifi-{c}.csv"] = csv_text(
                w,
                f"WiFi capacity while {name}, coverage {c} % ({on * 100:.1f} % of seconds\n"
                f"with a rate above 0), {DURATION_S} s, mean {wmean:.2f} Mbit/s.\n"
                f"Generated by scripts/gen-mobility-traces.py --seed {seed}; do not edit.",
            )
    return files


def main() -> int:
    here = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=2, help="random seed (default 2)")
    ap.add_argument(
        "--out",
        type=Path,
        default=here / "scenarios" / "traces",
        help="output directory (default scenarios/traces)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the files in --out differ from what would be written",
    )
    args = ap.parse_args()
    files = generate(args.seed)
    if args.check:
        stale = [
            n
            for n, text in files.items()
            if not (args.out / n).is_file() or (args.out / n).read_text() != text
        ]
        for n in stale:
            print(f"{args.out / n}: differs from the generator's output; "
                  f"run scripts/gen-mobility-traces.py --seed {args.seed}", file=sys.stderr)
        return 1 if stale else 0
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for n, text in files.items():
            (args.out / n).write_text(text)
    except OSError as e:
        print(f"cannot write traces to {args.out}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(files)} traces to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
