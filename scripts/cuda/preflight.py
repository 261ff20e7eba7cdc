"""Checks, before any long step, that the isolated environment imports what the run means to test.

Run with the isolated interpreter and PYTHONPATH=TREE/src (see `scripts/cuda/run.sh`). It fails (exit 1) unless
transformers is imported from TREE/src, is version 4.31.0 and is the fork (`--kind fork`: its generation and modeling
files differ from stock's) or stock v4.31.0 (`--kind stock`: they match `record_plain_outputs.STOCK_DIGEST`);
huggingface-hub is 0.16.4; tokenizers, accelerate and peft cannot be imported; `ninja` fails (isolate.py); the
device is usable (with `cuda`, `torch.cuda.is_available()`), and greedy and assisted generation of a tiny GPT-2 run
there. With `--kind fork` it also needs pytest and pytest-xdist, which run the suite. It prints one line per version
it found.

`--discover` also imports every PyTorch modeling module, as the suite's class discovery does. When that fails inside
a package of the system's site-packages (seen through `--links`, see `isolate.py`), the package is named on a line
`preflight(fork): CULPRIT <entry>` and the exit status is 3: `run.sh` then rebuilds the environment without it.
"""

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def version_of(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="the tree transformers must come from (TREE/src)")
    parser.add_argument("--kind", choices=["fork", "stock"], required=True)
    parser.add_argument("--device", default=os.environ.get("DEVICE", "cuda"), choices=["cpu", "cuda"])
    parser.add_argument("--json", type=Path, help="write the versions found here")
    parser.add_argument("--discover", action="store_true", help="import every modeling module (class discovery)")
    parser.add_argument("--links", type=Path, help="the folder of links to the system's packages (isolate.py)")
    args = parser.parse_args()
    failures = []
    info = {"kind": args.kind, "python": sys.version.split()[0], "executable": sys.executable}

    def check(condition, message):
        if not condition:
            failures.append(message)
        return condition

    import torch

    info["torch"] = torch.__version__
    info["torch_file"] = str(Path(torch.__file__).parent)
    info["torch_cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if args.device == "cuda" and check(torch.cuda.is_available(), "torch.cuda.is_available() is False"):
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    if failures:  # nothing below can run without the device
        return report(args, info, failures)

    import transformers

    where = Path(transformers.__file__).resolve()
    info["transformers"] = transformers.__version__
    info["transformers_file"] = str(where.parent)
    tree_src = (args.tree / "src" / "transformers").resolve()
    check(tree_src in where.parents, f"transformers was imported from {where.parent}, not from {tree_src}")
    check(transformers.__version__ == "4.31.0", f"transformers {transformers.__version__}, expected 4.31.0")

    import huggingface_hub

    info["huggingface_hub"] = huggingface_hub.__version__
    info["huggingface_hub_file"] = str(Path(huggingface_hub.__file__).parent)
    check(huggingface_hub.__version__ == "0.16.4", f"huggingface-hub {huggingface_hub.__version__}, expected 0.16.4")
    for hidden in ("tokenizers", "accelerate", "peft"):
        spec = importlib.util.find_spec(hidden)
        check(spec is None, f"{hidden} is importable ({spec and spec.origin}) but must be hidden")
    from transformers.utils.import_utils import is_ninja_available

    check(not is_ninja_available(), "ninja works on PATH: RWKV would JIT-compile its CUDA kernel (see isolate.py)")
    for name in ("numpy", "safetensors", "regex", "requests", "tqdm", "pyyaml", "filelock", "packaging", "pytest"):
        info[name] = version_of(name)
    info["pytest_xdist"] = version_of("pytest-xdist")

    sys.path.insert(0, str(REPO / "scripts"))
    from record_plain_outputs import STOCK_DIGEST, stock_tree_digest

    is_stock = stock_tree_digest(where.parent) == STOCK_DIGEST
    if args.kind == "stock":
        check(is_stock, f"{where.parent} is not stock v4.31.0 (record_plain_outputs.STOCK_DIGEST)")
    else:
        check(not is_stock, f"{where.parent} is stock v4.31.0, not the patched fork")
        check(info["pytest"] is not None, "pytest is not installed")
        check(importlib.util.find_spec("xdist") is not None, "pytest-xdist is not installed")

    culprit = None
    if args.discover:
        sys.path.insert(0, str(REPO / "tests"))
        start = time.perf_counter()
        try:
            from support.tiny_models import discover_generation_classes

            info["classes"] = len(discover_generation_classes())
            info["discover_s"] = round(time.perf_counter() - start, 2)
        except Exception as error:
            culprit = _culprit(error, args.links)
            failures.append(
                f"importing the modeling modules failed: {type(error).__name__}: {error}"
                + (f" (inside the system package {culprit!r})" if culprit else "")
            )
            traceback.print_exc()

    # A tiny GPT-2, greedy then assisted (itself as the assistant), on the device: CUDA kernels, generate, the series.
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    try:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=99, n_positions=64))
        model = model.to(args.device).eval()
        prompt = torch.randint(5, 99, (1, 7), generator=torch.Generator().manual_seed(0)).to(args.device)
        kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
        greedy = model.generate(prompt, **kwargs)
        assisted = model.generate(prompt, assistant_model=model, **kwargs)
        check(torch.equal(greedy, assisted), "tiny GPT-2: assisted generation differs from greedy generation")
        info["smoke_s"] = round(time.perf_counter() - start, 2)
    except Exception as error:  # reported as a failure with its type
        failures.append(f"tiny GPT-2 generation failed on {args.device}: {type(error).__name__}: {error}")

    return report(args, info, failures, culprit)


def report(args, info, failures, culprit=None):
    info["platform"] = platform.platform()
    info["failures"] = failures
    if args.json:
        args.json.write_text(json.dumps(info, indent=1) + "\n")
    label = f"preflight({args.kind})"
    print(
        f"{label}: python {info['python']}, torch {info['torch']} (CUDA {info['torch_cuda']}), "
        f"device {args.device}{' (' + info['gpu'] + ')' if 'gpu' in info else ''}, transformers "
        f"{info.get('transformers')} from {info.get('transformers_file')}, huggingface-hub "
        f"{info.get('huggingface_hub')}, numpy {info.get('numpy')}, safetensors {info.get('safetensors')}, pytest "
        f"{info.get('pytest')}, pytest-xdist {info.get('pytest_xdist')}"
    )
    for failure in failures:
        print(f"{label}: FAILED: {failure}")
    if culprit:
        print(f"{label}: CULPRIT {culprit}")
        return 3
    if not failures:
        print(f"{label}: OK" + (f" ({info['classes']} generation classes discovered)" if "classes" in info else ""))
    return 1 if failures else 0


def _culprit(error, links):
    """The entry of the links folder (a system package) in which the import failed: the outermost frame there."""
    if links is None:
        return None
    links = os.path.abspath(links) + os.sep
    for frame in traceback.extract_tb(error.__traceback__):
        filename = os.path.abspath(frame.filename)
        if filename.startswith(links):
            return filename[len(links) :].split(os.sep, 1)[0]
    return None


if __name__ == "__main__":
    sys.exit(main())
