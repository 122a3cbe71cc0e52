"""Docs and code cite papers by author and year, never by files outside the repository (issue 15).

The papers used to be cited by the names of text extractions that only the
original authors had (a nickname such as the one built below, a notes file
of corrections); a reader of the repository could open none of them.  The
bibliography (docs/bibliography.md) and the corrections section of
docs/maths.md replace them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("rankopt", "docs", "README.md", "benchmarks", "tests", "plugins")
NICKNAMES = [
    "qs-rank" + "-losses",
    "efficient" + "-ap-svm",
    "latent" + "-ap-svm",
    "high-order" + "-ranking(?!-results)",
]
FORBIDDEN = re.compile(
    "|".join([*NICKNAMES, r"NOTES" + r"\.md", r"papers/", r"\b[\w-]+-(?:ranking|svm|losses)\.txt\b"])
)


def tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", *SCANNED], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): scan the directories
        paths = [
            p
            for name in SCANNED
            for p in ([ROOT / name] if (ROOT / name).is_file() else (ROOT / name).rglob("*"))
            if p.is_file()
        ]
    else:
        paths = [ROOT / line for line in listed.stdout.splitlines()]
    this_file = Path(__file__).resolve()  # it spells the forbidden references out, to test the check
    return [
        p
        for p in paths
        if p.resolve() != this_file
        and p.suffix in {".py", ".pyx", ".pxd", ".md", ".toml", ".txt", ".cfg", ".json", ".jsonl"}
        and "build" not in p.relative_to(ROOT).parts
        and p.exists()
    ]


def test_no_reference_to_paper_nicknames_or_files_outside_the_repository():
    found = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "cite papers by author and year (docs/bibliography.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "see ``qs-rank-losses`` §4.1",
        "(w₂ = 0, papers/NOTES.md)",
        "`latent-ap-svm.txt` Table 1",
        "with NOTES.md's correction",
        "`high-order-ranking` eq. 7",
    ],
)
def test_the_check_catches_each_kind_of_reference(line):
    assert FORBIDDEN.search(line)


def test_links_to_the_results_pages_are_not_nicknames():
    assert not FORBIDDEN.search("[results on Cora](docs/high-order-results.md)")


def test_bibliography_gives_authors_title_venue_and_year_and_maths_states_the_corrections():
    bibliography = " ".join((ROOT / "docs" / "bibliography.md").read_text(encoding="utf-8").split())
    for citation, title, venue in [
        ("Mohapatra et al. (2018)", "Efficient Optimization for Rank-based Loss Functions", "CVPR"),
        ("Mohapatra et al. (2014)", "Efficient Optimization for Average Precision SVM", "NIPS"),
        ("Dokania et al. (2014)", "Learning to Rank Using High-Order Information", "ECCV"),
        ("Behl et al. (2015)", "Optimizing Average Precision using Weakly Supervised Data", "Pattern Analysis"),
    ]:
        assert f"**{citation}**" in bibliography and title in bibliography and venue in bibliography
    maths = (ROOT / "docs" / "maths.md").read_text(encoding="utf-8")
    corrections = maths.split("## Corrections to the papers", 1)[1]
    for fragment in ("Lemma 6", "Remark 1", "§4.2", "Algorithm 3, step 3", "§3.3", "Prop. 5", "eq. (18)", "eq. (14)"):
        assert fragment in corrections, fragment
