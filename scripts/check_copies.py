#!/usr/bin/env python3
"""Check that every `# Copied from transformers.X` block of a transformers tree matches its source.

The transformers sdist ships without upstream's `utils/` folder, so this is our own implementation of the same
consistency rule. For every marker

    # Copied from transformers.<module path>.<Object>[.<attribute>...] [with A->B, C->D all-casing, ...]

placed right above a `class`/`def`, the script finds the source object in the tree, takes its source block,
applies the replacements in order (each `A->B` is a regular-expression substitution, as upstream applies them;
`all-casing` also replaces the lower- and upper-case forms), re-formats the result with black when the
replacements changed line lengths, and compares it with the copy's block. Indentation is normalised, so a
top-level function may be copied as a method. A copy ends where its indentation ends or at a `# End copy` line.

Markers that do not name a `transformers.` object (free-text notes such as "Copied from fairseq", or misspelt
module prefixes) cannot be checked; they are counted and listed with `--verbose`, never silently dropped.

Usage: check_copies.py [TREE] [--verbose]
TREE is a transformers checkout (containing src/transformers) or the package folder itself; default
build/transformers. Exit status 0 when every copy is consistent, 1 when some are not (each one is listed with
file:line and a diff), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^(?P<indent>\s*)#\s*Copied from\s+(?P<rest>\S.*?)\s*$")
TRANSFORMERS_REF = re.compile(r"^transformers\.(?P<name>\S+\.\S+)(?:\s+(?P<pattern>\S.*))?$")
LEADING_WITH = re.compile(r"^\s*(?:with\b\s*)*")
REPLACEMENT = re.compile(r"^(?P<old>\S+)->(?P<new>\S+)(?:\s+(?P<option>.*))?$")
CLOSING_SIGNATURE = re.compile(r"^\s*\)(\s*->.*:|:)\s*$")
END_COPY = "# End copy"

DIFF_LINES = 20


@dataclass
class Result:
    checked: int = 0
    nested: int = 0
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def block_end(lines: list[str], start: int, copy: bool = False) -> int:
    """Index one past the last line of the `class`/`def` block whose header is `lines[start]`.

    The block runs while lines are blank or more indented than the header; a line that only closes a multi-line
    signature (`) -> Tensor:`) stays in it. In a copy (`copy=True`), a `# End copy` line at the indentation of the
    block's body closes it. Trailing blank lines are not part of the block.
    """
    header_indent = indent_of(lines[start])
    end_copy = " " * (header_indent + 4) + END_COPY
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if copy and line.startswith(end_copy):
            break
        if line.strip() and indent_of(line) <= header_indent and not CLOSING_SIGNATURE.match(line):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def dedent(lines: list[str], width: int) -> tuple[str, str]:
    """(header, body) of a block, both shifted left by `width` columns."""
    out = []
    for line in lines:
        if line.strip():
            if indent_of(line) < width:
                # Only continuation lines of multi-line strings can be less indented than the header; keep them.
                out.append(line)
            else:
                out.append(line[width:])
        else:
            out.append("\n")
    return out[0], "".join(out[1:])


class Tree:
    def __init__(self, package: Path):
        self.package = package
        self._lines: dict[Path, list[str]] = {}
        self._ast: dict[Path, ast.Module] = {}

    def lines(self, path: Path) -> list[str]:
        if path not in self._lines:
            self._lines[path] = path.read_text(encoding="utf-8").splitlines(keepends=True)
        return self._lines[path]

    def module(self, path: Path) -> ast.Module:
        if path not in self._ast:
            self._ast[path] = ast.parse("".join(self.lines(path)), filename=str(path))
        return self._ast[path]

    def find(self, dotted: str, warnings: list[str]) -> tuple[Path, int]:
        """(file, 0-based line of the `class`/`def` header) of `transformers.<dotted>`; raises LookupError.

        A method that its class does not define is looked up, as upstream's tool does, in the classes that follow
        it in the same module (some upstream markers rely on this); each such resolution is added to `warnings`.
        """
        parts = dotted.split(".")
        for split in range(len(parts) - 1, 0, -1):
            path = self.package.joinpath(*parts[:split]).with_suffix(".py")
            if path.is_file():
                break
        else:
            raise LookupError(f"no module of transformers.{dotted} in the tree")
        module = self.module(path)
        body, node, following = module.body, None, []
        for name in parts[split:]:
            found = _named(body, name)
            if found is None and node is not None and isinstance(node, ast.ClassDef):
                for later in following:
                    if isinstance(later, ast.ClassDef) and _named(later.body, name) is not None:
                        warnings.append(
                            f"{node.name} defines no {name}: resolved, like upstream's tool, to {later.name}.{name}"
                        )
                        found = _named(later.body, name)
                        break
            if found is None:
                raise LookupError(f"{name} not found in {path.relative_to(self.package.parent)}")
            following = [n for n in body if n.lineno > found.lineno]
            node, body = found, found.body
        return path, node.lineno - 1

    def body(self, dotted: str, warnings: list[str]) -> str:
        path, start = self.find(dotted, warnings)
        lines = self.lines(path)
        return dedent(lines[start : block_end(lines, start)], indent_of(lines[start]))[1]


def _named(body: list[ast.stmt], name: str) -> ast.stmt | None:
    candidates = [
        n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
    ]
    # As in upstream's tool, the first definition wins (a property's getter rather than its setter).
    return candidates[0] if candidates else None


def apply_replacements(code: str, pattern: str, warnings: list[str]) -> str:
    """Apply `with A->B, C->D all-casing, ...` to `code`, in order.

    Upstream's rules: `A` is a regular expression, neither side may contain spaces, `all-casing` also replaces the
    lower- and upper-case forms. An item upstream's tool cannot read (a bare `with`, `A -> B`, `Two words->B`)
    replaces nothing, as there; it is reported in `warnings`.
    """
    for raw in pattern.split(","):
        if not raw.strip():
            continue
        match = REPLACEMENT.match(LEADING_WITH.sub("", raw).strip())
        if match is None:
            warnings.append(f"replacement {raw.strip()!r} is not of the form A->B and is ignored, as upstream's is")
            continue
        old, new, option = match.group("old"), match.group("new"), (match.group("option") or "").strip()
        code = re.sub(old, new, code)
        if option == "all-casing":
            code = re.sub(old.lower(), new.lower(), code)
            code = re.sub(old.upper(), new.upper(), code)
        elif option:
            warnings.append(f"unknown option {option!r} in replacement {raw.strip()!r} is ignored")
    return code


def blacken(code: str, line_length: int) -> str | None:
    """`code` formatted by black (the tree's settings, at the given line length); None when black is missing."""
    try:
        import black
    except ImportError:
        return None
    mode = black.Mode(line_length=line_length, target_versions={black.TargetVersion.PY37})
    try:
        return black.format_str(code, mode=mode)
    except Exception:  # black cannot parse it: the plain comparison stands
        return code


def check_file(tree: Tree, path: Path, result: Result, root: Path) -> None:
    lines = tree.lines(path)
    covered_until = 0
    for index, line in enumerate(lines):
        match = MARKER.match(line)
        if match is None:
            continue
        if index < covered_until:
            # A marker inside a copy that is checked as a whole: upstream's tool skips it too.
            result.nested += 1
            continue
        where = f"{path.relative_to(root)}:{index + 1}"
        reference = TRANSFORMERS_REF.match(match.group("rest"))
        if reference is None:
            result.unchecked.append(f"{where}: # Copied from {match.group('rest')}")
            continue
        header = index + 1
        while header < len(lines) and not lines[header].strip():
            header += 1
        if header >= len(lines) or not re.match(r"\s*(async\s+def|def|class)\s", lines[header]):
            result.errors.append(f"{where}: the marker is not followed by a class or def")
            continue
        name, pattern = reference.group("name"), reference.group("pattern") or ""
        notes: list[str] = []
        try:
            expected = apply_replacements(tree.body(name, notes), pattern, notes)
        except (LookupError, ValueError, SyntaxError) as error:
            result.errors.append(f"{where}: transformers.{name}: {error}")
            continue
        result.warnings.extend(f"{where}: transformers.{name}: {note}" for note in notes)
        result.checked += 1
        covered_until = block_end(lines, header, copy=True)
        # The header line (class/def name and first line of the signature) is the copy's own; the rest must match.
        own_header, observed = dedent(lines[header:covered_until], indent_of(lines[header]))
        if observed == expected:
            continue
        formatted = blacken(own_header + expected, 119 - indent_of(lines[header]))
        if formatted is not None and formatted == own_header + observed:
            continue
        observed_tokens = code_tokens(own_header + observed)
        if observed_tokens is not None and observed_tokens == code_tokens(formatted or own_header + expected):
            continue
        # Shown at the copy's own indentation, so that the lines can be found in the file.
        margin = " " * indent_of(lines[header])
        diff = list(
            difflib.unified_diff(
                [margin + line for line in (formatted or own_header + expected).splitlines()],
                [margin + line for line in (own_header + observed).splitlines()],
                f"transformers.{name} (after replacements)",
                where,
                lineterm="",
                n=1,
            )
        )
        shown = "\n".join("    " + d for d in diff[:DIFF_LINES])
        more = f"\n    ... ({len(diff) - DIFF_LINES} more diff lines)" if len(diff) > DIFF_LINES else ""
        result.mismatches.append(f"{where}: copy of transformers.{name} differs from its source\n{shown}{more}")


def code_tokens(code: str) -> list[tuple[int, str]] | None:
    """Tokens of `code` with docstring layout removed; None when it does not tokenize.

    Upstream re-wraps the docstrings of a copy to 119 columns (and re-formats their doctest examples) after the
    replacements; the copies in the tree are wrapped that way. Comparing triple-quoted strings without their
    whitespace and doctest continuation prompts makes the comparison independent of that wrapping; everything
    else (code, comments, other strings) is compared token by token.
    """
    out = []
    try:
        for token in tokenize.generate_tokens(iter(code.splitlines(keepends=True)).__next__):
            if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            text = token.string
            if token.type == tokenize.STRING and text.lstrip("rRbBuUfF")[:3] in ('"""', "'''"):
                text = re.sub(r"\n\s*\.\.\.(?=\s)", " ", text)
                text = re.sub(r"[\s(),]+", "", text)
            out.append((token.type, text))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return out


def package_of(tree: Path) -> Path:
    for candidate in (tree / "src" / "transformers", tree):
        if (candidate / "__init__.py").is_file() and (candidate / "models").is_dir():
            return candidate
    raise SystemExit(f"check_copies: {tree} is neither a transformers checkout nor the transformers package")


def check_tree(tree: Path) -> Result:
    package = package_of(tree)
    root = package.parent.parent if package.parent.name == "src" else package.parent
    loaded = Tree(package)
    result = Result()
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames.sort()
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                check_file(loaded, Path(dirpath) / filename, result, root)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", default="build/transformers", type=Path)
    parser.add_argument("--verbose", "-v", action="store_true", help="list the markers that cannot be checked")
    args = parser.parse_args(argv)
    if not args.tree.exists():
        parser.error(f"{args.tree} does not exist")
    result = check_tree(args.tree.resolve())

    for line in result.mismatches + result.errors:
        print(line)
    for line in result.warnings:
        print(f"warning: {line}")
    if args.verbose:
        for line in result.unchecked:
            print(f"not checked: {line}")
    status = "OK" if not (result.mismatches or result.errors) else "FAILED"
    print(
        f"check_copies: {status}: {result.checked} copies checked ({result.nested} more markers inside them), "
        f"{len(result.mismatches)} inconsistent, {len(result.errors)} unresolvable, {len(result.warnings)} warnings; "
        f"{len(result.unchecked)} markers name no transformers object and cannot be checked"
        + ("" if args.verbose else " (--verbose lists them)")
    )
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
