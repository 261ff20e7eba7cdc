"""Counting what the decoding loop runs outside the model forwards: tensor operations, and among them the host-device
synchronizations (on a GPU, a stall of the pipeline). Counted, not timed, so free of the machine's noise.

The worker counts (`OpCounter`, through `torch.overrides.TorchFunctionMode`); the driver pairs each counted case with
its greedy reference (`operation_counts`). No import of torch at module level (the driver imports this module), and
no relative import: tests/integration/test_loop_cost.py loads this file by its path for `is_sync`.
"""

# Calls that make the host wait for the device (on a GPU, a stall of the pipeline): reading a value, a length or a
# bool out of a tensor, and indexing with a boolean mask (its result's size depends on the values).
SYNC_FUNCTIONS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "cpu"})


def is_sync(name, args):
    """Whether the torch call `name` with `args` waits for the device."""
    if name in SYNC_FUNCTIONS:
        return True
    if name == "__getitem__" and len(args) > 1:
        import torch

        indices = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(torch.is_tensor(index) and index.dtype == torch.bool for index in indices)
    return False


class OpCounter:
    """Counts the torch operations called outside the model forwards (the `Clock`'s depth is 0 there), by name, and
    among them the host-device synchronizations (`is_sync`).

    Through `torch.overrides.TorchFunctionMode`, which sees every torch function and tensor method called from
    Python. Attribute reads (`.shape`, `.device`: `__get__`) are not operations and are left out.
    """

    def __init__(self, clock):
        from torch.overrides import TorchFunctionMode

        counts = self.counts = {}
        syncs = self.syncs = {}
        self.marks = {}  # round number -> (operations, syncs) counted when it ended

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if clock.depth == 0:
                    name = getattr(func, "__name__", str(func))
                    if name != "__get__":
                        counts[name] = counts.get(name, 0) + 1
                        if is_sync(name, args):
                            syncs[name] = syncs.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def mark(self, round_number):
        """Notes the counts at the end of round `round_number` (the last note of a round stands)."""
        self.marks[round_number] = (sum(self.counts.values()), sum(self.syncs.values()))

    def loop_per_round(self):
        """(operations, syncs) per round between the end of the first noted round and the end of the last: what the
        loop runs in a round, the call's set-up and its first round left out; None with fewer than two rounds."""
        if len(self.marks) < 2:
            return None
        first, last = min(self.marks), max(self.marks)
        (ops_first, syncs_first), (ops_last, syncs_last) = self.marks[first], self.marks[last]
        return (ops_last - ops_first) / (last - first), (syncs_last - syncs_first) / (last - first)


def per_round(run):
    """(operations, syncs) outside the forwards per round of a counted run (per step of greedy search), or None for a
    run that was not counted or failed: those of the loop, between the end of its first round and the end of its last
    (`OpCounter.loop_per_round`), or in runs saved before these were noted the call's over its rounds (syncs nan in
    runs saved before they were counted)."""
    if not run or "failed" in run or run.get("ops_outside") is None or not run.get("rounds"):
        return None
    if run.get("ops_loop_per_round") is not None:
        return run["ops_loop_per_round"], run["syncs_loop_per_round"]
    syncs = run.get("syncs_outside")
    return run["ops_outside"] / run["rounds"], (syncs / run["rounds"] if syncs is not None else float("nan"))


def operation_counts(results, cases):
    """{case: {side or "greedy": counted run}} of the calls whose operations outside the forwards were counted.

    `cases`: {case name: (pair, tokens) of its greedy reference}, in the order of the table."""
    counted = {}
    for result in results:
        if result["phase"] != "ops":
            continue
        if result["case"].startswith("greedy:"):
            workload, tokens = result["case"].split(":")[1:]
            for case, key in cases.items():
                if key == (workload, int(tokens)):
                    counted.setdefault(case, {})["greedy"] = result
        else:
            counted.setdefault(result["case"], {})[result["side"]] = result
    return {case: counted[case] for case in cases if case in counted}
