"""The generated docs hold together in every bake: each relative link in a Markdown file reaches a file the bake
has (and a heading there, when it names one), and the README stays short enough to read in one sitting.

A page that an answer removes must not be linked from a page that stays, unless the link is inside the same
Jinja condition; the richest answers and each tracker are baked to catch a link left outside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import CHOICES

README_WORDS = 2500  # issue 41: a default bake's README under 2,500 words
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)

ANSWER_SETS = {
    "default": {},
    "richest": {"multi_gpu": "ddp", "scheduler": "slurm", "tracker": "tensorboard", "gpu_decode": "yes",
                "fine_tuning": "yes"},
    **{f"tracker={value}": {"tracker": value} for value in CHOICES["tracker"] if value not in ("csv", "tensorboard")},
    "multi_gpu=dp": {"multi_gpu": "dp"},
}


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def dead_links(project: Path) -> list[str]:
    """`file: target` for every relative link whose file, or heading, the bake does not have."""
    dead = []
    for page in sorted(project.rglob("*.md")):
        if ".git" in page.relative_to(project).parts:
            continue
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not the bake's to keep
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or not linked.resolve().is_relative_to(project.resolve()):
                dead.append(f"{page.relative_to(project)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
                dead.append(f"{page.relative_to(project)}: {target} (no such heading)")
    return dead


@pytest.mark.parametrize("answers", ANSWER_SETS.values(), ids=ANSWER_SETS.keys())
def test_every_relative_link_in_the_docs_reaches_a_file_and_heading_the_bake_has(bakery, answers):
    """No README or docs link points at a page (or a heading) that these answers leave out."""
    project = bakery.project(**answers)
    assert (project / "docs").is_dir()
    assert dead_links(project) == []


def test_the_default_readme_reads_in_one_sitting_and_sends_the_rest_to_docs(bakery):
    """A default bake's README is under 2,500 words and links every docs page the bake has."""
    project = bakery.project()
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert len(readme.split()) < README_WORDS
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    pages = {f"docs/{page.name}" for page in (project / "docs").glob("*.md")}
    assert pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"
