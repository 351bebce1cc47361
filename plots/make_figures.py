#!/usr/bin/env python3
"""Draws the figures of a `batchsim compare` results folder (or a `batchsim plan --out`
folder) into FOLDER/figures/.

    python3 plots/make_figures.py RESULTS_FOLDER

Reads only the folder's files (experiment.json, results.csv, capacity.csv, runs/*/...,
slot_timeline/*.csv), so it can be rerun by hand after editing a style. Writes one PNG per
figure and figures/figures.json, the list report.md embeds. Needs matplotlib (Debian:
python3-matplotlib); `batchsim compare` runs this script itself when it finds one.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    folder = argv[1]
    plan = os.path.exists(os.path.join(folder, "plan.json"))
    if not plan and not os.path.exists(os.path.join(folder, "experiment.json")):
        print(f"make_figures.py: {folder}: not a batchsim compare results folder (no experiment.json)",
              file=sys.stderr)
        return 2
    try:
        import batchsim_plots
    except ImportError as e:
        print(f"make_figures.py: note: matplotlib is not importable ({e}); install python3-matplotlib",
              file=sys.stderr)
        return 3
    for fig in (batchsim_plots.make_plan(folder) if plan else batchsim_plots.make_all(folder)):
        print(os.path.join(folder, "figures", fig["file"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
