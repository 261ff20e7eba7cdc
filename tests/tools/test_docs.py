"""The documents in docs/ say what the code does: checked against the expectations, the series and the Makefile."""

import re
import sys
from pathlib import Path

import pytest

from support.expectations import EXPECTATIONS

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))
from series import read_tiers, tier_errors  # noqa: E402

DOCS = REPO / "docs"


def series_subjects() -> list[str]:
    """The subjects of the patches, in patches/series order (folded Subject: headers unfolded)."""
    series = REPO / "patches" / "series"
    if not series.exists():
        return []
    subjects = []
    for line in series.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        text = (REPO / "patches" / name).read_text()
        match = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n[ \t].*)*)", text, re.MULTILINE)
        subjects.append(re.sub(r"\s*\n[ \t]+", " ", match.group(1)).strip())
    return subjects


def refused_rows() -> dict[str, str]:
    """`class -> reason` from the refused-classes table of design.md ("same" repeats the row above)."""
    text = (DOCS / "design.md").read_text()
    table = text.split("<!-- refused-classes", 1)[1].split("<!-- end of refused-classes -->", 1)[0]
    rows, previous = {}, None
    for match in re.finditer(r"^\| `(\w+)` \| (.*?) \|", table, re.MULTILINE):
        name, reason = match.groups()
        reason = previous if reason == "same" else reason
        rows[name], previous = reason, reason
    return rows


def test_design_lists_exactly_the_refused_classes_of_the_expectation_table():
    expected = {name: entry.reason for name, entry in EXPECTATIONS.items() if not entry.supported}
    assert refused_rows() == expected


def test_upstream_pr_follows_the_template():
    text = (DOCS / "upstream-pr.md").read_text()
    for needed in (
        "# What does this PR do?",
        "Fixes #25020",
        "## Before submitting",
        "## Who can review?",
        "@gante",
        "@ArthurZucker",
        "@younesbelkada",
    ):
        assert needed in text


def series_groups(tier: str | None = None) -> list[str]:
    """The groups of patches/series (`# group: NAME (TIER)` lines), in order; those of `tier` only if given."""
    return [name for name, group_tier in read_tiers(REPO / "patches") if tier in (None, group_tier)]


def test_the_series_is_in_two_tiers_upstream_first():
    tiers = read_tiers(REPO / "patches")
    if not tiers:
        pytest.skip("patches/series names no group")
    assert tier_errors(tiers) == []
    assert {tier for _, tier in tiers} == {"upstream", "fork"}


def test_upstream_pr_has_one_section_per_upstream_group_with_its_behaviour_changes():
    groups = series_groups("upstream")
    if not groups:
        pytest.skip("patches/series names no upstream group")
    text = (DOCS / "upstream-pr.md").read_text()
    upstream_text, _, fork_text = text.partition("\n# The fork tier")
    sections = re.split(r"^## PR \d+ ", upstream_text, flags=re.MULTILINE)[1:]
    assert [re.match(r"\(`([^`]+)`\)", section).group(1) for section in sections] == groups
    assert groups[0] == "fix" and "Fixes #25020" in sections[0]
    for group, section in zip(groups, sections, strict=True):
        assert "## Behaviour changes against v4.31.0" in section, f"the PR text of {group} lists no behaviour change"
    fork_sections = re.findall(r"^## `([^`]+)`", fork_text, flags=re.MULTILINE)
    assert fork_sections == series_groups("fork"), "the fork tier's section names each fork group, in order"


def test_the_readme_names_each_groups_tier():
    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| (upstream|fork) \|", text, flags=re.MULTILINE)
    assert rows == read_tiers(REPO / "patches")


# Readers' limits: the pages are read, not searched.
MAX_DOCS_WORDS = 20_000
MAX_DESIGN_WORDS = 4_000


def words(path: Path) -> int:
    return len(path.read_text().split())


def test_the_docs_stay_within_their_sizes():
    total = sum(words(page) for page in DOCS.rglob("*.md"))
    assert total <= MAX_DOCS_WORDS, f"docs/ holds {total} words, more than {MAX_DOCS_WORDS}"
    assert words(DOCS / "design.md") <= MAX_DESIGN_WORDS


def test_cover_letter_lists_the_series_in_order():
    subjects = series_subjects()
    if not subjects:
        pytest.skip("patches/series is empty")
    text = (DOCS / "cover-letter.md").read_text()
    assert f"[PATCH 00/{len(subjects):02d}]" in text
    positions = [text.find(subject) for subject in subjects]
    assert -1 not in positions, [s for s, p in zip(subjects, positions, strict=True) if p == -1]
    assert positions == sorted(positions), "the cover letter lists the patches out of order"


# Targets of upstream's Makefile, which the PR text asks to run in the upstream checkout (and check_copies.py
# names in its output).
UPSTREAM_TARGETS = {"fixup", "fix-copies", "quality", "style", "repo-consistency"}


def test_make_targets_named_in_the_docs_exist():
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.MULTILINE)) | UPSTREAM_TARGETS
    for doc in DOCS.glob("*.md"):
        for target in re.findall(r"`make ([a-z][a-z-]*)", doc.read_text()):
            assert target in targets, f"{doc.name} names `make {target}`, which the Makefile does not define"
