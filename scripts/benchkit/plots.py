"""The report's figures (matplotlib, Agg): time per token by method, speedup against acceptance, time per token
against the number of generated tokens."""

from .sides import PATCHED, STOCK

STYLE = {"greedy": ("#888888", "o"), STOCK: ("#d62728", "s"), PATCHED: ("#1f77b4", "^")}
OTHER_COLORS = ["#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
OTHER_MARKERS = ["D", "v", "P", "X", "h", "<", ">", "*"]


def style(name, names):
    """(color, marker) of a method: greedy, stock and patched keep theirs, the other sides take the next ones."""
    if name in STYLE:
        return STYLE[name]
    others = [n for n in names if n not in STYLE]
    index = others.index(name) if name in others else 0
    return OTHER_COLORS[index % len(OTHER_COLORS)], OTHER_MARKERS[index % len(OTHER_MARKERS)]


def figure_footer(meta, info, sides):
    m = meta["machine"]
    patched = info[PATCHED]
    peers = list(dict.fromkeys(info[side.name]["transformers"] for side in sides if side.kind == "peer"))
    versions = f"stock {info[STOCK]['transformers']}" if STOCK in info else ""
    if peers:
        versions += ", upstream " + (peers[0] if len(peers) == 1 else ", ".join(peers[:-1]) + " and " + peers[-1])
    how = (
        f"{patched['device_name']} {patched['dtype']}, 1 torch thread per worker, "
        f"{patched['clock']} time, medians over paired repetitions"
    )
    quick = " QUICK run." if meta["quick"] else ""
    return (
        f"{m['cpu']}, {m['cores']} cores; torch {patched['torch']}; transformers: {versions}, "
        f"patched {patched['transformers']} + {meta['patches']} patches.\n{how}; {meta['finished']}.{quick}"
    )


def plots(table, growth, meta, info, sides, docs_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [side.name for side in sides]
    labels = {side.name: side.label for side in sides}
    labels["greedy"] = "greedy"
    footer = figure_footer(meta, info, sides)
    clock = "CPU" if info[PATCHED]["clock"] == "cpu" else "wall-clock"
    files = []

    # 1. Time per token by method, every case.
    cases = list(table)
    methods = ["greedy"] + names
    figure, axis = plt.subplots(figsize=(10, 4.8), dpi=110)
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        xs, ys = [], []
        for j, case in enumerate(cases):
            row = table[case]
            value = row["greedy"] if method == "greedy" else row["side"].get(method, {}).get("per_token")
            if value is not None:
                xs.append(j + (i - (len(methods) - 1) / 2) * width)
                ys.append(value * 1e3)
        axis.bar(xs, ys, width, label=labels[method], color=style(method, names)[0])
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    axis.set_ylim(low, high * 5)  # room for the legend above the bars
    axis.set_xticks(range(len(cases)))
    axis.set_xticklabels([f"{case}\n({table[case]['tokens']} tok)" for case in cases], fontsize=8)
    axis.set_ylabel(f"{clock} time per generated token (ms, log)")
    axis.set_title("Time per generated token by method", fontsize=11)
    axis.grid(True, axis="y", alpha=0.3, which="both")
    axis.legend(fontsize=8, ncol=min(len(methods), 4))
    figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    files.append("benchmarks-time.png")
    figure.savefig(docs_dir / files[-1])
    plt.close(figure)

    # 2. Speedup over greedy against acceptance.
    figure, axis = plt.subplots(figsize=(8, 5), dpi=110)
    for side in names:
        xs, ys, cases_ = [], [], []
        for case, row in table.items():
            if side in row["side"]:
                xs.append(row["side"][side]["acceptance"] * 100)
                ys.append(row["speedup"][side][0])
                cases_.append(case)
        color, marker = style(side, names)
        axis.scatter(xs, ys, color=color, marker=marker, label=labels[side], alpha=0.85)
        if side == PATCHED:
            for x, y, name in zip(xs, ys, cases_, strict=True):
                axis.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    axis.axhline(1.0, color="#888888", linewidth=0.8, linestyle=":")
    axis.set_xlabel("acceptance (% of the draft's candidates kept)")
    axis.set_ylabel("speedup over greedy (greedy time per token / assisted)")
    axis.set_title("Speedup over greedy against acceptance", fontsize=11)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    files.append("benchmarks-speedup.png")
    figure.savefig(docs_dir / files[-1])
    plt.close(figure)

    # 3. Time per token against the number of generated tokens, trained pair.
    if growth:
        marks = meta["marks"]
        figure, axis = plt.subplots(figsize=(8, 4.8), dpi=110)
        for label in ["greedy"] + names:
            if label not in growth:
                continue
            xs = [mark for mark in marks if mark in growth[label]]
            color, marker = style(label, names)
            axis.plot(xs, [growth[label][mark] * 1e3 for mark in xs], marker=marker, color=color, label=labels[label])
        axis.set_xscale("log", base=2)
        axis.set_xticks(marks)
        axis.set_xticklabels([str(mark) for mark in marks])
        axis.set_xlabel("generated tokens")
        axis.set_ylabel(f"{clock} time per generated token (ms)")
        axis.set_ylim(bottom=0)
        axis.set_title("Trained pair: time per token against the number of generated tokens", fontsize=11)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
        figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
        figure.tight_layout(rect=(0, 0.08, 1, 1))
        files.append("benchmarks-growth.png")
        figure.savefig(docs_dir / files[-1])
        plt.close(figure)
    return files
