"""The sides a run compares: an environment (stock 4.31.0, the patched fork, an upstream release) and its settings.

A side is (environment, settings): each runs in a worker process of its own, started with its environment's
interpreter and its settings (`benchkit.settings`: the attention implementation, the draft length). Sides share an
environment when they differ only in settings (upstream 5.23.0 with its defaults and with eager attention; the patched
fork with constant draft lengths). The roles stay with the names: "stock" and "patched" also run greedy search (their
ratio is the noise floor), "patched" is the fork the ratios are about, and the sides of kind "peer" are the upstream
releases its best is compared with.

Adding a side: a peer's sides are in `benchkit.peers.PEERS`; sides of the patched fork with other draft lengths come
from `run_sides(..., patched_draft=..., constant=...)` (the command line's --patched-draft and --constant-draft).
"""

from dataclasses import dataclass

from .peers import PEERS
from .settings import DraftLength, Settings

STOCK = "stock"
PATCHED = "patched"
GREEDY_SIDES = (STOCK, PATCHED)  # the sides that also run greedy search
CONSTANT_PREFIX = "patched-k"


@dataclass(frozen=True)
class Side:
    name: str  # the key of its measurements
    environment: str  # "stock", "patched", or a peer's version
    settings: Settings
    label: str  # in the report's tables
    short: str  # in the compact tables and the printed summary

    @property
    def kind(self):
        return self.environment if self.environment in (STOCK, PATCHED) else "peer"

    @property
    def is_constant(self):
        """A side of the patched fork with a constant draft length (`constant_side`), for the best one in hindsight:
        it runs the cases whose drafts pay only, and stays out of the tables that compare the releases."""
        return self.environment == PATCHED and self.name.startswith(CONSTANT_PREFIX)

    def to_json(self):
        return {
            "name": self.name,
            "environment": self.environment,
            "settings": self.settings.to_json(),
            "label": self.label,
            "short": self.short,
        }

    @classmethod
    def from_json(cls, values):
        return cls(
            values["name"],
            values["environment"],
            Settings.from_json(values["settings"]),
            values["label"],
            values["short"],
        )


def stock_side():
    return Side(STOCK, STOCK, Settings(), "stock 4.31.0", "stock")


def patched_side(draft=None):
    """The patched fork, with its own defaults unless `draft` says otherwise (`--patched-draft`): the draft length of
    the assistant's generation config as the fork ships it (`num_assistant_tokens_schedule` "adaptive")."""
    settings = Settings(draft=draft or DraftLength.defaults())
    label = "patched" if settings.draft.is_defaults() else f"patched ({settings.draft.label()})"
    return Side(PATCHED, PATCHED, settings, label, "patched")


def constant_side(length):
    """The patched fork drafting exactly `length` candidates every round (for the best constant length in hindsight;
    the fork refuses it until its generation_config has `num_assistant_tokens`)."""
    return Side(
        f"{CONSTANT_PREFIX}{length}",
        PATCHED,
        Settings(draft=DraftLength.constant(length)),
        f"patched k={length}",
        f"k{length}",
    )


def peer_sides(version):
    """The sides of an upstream release, as `benchkit.peers.PEERS` lists them."""
    if version not in PEERS:
        raise SystemExit(f"bench: no pinned environment for transformers {version} (known: {', '.join(PEERS)})")
    sides = []
    major_minor = version.rsplit(".", 1)[0]
    for suffix, settings, meaning in PEERS[version].sides:
        name = f"{version}-{suffix}" if suffix else version
        label = f"upstream {version}" + (f" {meaning}" if meaning else "")
        short = major_minor + (f" {suffix}" if suffix else "")
        sides.append(Side(name, version, settings, label, short))
    return sides


def run_sides(peers, patched_draft=None, constant=(), stock=True):
    """The sides of a run, in the order of the tables: stock, the peers' sides, patched, the constant draft lengths."""
    sides = [stock_side()] if stock else []
    for version in peers:
        sides += peer_sides(version)
    sides.append(patched_side(patched_draft))
    sides += [constant_side(length) for length in constant]
    return sides


def case_sides(case, sides, constant_cases=None):
    """The names of the sides that run `case` (a `benchkit.workloads.Case`), in the order of `sides`: every side but
    the constant draft lengths, which run the cases in `constant_cases` (default: those whose drafts pay), and but
    the upstream sides the case leaves out (`case.peers`)."""
    if constant_cases is None:
        constant = case.best_constant
    else:
        constant = case.name in constant_cases
    return [
        side.name
        for side in sides
        if (constant or not side.is_constant)
        and (side.kind != "peer" or case.peers is None or side.name in case.peers)
    ]


def reference_sides(case, sides):
    """The names of the sides that run the reference of `case`: greedy search on stock and patched (their ratio is
    the noise floor), plain sampling on patched alone for a sampling case."""
    names = [side.name for side in sides]
    wanted = (PATCHED,) if case.sampling else GREEDY_SIDES
    return [name for name in names if name in wanted]


def known(name):
    """The side a name stands for in a run's results (what runs saved before the side specs were stored)."""
    if name == STOCK:
        return stock_side()
    if name == PATCHED:
        # Runs saved before the side specs were stored ran the fork with the 4.31 heuristic from 5.
        return patched_side(DraftLength.heuristic())
    if name.startswith(CONSTANT_PREFIX) and name[len(CONSTANT_PREFIX) :].isdigit():
        return constant_side(int(name[len(CONSTANT_PREFIX) :]))
    for version in PEERS:
        for side in peer_sides(version):
            if side.name == name:
                return side
    major_minor = name.rsplit(".", 1)[0]
    return Side(name, name, Settings(), f"upstream {name}", major_minor)


def from_meta(meta):
    """The sides of a saved run, in its order."""
    specs = meta.get("side_specs") or {}
    return [Side.from_json(specs[name]) if name in specs else known(name) for name in meta["sides"]]


def parse_lengths(text):
    """'1-10' or '1,2,4' -> [1, ..., 10] or [1, 2, 4]."""
    lengths = []
    for part in filter(None, (part.strip() for part in (text or "").split(","))):
        low, _, high = part.partition("-")
        try:
            values = range(int(low), int(high or low) + 1)
        except ValueError:
            raise SystemExit(f"bench: constant draft lengths are numbers or ranges (1-10), not {part!r}") from None
        lengths += [value for value in values if value not in lengths]
    if any(length < 1 for length in lengths):
        raise SystemExit("bench: a constant draft length is at least 1")
    return lengths
