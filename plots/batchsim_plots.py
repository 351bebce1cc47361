"""Figures of a `batchsim compare` results folder, drawn from its files only.

Each figure function takes a ResultsFolder and an output folder, writes one or more PNGs and
returns [(file name, title, caption)], or [] when the folder holds nothing to draw for it (a
latency-vs-QPS figure needs a rate axis or a capacity search; the slot timelines need the
experiment's `slot-timeline`). Column names are summary.json paths (README "Outputs"), so
these scripts read the same names a user's notebook would.
"""

import csv
import json
import math
import os
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")  # files only; no display needed (CI, ssh)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

DPI = 110


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class ResultsFolder:
    """results.csv, experiment.json and the per-run files of one results folder."""

    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "experiment.json")) as f:
            self.experiment = json.load(f)
        results = os.path.join(folder, "results.csv")
        self.runs = read_csv(results) if os.path.exists(results) else []
        cap = os.path.join(folder, "capacity.csv")
        self.capacities = read_csv(cap) if os.path.exists(cap) else []
        self.policies = [p["label"] for p in self.experiment["policies"]]

    def run_file(self, run, name):
        return os.path.join(self.folder, "runs", run["experiment.run_name"], name)

    def groups(self, rows=None):
        """Distinct experiment.group values in run order."""
        seen = OrderedDict()
        for r in self.runs if rows is None else rows:
            seen[r["experiment.group"]] = True
        return list(seen)

    def first_seed_runs(self, group):
        """One run per policy of `group`: the first seed's (what a CDF or timeline shows)."""
        out = OrderedDict()
        for r in self.runs:
            if r["experiment.group"] == group and r["experiment.policy"] not in out:
                if r.get("experiment.capacity_probe", "") == "":
                    out[r["experiment.policy"]] = r
        return out


def policy_colors(policies):
    cmap = plt.get_cmap("tab10")
    return {p: cmap(i % 10) for i, p in enumerate(policies)}


def _spread(values):
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan, math.nan
    return sum(values) / len(values), min(values), max(values)


def _pick_groups(groups, most=4):
    """At most `most` groups, spread evenly (first and last kept): enough to see a trend."""
    if len(groups) <= most:
        return groups
    step = (len(groups) - 1) / (most - 1)
    return [groups[round(i * step)] for i in range(most)]


def _slug(text):
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text) or "all"


def _group_title(group):
    return group if group else "all runs"


def _axis_names(res):
    return [a["name"] for a in res.experiment.get("axes", [])]


AXIS_TITLES = {"rate": "request rate (requests/s, Poisson)", "num-requests": "number of requests",
               "tp": "tensor-parallel GPUs", "gpu": "GPU", "model": "model", "trace": "trace",
               "prompt-len": "prompt length (tokens)", "output-len": "output length (tokens)"}


def _axis_title(res):
    """The x label of a single-axis bar chart: units for the known axes; for a named axis
    ("cap"), the run keys it sets, so a reader knows what the numbers are."""
    axis = res.experiment["axes"][0]
    name = axis["name"]
    if name in AXIS_TITLES:
        return AXIS_TITLES[name]
    sets = axis.get("sets", [])
    return f"{name} (sets {', '.join(sets)})" if sets else name


def _log_ticks(ax, which="x"):
    """Plain numbers on a log axis (20, 50, 100 rather than a lone 10^2): with two or three
    decades, matplotlib's default leaves one or two labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    if not (lo > 0 and hi > lo):
        return
    subs = (1.0, 2.0, 5.0) if math.log10(hi / lo) <= 3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _tick_label(res, group):
    """With one axis, "num-requests=64" says less than "64" under an x label "num-requests"."""
    if not group:
        return "all runs"
    if len(_axis_names(res)) == 1:
        return group.split("=", 1)[1]
    return group.replace(" ", "\n")


def _bars(ax, res, groups, metric, ylabel, colors, rows=None, scale=1.0, dots=False):
    """Grouped bars: one cluster per group, one bar per policy, min–max over seeds as a whisker.
    Values are multiplied by `scale` (seconds to ms). `dots`: a marker per policy instead of a
    bar, for a logarithmic axis, on which a bar's length means nothing."""
    rows = res.runs if rows is None else rows
    n = len(res.policies)
    width = 0.8 / n
    for i, policy in enumerate(res.policies):
        means, lo, hi = [], [], []
        for g in groups:
            vals = [_num(r.get(metric)) * scale for r in rows
                    if r["experiment.group"] == g and r["experiment.policy"] == policy]
            m, a, b = _spread(vals)
            means.append(m)
            lo.append(m - a if not math.isnan(m) else 0)
            hi.append(b - m if not math.isnan(m) else 0)
        xs = [k + (i - (n - 1) / 2) * width for k in range(len(groups))]
        whiskers = [lo, hi] if any(lo) or any(hi) else None
        if dots:
            ax.errorbar(xs, means, yerr=whiskers, fmt="o", ms=7, color=colors[policy], label=policy, capsize=3)
        else:
            ax.bar(xs, means, width, label=policy, color=colors[policy], yerr=whiskers, capsize=3)
    ax.set_xticks(range(len(groups)))
    labels = [_tick_label(res, g) for g in groups]
    # Many groups of several axes (a load x model x dtype sweep) overlap as stacked
    # "axis=value" lines: write the values only, slanted, and name the axes once below.
    crowded = len(_axis_names(res)) > 1 and sum(len(label) for label in labels) > 120
    if crowded:
        labels = [" / ".join(part.split("=", 1)[-1] for part in g.split(" ")) for g in groups]
        ax.set_xticklabels(labels, fontsize=8, rotation=35, ha="right", rotation_mode="anchor")
        ax.set_xlabel(" / ".join(_axis_names(res)))
    else:
        ax.set_xticklabels(labels, fontsize=9)
    if len(_axis_names(res)) == 1:
        ax.set_xlabel(_axis_title(res))
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def throughput(res, out_dir):
    runs = [r for r in res.runs if r.get("experiment.capacity_probe", "") == ""]
    if not runs or res.experiment.get("capacity"):
        return []
    groups = res.groups(runs)
    colors = policy_colors(res.policies)
    budget = res.experiment.get("iteration_budget", 0)
    panels = [("throughput.output_tokens_per_s", "output tokens/s", "Output throughput"),
              ("throughput.requests_per_s", "requests/s", "Request throughput")]
    if budget:
        panels.append(("experiment.completed_within_budget", "requests",
                       f"Completed within {budget} iterations"))
    width = max(5.0, 0.35 * len(groups) * len(res.policies) + 1.5) * len(panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(min(18, width), 4.2))
    for ax, (metric, ylabel, title) in zip(axes, panels):
        _bars(ax, res, groups, metric, ylabel, colors, runs)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle(res.experiment["name"])
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=DPI)
    plt.close(fig)
    caption = "Bars are means over seeds; whiskers span the seeds' min–max."
    if budget:
        caption += (f" The last panel counts requests finished by the end of iteration {budget}: "
                    "the primer's measure of how much work a batching policy gets done.")
    return [("throughput.png", "Throughput per policy", caption)]


# The four latency figures a comparison shows, as (summary.json path, axis label, scale from
# seconds): per-token times (TBT, TPOT) in ms in every figure, requests' times in s.
LATENCY_PANELS = [("latency.e2e_s.p50", "p50 e2e latency (s)", 1.0), ("latency.e2e_s.p99", "p99 e2e latency (s)", 1.0),
                  ("latency.ttft_s.p99", "p99 TTFT (s)", 1.0), ("latency.tbt_s.p99", "p99 TBT (ms)", 1e3)]


def latency_bars(res, out_dir):
    """Latency per policy when there is no rate axis (a trace replay, an offline burst): with
    arrivals fixed, throughput is often capped by the arrival rate and latency tells policies apart."""
    runs = [r for r in res.runs if r.get("experiment.capacity_probe", "") == ""]
    if not runs or any(r.get("experiment.rate", "") != "" for r in runs):
        return []
    groups = res.groups(runs)
    colors = policy_colors(res.policies)
    panels = list(LATENCY_PANELS)
    width = min(16, max(9, 0.5 * len(groups) * len(res.policies) + 4))
    fig, axes = plt.subplots(2, 2, figsize=(width, 7))
    for ax, (metric, label, scale) in zip(axes.flat, panels):
        # Log only when the values span orders of magnitude (static queueing vs the rest), and
        # then as dots: a bar's length on a log axis means nothing, and on one whose range is a
        # few percent it would turn a 5% gap into a twofold one.
        values = [v for v in (_num(r.get(metric)) for r in runs) if v > 0]
        wide = bool(values) and max(values) / min(values) > 10
        _bars(ax, res, groups, metric, label, colors, runs, scale=scale, dots=wide)
        if wide:
            ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3, which="both")
            _log_ticks(ax, "y")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{res.experiment['name']}: latency per policy")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "latency.png"), dpi=DPI)
    plt.close(fig)
    return [("latency.png", "Latency per policy",
             "Means over seeds (whiskers: min–max). A panel whose values span more than tenfold "
             "(static batching's queueing dwarfs the rest) has a logarithmic y axis and dots instead of bars.")]


LATENCY_NAMES = {"e2e_s": "e2e latency", "ttft_s": "TTFT", "tpot_s": "TPOT", "tbt_s": "TBT",
                 "queueing_s": "queueing delay", "normalized_s_per_token": "normalised latency"}


def _metric_scale(path):
    """Seconds to the unit a figure shows `path` in: ms for per-token times (TBT, TPOT)."""
    parts = path.split(".")
    return 1e3 if len(parts) == 3 and parts[0] == "latency" and parts[1] in ("tbt_s", "tpot_s") else 1.0


def _metric_label(path):
    """"latency.queueing_s.p50" -> "p50 queueing delay (s)", "latency.tbt_s.p99" -> "p99 TBT (ms)";
    other paths as they are."""
    parts = path.split(".")
    if len(parts) == 3 and parts[0] == "latency" and parts[1] in LATENCY_NAMES:
        unit = "s/token" if parts[1] == "normalized_s_per_token" else "ms" if _metric_scale(path) == 1e3 else "s"
        return f"{parts[2]} {LATENCY_NAMES[parts[1]]} ({unit})"
    return path


def _slo_text(path, bound):
    label = _metric_label(path)
    for unit in ("s", "ms"):
        if label.endswith(f" ({unit})"):
            return f"{label[:-len(unit) - 3]} ≤ {bound * _metric_scale(path):g} {unit}"
    return f"{label} ≤ {bound}"


def latency_vs_qps(res, out_dir):
    rows = [r for r in res.runs if r.get("experiment.rate", "") != ""]
    if not rows:
        return []
    colors = policy_colors(res.policies)
    capacity_spec = res.experiment.get("capacity") or {}
    slo = capacity_spec.get("slo", {})
    rate_axes = {a["name"] for a in res.experiment.get("axes", []) if "rate" in a.get("sets", [])} or {"rate"}

    # One line per (policy, other axes): the group label minus its rate part. A capacity search
    # probes its own rates per seed, so there each seed's probes are a line of their own:
    # averaging different seeds' probes at different rates would draw a zigzag no run made.
    def other_axes(r):
        # From the per-axis columns, not by splitting the group text: a label may hold spaces.
        return " ".join(f"{a}={r.get('experiment.axes.' + a, '')}" for a in _axis_names(res) if a not in rate_axes)
    lines = OrderedDict()
    for r in rows:
        key = (r["experiment.policy"], other_axes(r), r["experiment.seed"] if slo else "")
        lines.setdefault(key, {}).setdefault(_num(r["experiment.rate"]), []).append(r)
    others = list(OrderedDict((k[1], True) for k in lines))
    styles = ["-", "--", ":", "-."]
    panels = list(LATENCY_PANELS)
    if slo:
        # A capacity search is judged on its SLO figures: show those first.
        named = [(k, _metric_label(k), _metric_scale(k)) for k in slo]
        panels = (named + [p for p in panels if p[0] not in slo])[:4]

    def meets(r):
        return all(_num(r.get(k)) <= bound for k, bound in slo.items())
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for ax, (metric, label, scale) in zip(axes.flat, panels):
        labelled = set()
        for (policy, other, _seed), by_rate in lines.items():
            rates = sorted(by_rate)
            # A log axis cannot show 0 (no queueing at low load): leave those points out.
            stats = [_spread([v * scale if v > 0 else math.nan for v in (_num(r[metric]) for r in by_rate[q])])
                     for q in rates]
            name = policy if len(others) == 1 else f"{policy} {other}"
            ls = styles[others.index(other) % len(styles)]
            means = [s[0] for s in stats]
            ax.plot(rates, means, ls, marker=None if slo else "o", ms=3, lw=1 if slo else 1.5,
                    color=colors[policy], label=None if name in labelled else name)
            labelled.add(name)
            if slo:
                met = [meets(by_rate[q][0]) for q in rates]
                ax.scatter([q for q, m in zip(rates, met) if m], [v for v, m in zip(means, met) if m],
                           s=14, color=colors[policy], zorder=3)
                ax.scatter([q for q, m in zip(rates, met) if not m], [v for v, m in zip(means, met) if not m],
                           s=14, facecolors="white", edgecolors=colors[policy], zorder=3)
            elif any(s[1] != s[2] for s in stats):
                ax.fill_between(rates, [s[1] for s in stats], [s[2] for s in stats],
                                color=colors[policy], alpha=0.15)
        if metric in slo:
            ax.axhline(slo[metric] * scale, color="black", ls="--", lw=1, label="SLO")
        ax.set_yscale("log")
        if slo:
            ax.set_xscale("log")  # probes are spaced geometrically
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    for ax in axes.flat:
        _log_ticks(ax, "y")
        if slo:
            _log_ticks(ax, "x")
    for ax in axes[1]:
        ax.set_xlabel("request rate (requests/s, Poisson)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if slo:
        from matplotlib.lines import Line2D
        handles += [Line2D([], [], ls="", marker="o", color="gray", ms=4),
                    Line2D([], [], ls="", marker="o", markerfacecolor="white", markeredgecolor="gray", ms=4)]
        labels += ["probe met every SLO", "probe missed an SLO"]
    # Above the panels: inside one, the legend covered the lines it names.
    ncol = min(4, len(labels))
    rows = math.ceil(len(labels) / ncol)
    fig.legend(handles, labels, fontsize=8, ncol=ncol, loc="upper center", bbox_to_anchor=(0.5, 0.955))
    fig.suptitle(f"{res.experiment['name']}: latency vs load")
    fig.tight_layout(rect=(0, 0, 1, 0.95 - 0.03 * rows))
    fig.savefig(os.path.join(out_dir, "latency_vs_qps.png"), dpi=DPI)
    plt.close(fig)
    if slo:
        caption = ("Each line is one seed's capacity search, its points the probed rates (filled: the "
                   "probe met every SLO; hollow: it missed one); dashed lines are the SLO bounds; both "
                   "axes are logarithmic.")
    else:
        caption = "Mean over seeds, band = min–max; the y axis is logarithmic."
    return [("latency_vs_qps.png", "Latency vs request rate", caption)]


def _ecdf(values):
    values = sorted(v for v in values if not math.isnan(v))
    n = len(values)
    return values, [(i + 1) / n for i in range(n)]


def cdfs(res, out_dir):
    out = []
    colors = policy_colors(res.policies)
    groups = _pick_groups([g for g in res.groups() if res.first_seed_runs(g)])
    for g in groups:
        runs = res.first_seed_runs(g)
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for policy, run in runs.items():
            req_file = res.run_file(run, "requests.csv")
            if os.path.exists(req_file):
                xs, ys = _ecdf([_num(r["ttft_s"]) for r in read_csv(req_file)])
                axes[0].plot(xs, ys, color=colors[policy], label=policy)
            q_file = res.run_file(run, "tbt_quantiles.csv")
            if os.path.exists(q_file):
                rows = read_csv(q_file)
                axes[1].plot([_num(r["tbt_s"]) * 1e3 for r in rows], [_num(r["quantile"]) for r in rows],
                             color=colors[policy], label=policy)
        axes[0].set_xlabel("TTFT (s)")
        axes[1].set_xlabel("time between tokens (ms)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_ylabel("fraction of requests" if ax is axes[0] else "fraction of gaps")
            ax.set_ylim(0, 1.01)
            ax.grid(alpha=0.3, which="both")
            _log_ticks(ax, "x")
        axes[0].set_title("TTFT, per request")
        axes[1].set_title("TBT, every inter-token gap")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{res.experiment['name']}: {_group_title(g)}")
        fig.tight_layout()
        name = f"cdf_{_slug(g)}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=DPI)
        plt.close(fig)
        out.append((name, f"CDFs of TTFT and TBT ({_group_title(g)})",
                    "First seed of each policy; logarithmic x axis."))
    return out


def kv_over_time(res, out_dir):
    """Small multiples, one row per policy: with seven policies one shared panel is a tangle."""
    out = []
    colors = policy_colors(res.policies)
    groups = _pick_groups([g for g in res.groups() if res.first_seed_runs(g)])
    for g in groups:
        series = []
        for policy, run in res.first_seed_runs(g).items():
            path = res.run_file(run, "kv_timeline.csv")
            capacity = _num(run.get("kv.capacity_tokens"))
            if os.path.exists(path) and capacity > 0:
                rows = read_csv(path)
                series.append((policy, [_num(r["time_s"]) for r in rows],
                               [100 * _num(r["kv_used_tokens"]) / capacity for r in rows],
                               [100 * _num(r["kv_allocated_tokens"]) / capacity for r in rows]))
        if not series:
            continue
        fig, axes = plt.subplots(len(series), 1, figsize=(10, 0.6 + 1.15 * len(series)), sharex=True,
                                 squeeze=False)
        for ax, (policy, t, used, held) in zip(axes[:, 0], series):
            ax.fill_between(t, used, step="post", color=colors[policy], alpha=0.55, lw=0)
            ax.step(t, held, where="post", color="black", lw=0.7, alpha=0.8)
            ax.set_ylim(0, 105)
            ax.set_yticks([0, 50, 100])
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            # The name sits right of the panel: inside, it covered the curve near full KV.
            ax.text(1.01, 0.5, policy, transform=ax.transAxes, va="center", ha="left", fontsize=8)
        axes[-1, 0].set_xlim(left=0)  # time starts at the first arrival; no negative margin
        axes[-1, 0].set_xlabel("simulated time (s)")
        fig.supylabel("KV cache (% of capacity)", fontsize=9)
        fig.suptitle(f"{res.experiment['name']}: KV memory over time ({_group_title(g)})", fontsize=10)
        fig.tight_layout()
        name = f"kv_{_slug(g)}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=DPI)
        plt.close(fig)
        out.append((name, f"KV memory over time ({_group_title(g)})",
                    "Filled: tokens whose KV is written; black line: tokens held (reserved up front, or "
                    "in allocated blocks). The gap between them is memory that reservation or padding "
                    "wastes. First seed of each policy."))
    return out


SLOT_STATES = OrderedDict([("idle", "#e6e6e6"), ("prefill", "#3b75af"), ("decode", "#8fc176"),
                           ("end", "#d9534f"), ("preempted", "#f0ad4e")])


def _slot_timeline_runs(res):
    """The slot timeline's runs: (workload text, [(policy label, rows of its CSV)]), or None."""
    spec = res.experiment.get("slot_timeline")
    folder = os.path.join(res.folder, "slot_timeline")
    if not spec or not os.path.isdir(folder):
        return None
    labels = [p["label"] for p in spec["policies"] if os.path.exists(os.path.join(folder, p["label"] + ".csv"))]
    runs = [(label, read_csv(os.path.join(folder, label + ".csv"))) for label in labels]
    runs = [(label, rows) for label, rows in runs if rows]
    if not runs:
        return None
    # The timeline runs its own small workload, not the experiment's: say which.
    base = spec.get("base", {})
    workload = (f"{base.get('num_requests')} requests, prompt {base.get('prompt_len')}, "
                f"output {base.get('output_len')} tokens" if base.get("trace", "") == "" else
                f"{base.get('num_requests')} requests of {os.path.basename(base['trace'])}")
    return workload, runs


def _state_legend(fig, loc="upper right"):
    fig.legend(handles=[Patch(color=c, label=s if s != "idle" else "idle (bubble)") for s, c in SLOT_STATES.items()],
               loc=loc, ncol=len(SLOT_STATES), fontsize=8)


def slot_timeline(res, out_dir):
    loaded = _slot_timeline_runs(res)
    if not loaded:
        return []
    workload, runs = loaded
    from matplotlib.colors import ListedColormap
    cmap = ListedColormap(list(SLOT_STATES.values()))
    code = {s: i for i, s in enumerate(SLOT_STATES)}
    grids = []
    for label, rows in runs:
        iters = sorted({int(r["iteration"]) for r in rows})
        col = {it: i for i, it in enumerate(iters)}
        slots = 1 + max(int(r["slot"]) for r in rows)
        grid = [[0] * len(iters) for _ in range(slots)]
        for r in rows:
            grid[int(r["slot"])][col[int(r["iteration"])]] = code[r["state"]]
        grids.append((label, grid, len(iters)))
    width = max(n for _, _, n in grids)
    fig, axes = plt.subplots(len(grids), 1, figsize=(min(16, 4 + width / 12), 1.2 + 1.0 * sum(len(g) for _, g, _ in grids) / 2.5),
                             squeeze=False)
    for ax, (label, grid, n) in zip(axes[:, 0], grids):
        ax.imshow(grid, aspect="auto", cmap=cmap, vmin=0, vmax=len(SLOT_STATES) - 1, interpolation="nearest",
                  extent=(-0.5, n - 0.5, len(grid) - 0.5, -0.5))
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_yticks(range(len(grid)))
        ax.set_yticklabels([f"slot {i}" for i in range(len(grid))], fontsize=7)
        ax.set_title(f"{label}: {n} iterations", fontsize=10, loc="left")
    axes[-1, 0].set_xlabel("iteration")
    _state_legend(fig)
    fig.suptitle(f"{res.experiment['name']}: slot timeline ({workload})", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(os.path.join(out_dir, "slot_timeline.png"), dpi=DPI)
    plt.close(fig)
    return [("slot_timeline.png", "Slot timeline",
             f"A small run of its own ({workload}). Rows are batch slots, columns iterations. A "
             "static batch keeps finished rows idle until its longest sequence ends; continuous "
             "batching refills a slot in the iteration after its sequence ends.")]


def time_axis_cells(rows):
    """A slot timeline's cells on a time axis: ({(slot, state): [(start_s, width_s)]}, the
    iterations' [(start_s, end_s)] in time order). Every cell is as wide as its iteration took."""
    cells, iterations = OrderedDict(), {}
    for r in rows:
        start, end = _num(r["start_s"]), _num(r["end_s"])
        cells.setdefault((int(r["slot"]), r["state"]), []).append((start, end - start))
        iterations[int(r["iteration"])] = (start, end)
    return cells, [iterations[i] for i in sorted(iterations)]


def slot_timeline_time(res, out_dir):
    """The slot timeline again with time, not iterations, along x: a long prefill widens every
    decode that shares its iteration, which the iteration axis draws as wide as any other."""
    loaded = _slot_timeline_runs(res)
    if not loaded:
        return []
    workload, runs = loaded
    drawn = [(label, *time_axis_cells(rows)) for label, rows in runs]
    slots = [1 + max(slot for slot, _ in cells) for _, cells, _ in drawn]
    fig, axes = plt.subplots(len(drawn), 1, figsize=(12, 1.2 + sum(slots) / 2.5), sharex=True, squeeze=False)
    for ax, n, (label, cells, iterations) in zip(axes[:, 0], slots, drawn):
        # Grey where the replica computes (a slot without a cell there is a bubble), white where
        # it waits for work.
        ax.broken_barh([(a, b - a) for a, b in iterations], (-0.5, n), facecolors=SLOT_STATES["idle"], lw=0)
        # Cell borders mark iteration boundaries while there is room for them.
        edge = 0.4 if len(iterations) <= 150 else 0
        for (slot, state), spans in cells.items():
            ax.broken_barh(spans, (slot - 0.45, 0.9), facecolors=SLOT_STATES[state], edgecolor="white", lw=edge)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"slot {i}" for i in range(n)], fontsize=7)
        durations = sorted(b - a for a, b in iterations)
        ax.set_title(f"{label}: {len(iterations)} iterations in {iterations[-1][1]:.2f} s; median "
                     f"{1e3 * durations[len(durations) // 2]:.1f} ms, longest {1e3 * durations[-1]:.1f} ms",
                     fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].set_xlabel("simulated time (s)")
    _state_legend(fig, loc="lower center")  # below the time axis: the long title fills the top
    fig.suptitle(f"{res.experiment['name']}: slot timeline on a time axis ({workload})", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(os.path.join(out_dir, "slot_timeline_time.png"), dpi=DPI)
    plt.close(fig)
    return [("slot_timeline_time.png", "Slot timeline on a time axis",
             "The same runs with each iteration as wide as it took: a long prefill stretches the decodes "
             "that share its iteration (the stall behind a time-between-tokens tail), which the slot "
             "timeline above draws as wide as any other. Grey: a slot idle while the replica computes; "
             "white: the replica idle.")]


def capacity(res, out_dir):
    if not res.capacities:
        return []
    colors = policy_colors(res.policies)
    groups = res.groups(res.capacities)
    fig, ax = plt.subplots(figsize=(max(7.5, 0.8 * len(groups) * len(res.policies) + 2), 4.5))
    # What the search varied: the rate (a trace's speedup, shown as its mean rate) or replicas.
    search = res.experiment["capacity"].get("search", "rate")
    if search == "replicas":
        key, label, what = "capacity.replicas", "fewest replicas", "fewest replicas meeting"
    else:
        key = "capacity.rate_rps"
        label = "capacity (requests/s)" + (", trace sped up" if search == "trace-speedup" else "")
        what = "largest request rate meeting"
    _bars(ax, res, groups, key, label, colors, res.capacities)
    slo = " and ".join(_slo_text(k, v) for k, v in res.experiment["capacity"]["slo"].items())
    ax.set_title(f"{res.experiment['name']}: {what}\n{slo}", fontsize=10)
    for bar in ax.patches:  # the number itself is what a reader quotes
        if bar.get_height() > 0:
            ax.annotate(f"{bar.get_height():.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height() / 2),
                        ha="center", va="center", fontsize=9, color="white", fontweight="bold")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "capacity.png"), dpi=DPI)
    plt.close(fig)
    return [("capacity.png", "Capacity under the SLO",
             "Mean over seeds; whiskers span the seeds' min–max.")]


def _deployment_axis(res):
    """The axis whose values split the GPUs into pools (it sets prefill-replicas), or None."""
    for axis in res.experiment.get("axes", []):
        if "prefill-replicas" in axis.get("sets", []):
            return axis
    return None


DISAGG_PANELS = [("latency.tbt_s.p99", "p99 TBT (ms)", 1e3), ("latency.ttft_s.p90", "p90 TTFT (s)", 1),
                 ("goodput.requests_per_s_per_gpu", "goodput per GPU (req/s)", 1)]


def disaggregation(res, out_dir):
    """Colocated vs prefill/decode pools: one row per combination of the other axes, the
    deployments along x, a bar per policy; and each moved request's transfer time against its
    prompt length."""
    axis = _deployment_axis(res)
    runs = [r for r in res.runs if r.get("experiment.capacity_probe", "") == ""]
    if axis is None or not runs:
        return []
    key = "experiment.axes." + axis["name"]
    deployments = axis["values"]
    others = OrderedDict()
    for r in runs:
        rest = " ".join(p for p in r["experiment.group"].split(" ") if not p.startswith(axis["name"] + "="))
        others.setdefault(rest, []).append(r)
    colors = policy_colors(res.policies)
    n = len(res.policies)
    width = 0.8 / n
    fig, axes = plt.subplots(len(others), len(DISAGG_PANELS), figsize=(4.4 * len(DISAGG_PANELS), 2.5 * len(others) + 0.6),
                             squeeze=False)
    for row, (rest, rows) in enumerate(others.items()):
        for col, (metric, label, scale) in enumerate(DISAGG_PANELS):
            ax = axes[row][col]
            for i, policy in enumerate(res.policies):
                ys = []
                for d in deployments:
                    vals = [_num(r.get(metric)) * scale for r in rows if r[key] == d and r["experiment.policy"] == policy]
                    ys.append(_spread(vals)[0])
                ax.bar([k + (i - (n - 1) / 2) * width for k in range(len(deployments))], ys, width,
                       color=colors[policy], label=policy)
            ax.set_xticks(range(len(deployments)))
            ax.set_xticklabels(deployments, fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            ax.set_ylabel(label, fontsize=8)
            bound = _num(rows[0].get("slo.bounds." + metric))  # the run's SLO bound on it, if any
            if not math.isnan(bound):
                ax.axhline(bound * scale, linestyle="--", color="grey", linewidth=1)
            if row == 0:
                ax.set_title(label)
            if col == 0:
                ax.text(-0.28, 0.5, rest or "all", transform=ax.transAxes, rotation=90, va="center", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{res.experiment['name']}: colocated vs prefill/decode pools", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "disaggregation.png"), dpi=DPI)
    plt.close(fig)
    out = [("disaggregation.png", "Colocated vs prefill/decode pools",
            "One row per combination of the other axes, deployments along x, a bar per policy (mean over "
            "seeds). TBT counts every gap, the hand-off included; TTFT is the prefill side's first token; "
            "goodput per GPU: requests within every goodput threshold per second, over the GPUs.")]
    # Transfer time against prompt length: the first policy's P:D runs of the first seed, the
    # combination of the other axes with the most transfers (the heaviest load).
    pooled = [r for r in runs if r["experiment.policy"] == res.policies[0] and r.get("config.prefill_replicas", "")]
    if pooled:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        cmap = plt.get_cmap("tab10")
        for i, d in enumerate(deployments):
            labelled = False
            for r in pooled:
                path = res.run_file(r, "requests.csv")
                if r[key] != d or not os.path.exists(path):
                    continue
                reqs = [q for q in read_csv(path) if q.get("kv_transfer_s", "") != ""]
                xs = [_num(q["prompt_tokens"]) for q in reqs]
                axes[0].scatter(xs, [1e3 * _num(q["kv_transfer_s"]) for q in reqs], s=3, alpha=0.3,
                                color=cmap(i % 10), label=None if labelled else d)
                axes[1].scatter(xs, [1e3 * (_num(q["kv_wait_s"]) + _num(q["kv_queue_s"]) + _num(q["kv_transfer_s"]))
                                     for q in reqs], s=3, alpha=0.3, color=cmap(i % 10))
                labelled = True
        for ax, title in zip(axes, ["on the link", "hand-off to landing: waiting for decode memory + NIC queue + link"]):
            ax.set_xlabel("prompt tokens")
            ax.set_ylabel("ms")
            if ax is axes[1]:  # the waits span orders of magnitude; the link time is linear
                ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.set_title(title, fontsize=9)
        axes[0].legend(fontsize=6, markerscale=3)
        fig.suptitle(f"{res.experiment['name']}: KV transfer time vs prompt length ({res.policies[0]})", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "kv_transfer.png"), dpi=DPI)
        plt.close(fig)
        out.append(("kv_transfer.png", "KV transfer time vs prompt length",
                    "Each dot one transferred request of a P:D run (first policy, every seed and combination). "
                    "Left: time on the link, latency + bytes over the NICs, linear in the prompt; right: from the "
                    "prefill's end to the KV's landing, with the waits for decode memory and for the NICs."))
    return out


# The parts of summary.json's latency_breakdown, in its order, with a colour each: the requests'
# own work in blue and green, time lost in warm colours, overhead grey.
BREAKDOWN_PARTS = OrderedDict([("queueing", "#d9534f"), ("prefill", "#3b75af"), ("decode", "#8fc176"),
                               ("stall", "#f0ad4e"), ("preemption", "#9467bd"), ("kv_transfer", "#17becf"),
                               ("overhead", "#9e9e9e")])


def _breakdown_value(rows, group, policy, part, key):
    """Mean over seeds of latency_breakdown.<part>.<key>; 0 when no run has it."""
    m, _, _ = _spread([_num(r.get(f"latency_breakdown.{part}.{key}")) for r in rows
                       if r["experiment.group"] == group and r["experiment.policy"] == policy])
    return 0.0 if math.isnan(m) else m


def latency_breakdown(res, out_dir):
    """Per policy, stacked bars of where the time went: the mean request's seconds by part (left)
    and the p99 requests' shares of their e2e (right), one row of panels per group (at most four)."""
    runs = [r for r in res.runs if r.get("experiment.capacity_probe", "") == ""
            and r.get("latency_breakdown.queueing.mean", "") != ""]
    if not runs:
        return []
    groups = _pick_groups(res.groups(runs))
    # A part no run spent time in (kv_transfer without disaggregation) would crowd the legend.
    parts = [p for p in BREAKDOWN_PARTS if any(_num(r.get(f"latency_breakdown.{p}.share")) > 0 for r in runs)]
    xs = list(range(len(res.policies)))
    crowded = len(res.policies) > 4
    height = 0.9 + 3.0 * len(groups)
    fig, axes = plt.subplots(len(groups), 2, figsize=(min(16, 4 + 1.1 * len(res.policies)), height), squeeze=False)
    for row, g in zip(axes, groups):
        for ax, key, scale, ylabel in ((row[0], "mean", 1, "mean request (s)"),
                                       (row[1], "share_of_p99_requests", 100, "p99 requests (% of e2e)")):
            bottom = [0.0] * len(res.policies)
            for part in parts:
                heights = [scale * _breakdown_value(runs, g, p, part, key) for p in res.policies]
                ax.bar(xs, heights, 0.7, bottom=bottom, color=BREAKDOWN_PARTS[part], label=part)
                bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_xticks(xs)
            ax.set_xticklabels(res.policies, fontsize=8, rotation=25 if crowded else 0,
                               ha="right" if crowded else "center")
            ax.set_ylabel(ylabel)
            ax.grid(axis="y", alpha=0.3)
            ax.set_title(_group_title(g), fontsize=9)
        row[1].set_ylim(0, 100)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(parts), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.3 / height))
    fig.suptitle(f"{res.experiment['name']}: latency breakdown per policy", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / height))
    fig.savefig(os.path.join(out_dir, "latency_breakdown.png"), dpi=DPI)
    plt.close(fig)
    return [("latency_breakdown.png", "Latency breakdown per policy",
             "Each request's e2e split into parts that sum to it (requests.csv's breakdown_<part>_s). Left: "
             "the mean request's seconds by part; right: what the p99 requests (the slowest 1%) spent their "
             "time on. Means over seeds. \"Where the time went\" above says what would have helped.")]


# In report order: the slot timeline, the picture that explains the rest, comes early.
FIGURES = [throughput, capacity, slot_timeline, slot_timeline_time, disaggregation, latency_vs_qps, latency_bars,
           latency_breakdown, cdfs, kv_over_time]


def make_all(folder):
    res = ResultsFolder(folder)
    out_dir = os.path.join(folder, "figures")
    os.makedirs(out_dir, exist_ok=True)
    index = []
    for figure in FIGURES:
        for name, title, caption in figure(res, out_dir):
            index.append({"file": name, "title": title, "caption": caption})
    with open(os.path.join(out_dir, "figures.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return index


def make_plan(folder):
    """A `batchsim plan` folder: each SLO figure against the GPUs a deployment takes (what a
    planner buys), one line per colocated GPU, TP and layout (every probe of its search), the
    prefill/decode splits as points, the SLO bound dashed, the answer ringed."""
    with open(os.path.join(folder, "plan.json")) as f:
        plan = json.load(f)
    out_dir = os.path.join(folder, "figures")
    os.makedirs(out_dir, exist_ok=True)
    slo = list(plan["slo"].items())
    # A plan with goodput thresholds and no SLO bounds has nothing to draw.
    if not slo or not any(r.get("probes") for r in plan["rows"]):
        with open(os.path.join(out_dir, "figures.json"), "w") as f:
            f.write("[]\n")
        return []
    fig, axes = plt.subplots(1, len(slo), figsize=(4.2 * len(slo) + 1, 3.8), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for k, (path, bound) in enumerate(slo):
        ax = axes[0][k]
        for i, row in enumerate(plan["rows"]):
            probes = sorted(row.get("probes", []), key=lambda p: p["gpus"])
            if not probes:
                continue
            split = row.get("deployment") == "disaggregated"
            xs = [p["gpus"] for p in probes]
            ys = [p["values"][k] for p in probes]
            layout = f" dp {row['dp']} ep {row['ep']}" if row.get("dp", 1) > 1 or row.get("ep", 1) > 1 else ""
            label = (f"P/D {row['gpu']} tp {row['tp']} / {row['decode_gpu']} tp {row['decode_tp']}" if split
                     else f"{row['gpu']} tp {row['tp']}{layout}")
            ax.plot(xs, ys, "s" if split else "-o", color=cmap(i % 10), label=label, markersize=4)
            if row["meets_slo"]:
                y = next(p["values"][k] for p in probes if p["gpus"] == row["total_gpus"])
                ax.plot([row["total_gpus"]], [y], "o", markersize=11, markerfacecolor="none",
                        markeredgecolor=cmap(i % 10))
        ax.axhline(bound, linestyle="--", color="grey", linewidth=1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("GPUs")
        ax.set_ylabel(f"{path} (s)")
        values = [v for row in plan["rows"] for p in row.get("probes", []) for v in [p["values"][k]] if v > 0]
        if values and max(values) > 10 * min(values):
            ax.set_yscale("log")
        ax.set_title(f"{path} <= {bound:g} s", fontsize=9)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{plan['base']['model']}: SLO figures vs GPUs", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "plan_slo.png"), dpi=DPI)
    plt.close(fig)
    index = [{"file": "plan_slo.png", "title": "SLO figures vs GPUs",
              "caption": "Every probe of every candidate against the GPUs it takes (lines: colocated replicas; "
                         "squares: prefill/decode splits); dashed: the SLO bound; ringed: the answer."}]
    with open(os.path.join(out_dir, "figures.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return index
