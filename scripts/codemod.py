#!/usr/bin/env python3
"""Slice generation inputs by the cache length in `prepare_inputs_for_generation`.

Usage:

    python scripts/codemod.py <tree> [--check] [--only REGEX]

`<tree>` is a transformers source tree (the directory holding `src/transformers`, or `src/transformers/models`
itself). The script rewrites, in place, the PyTorch `prepare_inputs_for_generation` methods that have one of the
common shapes:

* the last-token slice of the model inputs under a cache test,

      if past_key_values:                          # or `past_key_values is not None`, or `past`
          input_ids = input_ids[:, -1:]            # or `input_ids[:, -1].unsqueeze(-1)`

  becomes a slice by the cache length: the tokens the cache has not seen yet when the input is longer than the
  cache (assisted generation), the last token otherwise (every other generation method, unchanged):

      if past_key_values:
          past_length = past_key_values[0][0].shape[2]

          # <comment>
          if input_ids.shape[1] > past_length:
              input_ids = input_ids[:, past_length:]
          else:
              input_ids = input_ids[:, -1:]

  The same applies to `decoder_input_ids` (and to the `input_ids` of the T5 family, which are decoder inputs);
  `past_key_values[0][0]` is the first layer's (decoder self-attention) key, `(batch, heads, length, head_dim)`.
* every other per-position input sliced to its last position under a cache test (`position_ids`, including the
  ones derived from the attention mask, `token_type_ids`, ...) follows the new length of the ids:
  `position_ids = position_ids[:, -input_ids.shape[1] :]`. Such a slice must come after the ids slice; when it
  comes before, the method is reported and left alone.

Skipped (one line each): the models whose cache layout or input handling is model specific (`HAND_WRITTEN`,
patched by hand), `*ForMaskedLM` classes (they return no cache) and the models that refuse assisted generation.

`# Copied from` relations (method-level ones, and whole-class ones whose class defines the method) are kept: a copy
that matched its source before the run is regenerated from the rewritten source with the copy's replacements
applied; a copy that did not match before is reported and rewritten on its own. As in upstream's copy checker, a
source class that does not define the method resolves to the next definition of it in the same file.

`--only REGEX` restricts the rewrite to the methods whose `<model>/<Class>` (e.g. `gpt2/GPT2LMHeadModel`) matches,
to split the change into reviewable steps; copies still follow their sources.

Output: one line per method changed, not handled (with the reason) or skipped. The exit status is 0 after a
rewrite; with `--check` nothing is written, and the exit status is 1 when some method would change. Running the
script twice changes nothing the second time; the emitted code is black (line length 119) clean.

Only the standard library is needed.

How the model patches were made (each step a commit, every changed method reviewed by eye):

    BERTS='bert|bert_generation|big_bird|camembert|data2vec|electra|ernie|markuplm|megatron_bert|qdqbert|rembert'
    BERTS="$BERTS|roberta|roberta_prelayernorm|roc_bert|roformer|xlm_roberta|xlm_roberta_xl|xmod"
    python scripts/codemod.py T --only "^(?!(?:$BERTS)/).*(ForCausalLM|LMHeadModel|DoubleHeadsModel)$"  # decoder-only
    # XGLMForCausalLM by hand: it cut position_ids before input_ids (reported as not handled)
    python scripts/codemod.py T --only "^(?:$BERTS)/"  # BERT-family causal LM heads
    python scripts/codemod.py T  # encoder-decoder models

On the patched tree, `--check` reports "up to date".
"""

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

METHOD = "prepare_inputs_for_generation"

# Models whose methods are written by hand: model-specific cache layouts (fused, multi-query, prefix positions...),
# composite models delegating to another model, and models that refuse assisted generation.
HAND_WRITTEN = {
    "bark",
    "blip",
    "bloom",
    "cpmant",
    "encoder_decoder",
    "falcon",
    "flaubert",
    "fsmt",
    "git",
    "gpt_bigcode",
    "gpt_neox_japanese",
    "gptsan_japanese",
    "imagegpt",
    "led",
    "mega",
    "musicgen",
    "openai",
    "prophetnet",
    "rag",
    "reformer",
    "rwkv",
    "speech_encoder_decoder",
    "speech_to_text",
    "transfo_xl",
    "vision_encoder_decoder",
    "xlm",
    "xlm_prophetnet",
    "xlnet",
}

# Classes that keep the one-token behaviour: they return no cache.
SKIPPED_CLASS_SUFFIXES = ("ForMaskedLM",)

# Names of the ids whose slice drives every other per-position input.
IDS_NAMES = ("input_ids", "decoder_input_ids")
PAST_NAMES = ("past_key_values", "past")

ASSISTED_COMMENT = (
    "Assisted generation passes all the tokens the cache has not seen yet; every other generation method passes a "
    "single new token, which is all that is kept then."
)
DECODER_CACHE_COMMENT = "Length of the decoder self-attention cache (the cross-attention one spans the encoder)."

LINE_LENGTH = 119

_re_copied = re.compile(r"^(\s*)# Copied from (\S+)(.*)$")
_re_replace_pattern = re.compile(r"^\s*(\S+)->(\S+)(\s+.*|$)")
_re_done_test = re.compile(r"^(\w+)\.shape\[1\] > past_length$")


# ----------------------------------------------------------------------------------------------------------------
# AST helpers


def _is_minus_one(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and node.operand.value == 1
    return isinstance(node, ast.Constant) and node.value == -1


def _batch_slice_base(node, is_last_position):
    """Returns the name `x` when `node` is `x[:, <index>]` and `is_last_position(<index>)`, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Tuple):
        elts = node.slice.elts
        whole = elts[0] if elts else None
        if (
            len(elts) == 2
            and isinstance(whole, ast.Slice)
            and whole.lower is None
            and whole.upper is None
            and whole.step is None
            and is_last_position(elts[1])
        ):
            return node.value.id
    return None


def _is_last_slice(node):
    """`-1:`"""
    return isinstance(node, ast.Slice) and _is_minus_one(node.lower) and node.upper is None and node.step is None


def _last_position_base(node):
    """Returns the name `x` when `node` is `x[:, -1:]` or `x[:, -1].unsqueeze(-1)`, else None."""
    if isinstance(node, ast.Subscript):
        return _batch_slice_base(node, _is_last_slice)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "unsqueeze"
        and len(node.args) == 1
        and not node.keywords
        and _is_minus_one(node.args[0])
    ):
        return _batch_slice_base(node.func.value, _is_minus_one)
    return None


def _past_name(test):
    """The cache variable a test looks at (`past_key_values`, `past`), or None."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id in PAST_NAMES:
            return node.id
    return None


def _walk_with_ifs(node, ifs=()):
    """Yields (statement, enclosing If nodes from the outermost) for every statement below `node`."""
    for field in ("body", "orelse"):
        for stmt in getattr(node, field, []):
            yield stmt, ifs
            if isinstance(stmt, ast.If):
                yield from _walk_with_ifs(stmt, ifs + (stmt,))
            elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                yield from _walk_with_ifs(stmt, ifs)


def _done_ids(test):
    """`x` when `test` is the rewritten `x.shape[1] > past_length`, else None."""
    match = _re_done_test.match(ast.unparse(test))
    return match.group(1) if match else None


# ----------------------------------------------------------------------------------------------------------------
# Rewriting one method


class NotHandled(Exception):
    pass


def _comment_lines(indent, text):
    width = LINE_LENGTH - len(indent) - 2
    return [f"{indent}# {line}" for line in textwrap.wrap(text, width=width)]


def rewrite_method(lines, func, encoder_decoder):
    """Returns (edits, sliced names) for one method; edits are (first line, last line, new lines), 1-based.

    Raises NotHandled when the method has a last-position slice the rules do not cover.
    """
    candidates = []  # (stmt, name, past name) of every `x = x[:, -1:]`-like statement under a cache test
    done = None  # ids name of an already rewritten method
    for stmt, ifs in _walk_with_ifs(func):
        if isinstance(stmt, ast.If) and _done_ids(stmt.test) is not None:
            done = _done_ids(stmt.test)
        if not (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _last_position_base(stmt.value) == stmt.targets[0].id
        ):
            continue
        if ifs and _done_ids(ifs[-1].test) is not None:
            continue  # the kept-last-token branch of an already rewritten method
        past = next((_past_name(node.test) for node in reversed(ifs) if _past_name(node.test)), None)
        if past is None:
            raise NotHandled(f"line {stmt.lineno}: `{ast.unparse(stmt)}` is not under a cache test")
        candidates.append((stmt, stmt.targets[0].id, past))

    if not candidates:
        return [], []

    ids_stmts = [c for c in candidates if c[1] in IDS_NAMES]
    if done is not None and ids_stmts:
        raise NotHandled(f"line {ids_stmts[0][0].lineno}: ids sliced again after the cache-length slice")
    if len(ids_stmts) > 1:
        raise NotHandled("the ids are sliced by more than one statement")
    if done is None and not ids_stmts:
        names = ", ".join(c[1] for c in candidates)
        raise NotHandled(f"{names} sliced to the last position but no input_ids/decoder_input_ids slice")

    edits = []
    if ids_stmts:
        stmt, ids, past = ids_stmts[0]
        ids_line = stmt.lineno
        indent = re.match(r"\s*", lines[stmt.lineno - 1]).group(0)
        original = [line[len(indent) :] for line in lines[stmt.lineno - 1 : stmt.end_lineno]]
        new = []
        if encoder_decoder:
            new += _comment_lines(indent, DECODER_CACHE_COMMENT)
        new += [f"{indent}past_length = {past}[0][0].shape[2]", ""]
        new += _comment_lines(indent, ASSISTED_COMMENT)
        new += [
            f"{indent}if {ids}.shape[1] > past_length:",
            f"{indent}    {ids} = {ids}[:, past_length:]",
            f"{indent}else:",
        ]
        new += [f"{indent}    {line}" for line in original]
        following = lines[stmt.end_lineno] if stmt.end_lineno < len(lines) else ""
        if following.strip() and following.startswith(indent) and not following[len(indent)].isspace():
            new.append("")  # more statements follow in the same block
        edits.append((stmt.lineno, stmt.end_lineno, new))
    else:
        ids = done
        ids_line = min(
            (s.lineno for s, _ in _walk_with_ifs(func) if isinstance(s, ast.If) and _done_ids(s.test)), default=0
        )

    sliced = [ids] if ids_stmts else []
    for stmt, name, _ in candidates:
        if name == ids:
            continue
        if stmt.lineno < ids_line:
            raise NotHandled(
                f"line {stmt.lineno}: {name} is sliced before {ids}; slice {ids} first, then {name} by its length"
            )
        indent = re.match(r"\s*", lines[stmt.lineno - 1]).group(0)
        edits.append((stmt.lineno, stmt.end_lineno, [f"{indent}{name} = {name}[:, -{ids}.shape[1] :]"]))
        sliced.append(name)
    return edits, sliced


def apply_edits(lines, edits):
    lines = list(lines)
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1 : last] = new
    return lines


# ----------------------------------------------------------------------------------------------------------------
# Files, methods and copies


def find_methods(source):
    """Yields (class node, method node, copy comment or None) for each `prepare_inputs_for_generation`."""
    lines = source.splitlines()
    tree = ast.parse(source)
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for func in cls.body:
            if isinstance(func, ast.FunctionDef) and func.name == METHOD:
                yield cls, func, _copy_comment(lines, func) or _copy_comment(lines, cls, whole_class=True)


def _copy_comment(lines, node, whole_class=False):
    start = node.lineno - 1 - len(node.decorator_list)
    if start == 0:
        return None
    match = _re_copied.match(lines[start - 1])
    if match is None:
        return None
    target, replacements = match.group(2), match.group(3).strip()
    if whole_class:
        target = f"{target}.{METHOD}"
    return target, replacements


def method_span(lines, func):
    """1-based first and last line of the method (decorators included, leading comment excluded)."""
    return func.lineno - len(func.decorator_list), func.end_lineno


def apply_replacements(code, replacements):
    if not replacements:
        return code
    for pattern in replacements.replace("with", "", 1).split(","):
        match = _re_replace_pattern.search(pattern)
        if match is None:
            continue
        obj1, obj2, option = match.groups()
        code = re.sub(obj1, obj2, code)
        if option.strip() == "all-casing":
            code = re.sub(obj1.lower(), obj2.lower(), code)
            code = re.sub(obj1.upper(), obj2.upper(), code)
    return code


class Tree:
    def __init__(self, root):
        root = Path(root)
        if (root / "src" / "transformers" / "models").is_dir():
            root = root / "src" / "transformers" / "models"
        if not root.is_dir() or root.name != "models":
            raise SystemExit(f"{root}: not a transformers source tree")
        self.models = root
        self.root = root.parent.parent.parent
        self.original = {}
        self.current = {}
        for path in sorted(root.glob("**/modeling_*.py")):
            if path.name.startswith(("modeling_tf_", "modeling_flax_")):
                continue
            text = path.read_text(encoding="utf-8")
            if METHOD in text:
                self.original[path] = self.current[path] = text

    def rel(self, path):
        try:
            return path.relative_to(self.root)
        except ValueError:
            return path

    def method_text(self, dotted, which="current"):
        """Text of the method `transformers.models.<model>.<module>.<Class>.<method>`, or None."""
        parts = dotted.split(".")
        if len(parts) < 5 or parts[0] != "transformers" or parts[1] != "models":
            return None
        *module, cls_name, method = parts[2:]
        path = self.models.joinpath(*module).with_suffix(".py")
        texts = self.original if which == "original" else self.current
        if path not in texts:
            return None
        lines = texts[path].splitlines()
        # Like upstream's copy checker, a class that does not define the method resolves to the next definition
        # of it in the file (MarkupLMModel copies `BertModel.prepare_inputs_for_generation`, which is
        # BertLMHeadModel's).
        start = next(
            (
                node.lineno
                for node in ast.parse(texts[path]).body
                if isinstance(node, ast.ClassDef) and node.name == cls_name
            ),
            None,
        )
        if start is None:
            return None
        for cls, func, _ in find_methods(texts[path]):
            if cls.lineno >= start and func.name == method:
                first, last = method_span(lines, func)
                return "\n".join(lines[first - 1 : last])
        return None


def model_of(tree, path):
    return path.relative_to(tree.models).parts[0]


def run(tree_path, check, only=None):
    tree = Tree(tree_path)
    selected = re.compile(only) if only else None
    report = []
    changed = 0
    unselected = set()  # (path, class name) of the methods `--only` leaves out

    # 1. rewrite every method on its own
    for path in list(tree.current):
        model = model_of(tree, path)
        source = tree.current[path]
        lines = source.splitlines()
        edits = []
        for cls, func, _ in find_methods(source):
            where = f"{tree.rel(path)}:{func.lineno}: {cls.name}.{METHOD}"
            if selected is not None and not selected.search(f"{model}/{cls.name}"):
                unselected.add((path, cls.name))
                continue
            if model in HAND_WRITTEN:
                report.append(f"{where}: skipped: model-specific, written by hand")
                continue
            if cls.name.endswith(SKIPPED_CLASS_SUFFIXES):
                report.append(f"{where}: skipped: returns no cache, keeps the last token")
                continue
            encoder_decoder = any(
                isinstance(node, ast.Constant) and node.value == "decoder_input_ids" for node in ast.walk(func)
            )
            try:
                method_edits, sliced = rewrite_method(lines, func, encoder_decoder)
            except NotHandled as err:
                report.append(f"{where}: not handled: {err}")
                continue
            if method_edits:
                edits += method_edits
                report.append(f"{where}: {'would rewrite' if check else 'rewritten'} ({', '.join(sliced)})")
                changed += 1
        if edits:
            tree.current[path] = "\n".join(apply_edits(lines, edits)) + "\n"

    # 2. keep `# Copied from` copies equal to their source
    for path in list(tree.current):
        for cls, func, copied in find_methods(tree.original[path]):
            if copied is None or cls.name.endswith(SKIPPED_CLASS_SUFFIXES):
                continue
            target, replacements = copied
            where = f"{tree.rel(path)}:{func.lineno}: {cls.name}.{METHOD}"
            quiet = (path, cls.name) in unselected
            source_before, source_after = tree.method_text(target, "original"), tree.method_text(target)
            if source_before is None or source_after is None:
                if not quiet and model_of(tree, path) not in HAND_WRITTEN:
                    report.append(f"{where}: note: copy source {target} not found; handled on its own")
                continue
            expected = apply_replacements(source_after, replacements)
            current_lines = tree.current[path].splitlines()
            for cur_cls, cur_func, _ in find_methods(tree.current[path]):
                if cur_cls.name == cls.name:
                    first, last = method_span(current_lines, cur_func)
                    break
            if "\n".join(current_lines[first - 1 : last]) == expected:
                continue
            lines = tree.original[path].splitlines()
            first_before, last_before = method_span(lines, func)
            if "\n".join(lines[first_before - 1 : last_before]) != apply_replacements(source_before, replacements):
                if not quiet and model_of(tree, path) not in HAND_WRITTEN:
                    report.append(f"{where}: note: differs from its copy source {target}; handled on its own")
            elif model_of(tree, path) in HAND_WRITTEN:
                report.append(f"{where}: note: its copy source {target} changed; update the copy by hand")
            else:
                current_lines[first - 1 : last] = expected.split("\n")
                tree.current[path] = "\n".join(current_lines) + "\n"
                report.append(f"{where}: copy regenerated from {target}")

    for line in report:
        print(line)

    modified = [path for path in tree.current if tree.current[path] != tree.original[path]]
    if check:
        print(f"{len(modified)} file(s) would change" if modified else "up to date")
        return 1 if modified else 0
    for path in modified:
        path.write_text(tree.current[path], encoding="utf-8")
    print(f"{changed} method(s) rewritten in {len(modified)} file(s)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", help="transformers source tree (containing src/transformers) or its models folder")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 when something would change")
    parser.add_argument(
        "--only", metavar="REGEX", help="only rewrite the methods whose `<model>/<Class>` matches (re.search)"
    )
    args = parser.parse_args()
    sys.exit(run(args.tree, args.check, args.only))


if __name__ == "__main__":
    main()
