"""Train the benchmark's target and draft models: byte-level GPT-2 models on Python standard library source files.

Random weights make a draft that rarely agrees with its target; a real deployment distills the draft from the
target. This trains a pair like that on text every machine has, without a download:
  corpus   a pinned list of Python 3.11 standard library modules, checked against pinned sha256 hashes (the files
           differ between Python versions: the training refuses to run on other files rather than train on them)
  target   a 6-layer, 96-wide GPT-2 on raw bytes (256-token vocabulary, no tokenizer needed)
  draft    a 1-layer, 64-wide GPT-2, trained on the target's own greedy continuations of corpus prompts (hard-label
           distillation: it learns to predict what the target would say, which is what assisted decoding checks)
Everything is seeded and runs on two CPU threads; both models are saved with `save_pretrained` under
build/bench/trained/<key>/ (the key hashes the corpus, the settings and TRAINING_VERSION), and later runs load them
with `from_pretrained`. The held-out tail of the corpus (never trained on) gives the benchmark's prompts.

  python scripts/bench_train.py            # train unless cached, print the directory (this module's main)
  python scripts/bench_train.py --sampling # also the sampling draft (below), print its directory

A second draft of the same shape serves the sampling cases: distilled on the target's next-byte distributions (KL to
its softmax at temperature 1 on windows of the training text), cached under build/bench/trained/<sampling key>/ (the
key hashes the target's key, SAMPLING_SETTINGS and SAMPLING_VERSION). The first draft, distilled on greedy outputs,
predicts the target's greedy token with near certainty, so its sampling distribution is peaked where the target's is
not: speculative sampling keeps few of its candidates.
"""

import argparse
import hashlib
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAINED_DIR = REPO / "build" / "bench" / "trained"

# Python 3.11.7's files. Another Python may ship other bytes: the training then stops and names the files.
CORPUS = {
    "argparse.py": "dc1eba8adfdf615986421f981337458ba1072d3e718a0f76e3224940fd74118b",
    "calendar.py": "b3b140864fd122a575ffcc9342b824fbe4f8a38fdf3f4fcd964f26e52725358f",
    "colorsys.py": "d9800f8e81d46e63ca6f2e7d6ac5f344d85afb92c3cf6d103b5f977f1ad66ac2",
    "configparser.py": "4a70cecccb55031a413b79e6ced2e63ca031f770cd25a4882980ecdeab67f6ff",
    "dataclasses.py": "4b7e1c99ebea53b546317d218a0261895a1769f83a6b95dc0136f13578066a7f",
    "difflib.py": "0c6afc23568d55b3e9ac914f9c5361e3033e778aa5b58d3cc82835fc5c638679",
    "fnmatch.py": "6683da36e47af523f3f41e18ad244d837783e19e98911cc0b7415dea81494ebc",
    "fractions.py": "b11e850e354808b882d13a70a911c29accd1dbdd41757566704e3b7206c74edb",
    "functools.py": "6d80018a3fa9fed44c5b78f881987ee3ab3fb1238b077b4e6dcb4b76da7db73b",
    "glob.py": "fa579f8a50a66313d34d339f10be0821c9b4fed6207e8ba8e29ed1c5e119f740",
    "heapq.py": "6d43277e5c76fc0f073cd388fcff852d14d068f6bb6d4886c340f8b75a1229a9",
    "pprint.py": "0b67dbc8af449d8ced3acd9df902e98c2dbc56c8f2a7a181c51cc72768db621f",
    "queue.py": "f6c37fc37cd7440979f7d22d40ee818fa3b714c573610c08fa52911d541193f0",
    "random.py": "b931a2d452db89ab9e1f79d59b66ce194dbd6748049cfe44699726da52b9c956",
    "sched.py": "edfb309483d7cb05e06ad86d1fdeb819629f71402dc6710a1bec36c7afcaac50",
    "shlex.py": "42ab6060f316e121e374e6621d8c1c98b8db323903c3df289a810c45a8ae46a7",
    "statistics.py": "889a066f1b8063e73387ceb84018efc507a89b365b56c6afb9cc15b2ed25c2d9",
    "string.py": "24aeae1f0526250f442022022bf98df9a823b1cb330543ee79e70e44907462e9",
    "textwrap.py": "62867e40cdea6669b361f72af4d7daf0359f207c92cbeddfc7c7506397c1f31c",
}
# Bump when the training code changes what it produces (SETTINGS and CORPUS are part of the key already).
TRAINING_VERSION = "1"
HELD_OUT = 0.05  # the last 5% of the corpus: prompts only
N_POSITIONS = 1024
SETTINGS = {
    # Deep and narrow: at batch 1 a forward costs mostly per layer, while training costs per parameter.
    "target": {"n_layer": 6, "n_embd": 96, "n_head": 3},
    "draft": {"n_layer": 1, "n_embd": 64, "n_head": 2},
    "threads": 2,
    "target_steps": 200,
    "target_batch": 16,
    "target_context": 64,
    "target_lr": 4e-3,
    # Distillation data: the target's greedy continuations of corpus prompts.
    "distill_prompts": 192,
    "distill_prompt_length": 48,
    "distill_new_tokens": 80,
    "draft_steps": 150,
    "draft_batch": 16,
    "draft_lr": 3e-3,
    "seed": 0,
}


def corpus_bytes(stdlib=None):
    """The pinned corpus, or SystemExit naming every file that is missing or differs."""
    stdlib = Path(stdlib or sysconfig.get_paths()["stdlib"])
    parts, problems = [], []
    for name, expected in CORPUS.items():
        path = stdlib / name
        try:
            data = path.read_bytes()
        except OSError as error:
            problems.append(f"  {path}: {error.strerror}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            problems.append(f"  {path}: sha256 {digest[:16]}..., pinned {expected[:16]}...")
        parts.append(data)
    if problems:
        raise SystemExit(
            "bench: the training corpus is not the pinned one (these standard library files differ from Python "
            f"3.11.7's; this is Python {sys.version.split()[0]}):\n" + "\n".join(problems) + "\n"
            "Run the benchmark with Python 3.11.7, or pin the files and hashes of this Python in "
            "scripts/bench_train.py (the trained models, and so the figures, change with them)."
        )
    return b"\n".join(parts)


def key():
    digest = hashlib.sha256()
    digest.update(json.dumps(CORPUS, sort_keys=True).encode())
    digest.update(json.dumps(SETTINGS, sort_keys=True).encode())
    digest.update(TRAINING_VERSION.encode())
    return digest.hexdigest()[:12]


def model_dir():
    return TRAINED_DIR / key()


def split(data):
    cut = int(len(data) * (1 - HELD_OUT))
    return data[:cut], data[cut:]


def prompts(count, length, seed=1):
    """`count` prompts of `length` bytes from the held-out tail, each starting at a line of code (deterministic)."""
    _, held_out = split(corpus_bytes())
    starts = [i + 1 for i, byte in enumerate(held_out[: -length - 1]) if byte == ord("\n")]
    # Prompts that start inside code rather than on a blank line or a comment.
    starts = [start for start in starts if held_out[start : start + length].lstrip()[:1] not in (b"", b"#")]
    chosen = random.Random(seed).sample(starts, count)
    return [list(held_out[start : start + length]) for start in chosen]


def gpt2(shape):
    from transformers import GPT2Config, GPT2LMHeadModel

    # Byte-level: 256 tokens, no special tokens (generation runs without EOS, with an explicit pad id).
    config = GPT2Config(vocab_size=256, n_positions=N_POSITIONS, bos_token_id=None, eos_token_id=None, **shape)
    return GPT2LMHeadModel(config)


def train(model, batches, steps, lr, label, objective=None):
    """Trains `model` for `steps` steps of AdamW (warm-up, cosine decay) on `batches(step)`: (input_ids, labels) for
    the language-modelling loss, or anything `objective(model, batch)` turns into a loss."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(steps // 10, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(step / steps, 1.0)))),
    )
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        if objective is None:
            input_ids, labels = batches(step)
            loss = model(input_ids=input_ids, labels=labels).loss
        else:
            loss = objective(model, batches(step))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 20 == 0 or step == steps - 1:
            print(f"  {label} step {step + 1}/{steps}: loss {loss.item():.3f} ({time.perf_counter() - start:.0f} s)")
    model.eval()
    return loss.item()


def build(directory):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    s = SETTINGS
    torch.set_num_threads(s["threads"])
    torch.manual_seed(s["seed"])
    train_text, _ = split(corpus_bytes())
    data = torch.tensor(list(train_text), dtype=torch.long)
    generator = torch.Generator().manual_seed(s["seed"])
    started = time.perf_counter()

    def corpus_batches(step):
        starts = torch.randint(0, len(data) - s["target_context"] - 1, (s["target_batch"],), generator=generator)
        batch = torch.stack([data[i : i + s["target_context"]] for i in starts.tolist()])
        return batch, batch

    print(f"bench: training the target ({s['target']}) on {len(train_text)} bytes of standard library source")
    target = gpt2(s["target"])
    target_loss = train(target, corpus_batches, s["target_steps"], s["target_lr"], "target")

    # Distillation data: the target's greedy continuations of training-text prompts, generated in one batch.
    length = s["distill_prompt_length"]
    starts = torch.randint(0, len(data) - length, (s["distill_prompts"],), generator=generator)
    prompt_ids = torch.stack([data[i : i + length] for i in starts.tolist()])
    with torch.no_grad():
        sequences = target.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=s["distill_new_tokens"],
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
            eos_token_id=None,
        )
    # The draft learns the continuations only (the prompts are the corpus, not the target's words).
    labels = sequences.clone()
    labels[:, :length] = -100

    def distill_batches(step):
        rows = torch.randint(0, len(sequences), (s["draft_batch"],), generator=generator)
        return sequences[rows], labels[rows]

    print(f"bench: training the draft ({s['draft']}) on {len(sequences)} greedy continuations of the target")
    torch.manual_seed(s["seed"] + 1)
    draft = gpt2(s["draft"])
    draft_loss = train(draft, distill_batches, s["draft_steps"], s["draft_lr"], "draft")

    directory.mkdir(parents=True, exist_ok=True)
    target.save_pretrained(directory / "target", safe_serialization=True)
    draft.save_pretrained(directory / "draft", safe_serialization=True)
    meta = {
        "settings": SETTINGS,
        "corpus": sorted(CORPUS),
        "corpus_bytes": len(train_text),
        "target_loss": target_loss,
        "draft_loss": draft_loss,
        "training_seconds": time.perf_counter() - started,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "parameters": {
            "target": sum(p.numel() for p in target.parameters()),
            "draft": sum(p.numel() for p in draft.parameters()),
        },
    }
    (directory / "training.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"bench: trained in {meta['training_seconds']:.0f} s; saved to {directory}")
    return directory


# The sampling draft: the same tiny shape as the draft above, distilled on the target's distributions rather than its
# greedy outputs (the greedy draft's distribution is peaked on the target's greedy token, so speculative sampling keeps
# few of its candidates). Loss: KL(target || draft) of the next-byte distributions at temperature 1, on windows of the
# training text. One thread: on a shared two-core machine, two threads contend for the cores (several times slower).
SAMPLING_SETTINGS = {
    "draft": SETTINGS["draft"],
    "threads": 1,
    "steps": 400,
    "batch": 16,
    "context": 64,
    "lr": 3e-3,
    "temperature": 1.0,
    "seed": 7,
}
SAMPLING_VERSION = "1"


def sampling_key():
    """The sampling draft's cache key: the target's key, its settings and SAMPLING_VERSION."""
    digest = hashlib.sha256()
    digest.update(key().encode())
    digest.update(json.dumps(SAMPLING_SETTINGS, sort_keys=True).encode())
    digest.update(SAMPLING_VERSION.encode())
    return digest.hexdigest()[:12]


def sampling_dir():
    return TRAINED_DIR / sampling_key()


def distribution_loss(target, temperature):
    """objective(draft, input_ids): the mean over positions of KL(target || draft), both softmaxes at `temperature`."""
    import torch

    def objective(draft, input_ids):
        with torch.no_grad():
            expected = (target(input_ids=input_ids).logits / temperature).log_softmax(-1)
        predicted = (draft(input_ids=input_ids).logits / temperature).log_softmax(-1)
        return (expected.exp() * (expected - predicted)).sum(-1).mean()

    return objective


def build_sampling(directory, target_dir):
    """Distils the sampling draft from the target saved in `target_dir`; saves it under `directory`/draft."""
    import torch
    import transformers
    from transformers import GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    s = SAMPLING_SETTINGS
    torch.set_num_threads(s["threads"])
    train_text, _ = split(corpus_bytes())
    data = torch.tensor(list(train_text), dtype=torch.long)
    generator = torch.Generator().manual_seed(s["seed"])
    started = time.perf_counter()
    target = GPT2LMHeadModel.from_pretrained(target_dir).eval()

    def windows(step):
        starts = torch.randint(0, len(data) - s["context"] - 1, (s["batch"],), generator=generator)
        return torch.stack([data[i : i + s["context"]] for i in starts.tolist()])

    print(f"bench: distilling the sampling draft ({s['draft']}) on the target's distributions")
    torch.manual_seed(s["seed"])
    draft = gpt2(s["draft"])
    loss = train(draft, windows, s["steps"], s["lr"], "sampling draft", distribution_loss(target, s["temperature"]))
    directory.mkdir(parents=True, exist_ok=True)
    draft.save_pretrained(directory / "draft", safe_serialization=True)
    meta = {
        "settings": SAMPLING_SETTINGS,
        "target_key": key(),
        "kl": loss,
        "training_seconds": time.perf_counter() - started,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "parameters": {"draft": sum(p.numel() for p in draft.parameters())},
    }
    (directory / "training.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"bench: distilled in {meta['training_seconds']:.0f} s; saved to {directory}")
    return directory


def ensure_sampling():
    """The directory holding the sampling draft (draft/), distilled now unless cached; trains the target first."""
    target_dir = ensure() / "target"
    directory = sampling_dir()
    if (directory / "training.json").exists():
        return directory
    return build_sampling(directory, target_dir)


def ensure():
    """The directory holding target/ and draft/, trained now unless a run with the same key cached them."""
    directory = model_dir()
    if (directory / "training.json").exists():
        corpus_bytes()  # still refuse a corpus that differs: the prompts come from it
        return directory
    return build(directory)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sampling",
        action="store_true",
        help="also the sampling draft, distilled on the target's distributions (the sampling cases' draft)",
    )
    args = parser.parse_args()
    print(ensure())
    if args.sampling:
        print(ensure_sampling())


if __name__ == "__main__":
    main()
