"""The worker's clock: time inside the model forwards (forward hooks) and a timestamp per round of the decoding loop.

Times are taken on one clock: on CPU the CPU time of the computing thread (`time.thread_time`; torch runs one thread),
on CUDA the wall clock, the device synchronized at every forward and round boundary.
"""

import time

import torch


class Clock:
    """Accumulates the time spent inside model forwards and timestamps the rounds of the decoding loop."""

    def __init__(self, device, clock):
        self.device = device
        # With one torch thread every forward runs on this thread, and its CPU time is the time the work takes on a
        # core of its own: unlike wall clock, it does not count the time the scheduler gives to other processes.
        self.now = time.thread_time if clock == "cpu" else time.perf_counter
        self.depth = 0
        self.started = 0.0
        self.forward_time = 0.0
        self.forward_calls = 0
        self.calls_by_module = {}  # id(module) -> outermost forward calls
        self.rounds = []  # (wall time, sequence length, forward calls so far, forward time so far)

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def reset(self):
        self.depth = 0
        self.forward_time = 0.0
        self.forward_calls = 0
        self.calls_by_module = {}
        self.rounds = []

    def pre_hook(self, module, args):
        if self.depth == 0:
            self.sync()
            self.started = self.now()
        self.depth += 1

    def post_hook(self, module, args, output):
        self.depth -= 1
        if self.depth == 0:
            self.sync()
            self.forward_time += self.now() - self.started
            self.forward_calls += 1
            self.calls_by_module[id(module)] = self.calls_by_module.get(id(module), 0) + 1

    def attach(self, modules):
        seen = set()
        for module in modules:
            if module is None or id(module) in seen:
                continue
            seen.add(id(module))
            module.register_forward_pre_hook(self.pre_hook)
            module.register_forward_hook(self.post_hook)

    def round_end(self, length):
        self.sync()
        entry = (self.now(), length, self.forward_calls, self.forward_time)
        if self.rounds and self.rounds[-1][2] == self.forward_calls and self.rounds[-1][1] < length:
            # No forward since the last call: the same round, checked after each of its accepted tokens (the series
            # checks the stopping criteria after every accepted candidate, as greedy search does after every token).
            # The round ends at its last call.
            self.rounds[-1] = entry
        else:
            self.rounds.append(entry)
