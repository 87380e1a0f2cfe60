"""The picture of a `rafka verify` run, drawn as Jepsen draws its runs: acked sends
per second and send latency over time, with each fault's window shaded and
labelled by kind, so a dip or a spike can be read against the fault that caused
it; with transactions in the history, a third panel: transactions ended per
second, committed, aborted (on purpose or a failed commit) and indeterminate.
Headless (matplotlib's Agg backend). Caller: rafka.verify.run.
"""

from __future__ import annotations

import math
from collections import defaultdict

from rafka.core.history import ABORTED, COMMITTED, INDETERMINATE, OK, Fault, Send, Txn


def draw(events, path: str, *, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sends = [e for e in events if isinstance(e, Send)]
    faults = [e for e in events if isinstance(e, Fault)]
    txns = [e for e in events if isinstance(e, Txn)]
    end_s = max([e.end_ms for e in sends] + [f.end_ms for f in faults] + [t.end_ms for t in txns] + [1]) / 1000
    seconds = list(range(int(math.ceil(end_s)) + 1))
    acked_per_s = defaultdict(int)
    failed_per_s = defaultdict(int)
    latencies_ms = defaultdict(list)
    for send in sends:
        second = int(send.end_ms // 1000)
        if send.outcome == OK:
            acked_per_s[second] += 1
            latencies_ms[second].append(send.end_ms - send.start_ms)
        else:
            failed_per_s[second] += 1

    if txns:
        figure, (throughput, latency, transactions) = plt.subplots(3, 1, figsize=(12, 9), sharex=True)
    else:
        figure, (throughput, latency) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True)
        transactions = None
    throughput.plot(seconds, [acked_per_s[s] for s in seconds], color="#1f6f43", label="acked sends/s")
    throughput.plot(seconds, [failed_per_s[s] for s in seconds], color="#b03030",
                    label="failed or indeterminate sends/s")
    throughput.set_ylabel("sends / s")
    throughput.legend(loc="upper right", fontsize=8)
    for quantile, colour in ((0.5, "#2b5c8a"), (0.99, "#d08020")):
        points = [(s, _quantile(latencies_ms[s], quantile)) for s in seconds if latencies_ms[s]]
        latency.plot([s for s, _ in points], [v for _, v in points], color=colour,
                     label=f"send latency p{int(quantile * 100)}")
    latency.set_yscale("log")
    latency.set_ylabel("ms (log)")
    latency.legend(loc="upper right", fontsize=8)
    axes = [throughput, latency]
    if transactions is not None:
        ended_per_s = {fate: defaultdict(int) for fate in (COMMITTED, ABORTED, INDETERMINATE)}
        for txn in txns:
            ended_per_s[txn.fate][int(txn.end_ms // 1000)] += 1
        for fate, colour in ((COMMITTED, "#1f6f43"), (ABORTED, "#7a5195"), (INDETERMINATE, "#b03030")):
            transactions.plot(seconds, [ended_per_s[fate][s] for s in seconds], color=colour,
                              label=f"transactions {fate}/s")
        transactions.set_ylabel("transactions / s")
        transactions.legend(loc="upper right", fontsize=8)
        axes.append(transactions)
    axes[-1].set_xlabel("seconds since the run started")
    palette = {}
    # one colour per fault kind (FAULT_KINDS has 15): a repeated colour would make two kinds one
    colours = ["#e6c229", "#8fbf5a", "#7fa7d9", "#d97f7f", "#b38fd9", "#7fd9c9", "#d9a87f", "#c0c0c0",
               "#f2a2d0", "#a0a0ff", "#8c6d31", "#4d4d4d", "#ff7f0e", "#17becf", "#bcbd22", "#9e1f63"]
    for fault in faults:
        colour = palette.setdefault(fault.kind, colours[len(palette) % len(colours)])
        for axis in axes:
            axis.axvspan(fault.start_ms / 1000, max(fault.end_ms, fault.start_ms + 200) / 1000,
                         color=colour, alpha=0.35, linewidth=0)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.35) for c in palette.values()]
    if handles:
        figure.legend(handles, list(palette), loc="lower center", ncol=min(5, len(handles)), fontsize=8,
                      title="faults", title_fontsize=8)
    throughput.set_title(title, fontsize=10)
    figure.tight_layout(rect=(0, 0.1 if handles else 0, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _quantile(values: list[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]
