"""Records what stock transformers 4.31.0 does with the suite's tiny models, as test data.

Run it with the stock tree (`make record-plain`, i.e. `.venv-stock/bin/python scripts/record_plain_outputs.py`):
for every discovered class it stores the greedy, beam and contrastive outputs of plain generation, what
`prepare_inputs_for_generation` returns at a captured greedy step (one new token, none, several), and the source of
that method. `tests/models/test_plain_unchanged.py` and `tests/models/test_slicing.py` compare the patched fork
with it. The file is per device (`tests/models/data/stock-<device>.json`) and carries a fingerprint of the code that
builds the models and inputs, so that stale data is reported instead of compared.

`--shard K/N` records every N-th class only, so that N processes can record at once (`scripts/cuda/run.sh` does this
on a GPU machine); `--merge` joins their parts into the same file one process would have written.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import torch  # noqa: E402
import transformers  # noqa: E402
from models import harness  # noqa: E402

from support.device import DEVICE  # noqa: E402


def record_class(name):
    plain, slicing = {}, {}
    for inputs in harness.plain_input_sets(name):
        for mode in harness.PLAIN_MODES:
            plain[f"{inputs}/{mode}"] = harness.run_plain(name, inputs, mode)
    try:
        captured = harness.capture_step(name)
    except Exception as error:
        slicing = {"error": harness.error_name(error)}
    else:
        for case in harness.SLICING_CASES:
            try:
                ids, output = harness.slicing_call(name, case, captured)
                slicing[case] = {"input_ids": ids.cpu().tolist(), "output": harness.describe_output(output)}
            except Exception as error:
                slicing[case] = {"error": harness.error_name(error)}
    return plain, slicing


# sha256 over generation/utils.py and every PyTorch modeling file that defines prepare_inputs_for_generation, as
# released in transformers 4.31.0 (see stock_tree_digest): recording from any other tree would make the suite compare
# the fork with itself.
STOCK_DIGEST = "9dc0426482e1a2d3e6027860a52d5cd70dfd5763f3275dfbbc95d0d97282b845"


def stock_tree_digest(package_dir):
    files = [package_dir / "generation" / "utils.py"] + sorted(
        path
        for path in package_dir.glob("models/*/modeling_*.py")
        if not path.name.startswith(("modeling_tf_", "modeling_flax_"))
        and "def prepare_inputs_for_generation" in path.read_text()
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(package_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def parse_shard(text):
    """`K/N` -> (K, N): record the classes whose index in the sorted class list is K modulo N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return index, count


def merge_parts(parts):
    """The recording of the whole class list from the parts that `--shard K/N` wrote, for K = 0 .. N-1: the same
    data as one unsharded run. Raises ValueError when parts are missing, repeated or come from different runs."""
    if not parts:
        raise ValueError("no parts to merge")
    shards = [part["meta"].get("shard") for part in parts]
    if None in shards:
        raise ValueError("only parts written with --shard can be merged")
    count = shards[0][1]
    found = sorted(index for index, _ in shards)
    if any(shard[1] != count for shard in shards) or found != list(range(count)):
        raise ValueError(f"the parts are not shards 0..{count - 1} of one run: {sorted(map(tuple, shards))}")
    meta = {key: value for key, value in parts[0]["meta"].items() if key != "shard"}
    for part in parts[1:]:
        if {key: value for key, value in part["meta"].items() if key != "shard"} != meta:
            raise ValueError("the parts were recorded with different trees, devices or inputs")
    data = {"meta": meta, "plain": {}, "slicing": {}, "sources": {}, "skipped": {}}
    for part in parts:
        for section in ("plain", "slicing", "sources", "skipped"):
            overlap = set(data[section]) & set(part[section])
            if overlap:
                raise ValueError(f"classes recorded twice: {sorted(overlap)}")
            data[section].update(part[section])
    return data


def write_data(data, output):
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="default: tests/models/data/stock-<device>.json")
    parser.add_argument("--allow-patched", action="store_true", help="record even if the tree is not stock 4.31.0")
    parser.add_argument(
        "--shard",
        type=parse_shard,
        metavar="K/N",
        help="record only the classes whose index is K modulo N, as a part for --merge (parallel recording)",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="PART",
        help="record nothing: merge the parts of --shard into --output",
    )
    args = parser.parse_args()

    if args.merge:
        try:
            data = merge_parts([json.loads(path.read_text()) for path in args.merge])
        except ValueError as error:
            sys.exit(f"cannot merge {len(args.merge)} parts: {error}")
        output = args.output or harness.data_file(data["meta"]["device"])
        write_data(data, output)
        print(f"wrote {output}: {len(data['plain'])} classes from {len(args.merge)} parts", file=sys.stderr)
        return 0

    if transformers.__version__ != "4.31.0":
        sys.exit(f"stock transformers 4.31.0 expected, got {transformers.__version__}")
    source = Path(transformers.__file__).resolve()
    if stock_tree_digest(source.parent) != STOCK_DIGEST and not args.allow_patched:
        sys.exit(f"{source.parent} is not stock transformers 4.31.0 (its generation and modeling files differ)")

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    start = time.time()
    data = {
        "meta": {
            "transformers": transformers.__version__,
            "transformers_path": str(source.parent),
            "torch": torch.__version__,
            "device": DEVICE,
            "fingerprint": harness.factory_fingerprint(),
            "plain_new_tokens": harness.PLAIN_NEW_TOKENS,
        },
        "plain": {},
        "slicing": {},
        "sources": {},
        "skipped": {},
    }
    names = sorted(harness.classes())
    if args.shard:
        index, count = args.shard
        data["meta"]["shard"] = [index, count]
        names = names[index::count]
    for name in names:
        missing = harness.missing_requirement(name)
        if missing:
            data["skipped"][name] = f"requires {missing}"
            continue
        data["plain"][name], data["slicing"][name] = record_class(name)
        data["sources"][name] = harness.pifg_source(name)
        print(f"recorded {name}", file=sys.stderr, flush=True)
    output = args.output or harness.data_file(DEVICE)
    write_data(data, output)
    print(
        f"wrote {output.relative_to(REPO) if output.is_relative_to(REPO) else output}: {len(data['plain'])} classes "
        f"in {time.time() - start:.0f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
