#!/usr/bin/env python3
"""The assisted-only code of `src/transformers/generation/utils.py`: what only assisted decoding runs.

usage: python scripts/assisted_code.py [FILE ...]     (default: build/transformers' generation/utils.py)
       python scripts/assisted_code.py --rev REV ...  (the file at git revisions of build/transformers)

`assisted_decoding` and the module functions and `GenerationMixin` methods it reaches that plain generation does not
reach (greedy search, sampling, beam search and its variants, contrastive search, and `generate` itself but for its
call to `assisted_decoding`). A call reaches a function by name (`name(...)`) or as an attribute (`self.name(...)`,
`assistant_model.name(...)`). It prints each function with its lines and its lines of code (without blank lines,
comments and docstrings), and the totals: the size the series keeps no larger than upstream's own fix.

`check_series.py` uses `changed_definitions` and `assisted_only` to tell a patch that can only change assisted
decoding (its plain-generation regression tests cannot change) from one that can change more.
"""

from __future__ import annotations

import argparse
import ast
import copy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "transformers"
UTILS = "src/transformers/generation/utils.py"
ASSISTED = "assisted_decoding"
PLAIN = (
    "generate",
    "greedy_search",
    "sample",
    "beam_search",
    "beam_sample",
    "group_beam_search",
    "constrained_beam_search",
    "contrastive_search",
)


def definitions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Module functions and `GenerationMixin` methods, by name."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef) and node.name == "GenerationMixin":
            found.update((sub.name, sub) for sub in node.body if isinstance(sub, ast.FunctionDef))
    return found


def _calls(function: ast.FunctionDef, known: dict) -> set[str]:
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            target = node.func
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
            if name in known:
                names.add(name)
    return names


def _reach(known: dict, starts, cut=()) -> set[str]:
    seen, todo = set(), [name for name in starts if name in known]
    while todo:
        name = todo.pop()
        if name in seen or name in cut:
            continue
        seen.add(name)
        todo.extend(_calls(known[name], known))
    return seen


def assisted_only(source: str) -> set[str]:
    """The names of the functions only assisted decoding reaches."""
    known = definitions(ast.parse(source))
    return _reach(known, [ASSISTED]) - _reach(known, PLAIN, cut=(ASSISTED,))


def changed_definitions(old: str, new: str) -> tuple[set[str], bool]:
    """(functions added, removed or changed between two versions of the file; whether anything else changed, imports
    aside: module statements, classes, `GenerationMixin`'s attributes)."""
    old_tree, new_tree = ast.parse(old), ast.parse(new)
    old_defs, new_defs = definitions(old_tree), definitions(new_tree)
    changed = {
        name
        for name in old_defs.keys() | new_defs.keys()
        if name not in old_defs or name not in new_defs or ast.dump(old_defs[name]) != ast.dump(new_defs[name])
    }

    def others(tree):
        kept = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.ClassDef) and node.name == "GenerationMixin":
                kept.extend(ast.dump(sub) for sub in node.body if not isinstance(sub, ast.FunctionDef))
                continue
            kept.append(ast.dump(node))
        return kept

    return changed, others(old_tree) != others(new_tree)


def _holds_only_with_an_assistant(test: ast.expr) -> bool:
    """Whether an `if` test holds only when `generate` was given an assistant: `is_assisted_gen_mode`, or
    `assistant_model is not None`."""
    if isinstance(test, ast.Name):
        return test.id == "is_assisted_gen_mode"
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "assistant_model"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def without_assistant_branches(function: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of `function` whose `if` blocks that run only with an assistant are emptied (their `else` kept)."""

    class _Blank(ast.NodeTransformer):
        def visit_If(self, node):
            self.generic_visit(node)
            if _holds_only_with_an_assistant(node.test):
                node.body = [ast.Pass()]
            return node

    return _Blank().visit(copy.deepcopy(function))


def plain_reach(source: str) -> set[str]:
    """The functions plain generation reaches: from the plain methods, `generate`'s branches that run only with an
    assistant left out, and `assisted_decoding` not entered."""
    known = definitions(ast.parse(source))
    if "generate" in known:
        known["generate"] = without_assistant_branches(known["generate"])
    return _reach(known, PLAIN, cut=(ASSISTED,))


def only_changes_assisted_decoding(old: str, new: str) -> bool:
    """Whether every change between the two versions is in code only assisted decoding runs: functions plain
    generation does not reach, and the branches of `generate` that run only with an assistant."""
    changed, other = changed_definitions(old, new)
    if other:
        return False
    reached = plain_reach(old) | plain_reach(new)
    for name in changed:
        if name == "generate":
            old_generate, new_generate = definitions(ast.parse(old)), definitions(ast.parse(new))
            if "generate" in old_generate and "generate" in new_generate:
                blanked = [ast.dump(without_assistant_branches(d["generate"])) for d in (old_generate, new_generate)]
                if blanked[0] == blanked[1]:
                    continue
            return False
        if name in reached:
            return False
    return True


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def size(source: str) -> list[tuple[str, int, int]]:
    """(function, lines, lines of code) for each assisted-only function, in name order."""
    tree = ast.parse(source)
    known = definitions(tree)
    text = source.splitlines()
    docstrings = _docstring_lines(tree)
    rows = []
    for name in sorted(assisted_only(source)):
        node = known[name]
        first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
        lines = range(first, node.end_lineno + 1)
        code = [n for n in lines if text[n - 1].strip() and not text[n - 1].strip().startswith("#")]
        rows.append((name, len(lines), len([n for n in code if n not in docstrings])))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help=f"default: {TREE / UTILS}")
    parser.add_argument("--rev", action="append", default=[], help="a git revision of --tree (repeatable)")
    parser.add_argument("--tree", type=Path, default=TREE)
    args = parser.parse_args(argv)
    sources = []
    for rev in args.rev:
        shown = subprocess.run(
            ["git", "-C", str(args.tree), "show", f"{rev}:{UTILS}"], capture_output=True, text=True, check=True
        )
        sources.append((rev, shown.stdout))
    for path in args.files or ([] if args.rev else [args.tree / UTILS]):
        sources.append((str(path), path.read_text(encoding="utf-8")))
    for label, source in sources:
        rows = size(source)
        print(f"{label}:")
        for name, lines, code in rows:
            print(f"  {name:45} {lines:5} {code:5}")
        print(f"  {'total':45} {sum(r[1] for r in rows):5} {sum(r[2] for r in rows):5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
