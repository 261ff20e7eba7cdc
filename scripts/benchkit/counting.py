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
