"""Score the device lint's default rules against hand labels on public repositories.

The labels (scripts/lint_corpus/labels.csv) say, for lines of public training code, whether each is
a hazard by the labelling policy (README, "Device lint") or not: every line the lint reported when the
labels were made, and every hazard it missed, found by grep. The code itself is not here: fetch each
repository of scripts/lint_corpus/repos.csv at its commit into CORPUS/<owner>+<name>/, e.g.

    git clone -q https://github.com/OWNER/NAME CORPUS/OWNER+NAME && git -C CORPUS/OWNER+NAME checkout -q COMMIT

then run, from the template root:

    python scripts/lint_score.py CORPUS [--set held-out-4] [--by-repo] [--every-hazard]

It runs the lint over each repository as one tree (calls between its files are followed), compares
the findings with the labels, and prints precision and recall per rule and overall, per set (recall of
the hazards of the rules run; `--every-hazard`: of every labelled hazard, e.g. DEV007's too). A
finding nobody labelled is listed and makes the exit status 1: figures with unlabelled findings in
them would not be the measured ones. Exit 2: a missing repository or a bad labels file.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

TEMPLATE = Path(__file__).resolve().parents[1]
DATA = TEMPLATE / "scripts" / "lint_corpus"
LINT = TEMPLATE / "{{cookiecutter.project_slug}}" / "tools" / "devicelint.py"
LABELS = ("hazard", "not", "unsure")


class Repo(NamedTuple):
    """One labelled repository: its set (tuning or held-out), GitHub name and commit."""

    set: str
    repo: str
    commit: str


def load_lint(path: Path = LINT):
    """The lint module from its file (it is one standard-library file, outside any package)."""
    spec = importlib.util.spec_from_file_location("devicelint", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["devicelint"] = module
    spec.loader.exec_module(module)
    return module


def read_repos(path: Path) -> list[Repo]:
    """repos.csv: set, repo, commit."""
    with path.open(newline="") as handle:
        return [Repo(row["set"], row["repo"], row["commit"]) for row in csv.DictReader(handle)]


def read_labels(path: Path) -> dict[tuple[str, str, int, str], tuple[str, str]]:
    """labels.csv: (repo, file, line, rule) -> (label, reason); ValueError names a bad row."""
    labels = {}
    with path.open(newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=2):
            if row["label"] not in LABELS or not row["reason"].strip() or not row["rule"].startswith("DEV"):
                raise ValueError(f"{path.name}:{number}: label must be one of {LABELS}, with a rule and a reason")
            key = (row["repo"], row["file"], int(row["line"]), row["rule"])
            if key in labels:
                raise ValueError(f"{path.name}:{number}: {key} is labelled twice")
            labels[key] = (row["label"], row["reason"])
    return labels


def findings(lint, folder: Path, select: list[str] | None = None) -> set[tuple[str, int, str]]:
    """(file relative to the repository, line, rule) of each finding (default rules unless `select`); one per line."""
    found = lint.lint_paths([str(folder)], errors=[], select=select)
    return {(Path(f.path).relative_to(folder).as_posix(), f.line, f.code) for f in found if f.code != "DEV000"}


def score(repo: Repo, found: set, labels: dict, rules: set[str] | None = None) -> tuple[Counter, list[str]]:
    """Counts per (rule, outcome) for one repository (`rules`: only these), and its findings with no label."""
    counts: Counter = Counter()
    unlabelled = []
    for file, line, rule in sorted(found):
        label = labels.get((repo.repo, file, line, rule), ("", ""))[0]
        if not label:
            unlabelled.append(f"{repo.repo}/{file}:{line}: {rule}")
        elif label != "unsure":
            counts[rule, "right" if label == "hazard" else "false alarm"] += 1
    for (name, file, line, rule), (label, _) in labels.items():
        if name == repo.repo and label == "hazard" and (file, line, rule) not in found and rule in (rules or {rule}):
            counts[rule, "missed"] += 1
    return counts, unlabelled


def table(title: str, counts: Counter) -> list[str]:
    """A Markdown table: per rule and overall, right / false alarms / missed, precision and recall."""
    rows = [f"### {title}", "", "| rule | right | false alarms | missed | precision | recall |",
            "|---|---|---|---|---|---|"]
    rules = sorted({rule for rule, _ in counts})
    for rule in [*rules, "all"]:
        right, wrong, missed = (sum(n for (r, o), n in counts.items() if rule in (r, "all") and o == outcome)
                                for outcome in ("right", "false alarm", "missed"))
        precision = f"{right / (right + wrong):.2f}" if right + wrong else "–"
        recall = f"{right / (right + missed):.2f}" if right + missed else "–"
        name = "**all**" if rule == "all" else rule
        rows.append(f"| {name} | {right} | {wrong} | {missed} | {precision} | {recall} |")
    return rows + [""]


def main(argv: list[str] | None = None) -> int:
    """Score every repository present in CORPUS; print one table per set (and per repository on request)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="folder holding OWNER+NAME/ checkouts")
    parser.add_argument("--set", help="score only these sets, comma-separated (tuning, held-out-1, ...)")
    parser.add_argument("--by-repo", action="store_true", help="a table per repository too")
    parser.add_argument("--select", help="score these rules instead of the default ones (e.g. DEV007, opt-in)")
    parser.add_argument("--every-hazard", action="store_true",
                        help="count as missed every labelled hazard the run does not report, whatever its rule "
                             "(recall of every hazard the policy names, not only those of the rules run)")
    parser.add_argument("--data", type=Path, default=DATA, help="folder with repos.csv and labels.csv")
    parser.add_argument("--lint", type=Path, default=LINT, help="the devicelint.py to score")
    args = parser.parse_args(argv)
    try:
        sets = set(args.set.split(",")) if args.set else None
        repos = [r for r in read_repos(args.data / "repos.csv") if sets is None or r.set in sets]
        labels = read_labels(args.data / "labels.csv")
    except (OSError, ValueError, KeyError) as error:
        print(f"lint_score: {error}", file=sys.stderr)
        return 2
    missing = [r.repo for r in repos if not (args.corpus / r.repo.replace("/", "+")).is_dir()]
    if missing:
        print(f"lint_score: not in {args.corpus}: {', '.join(missing)} (see the docstring)", file=sys.stderr)
        return 2
    lint = load_lint(args.lint)
    select = [c.strip().upper() for c in args.select.split(",")] if args.select else None
    rules = set(select) if select else {code for code, rule in lint.RULES.items() if rule.default}
    per_set: dict[str, Counter] = defaultdict(Counter)
    unlabelled: list[str] = []
    for repo in repos:
        found = findings(lint, args.corpus / repo.repo.replace("/", "+"), select)
        counts, loose = score(repo, found, labels, None if args.every_hazard else rules)
        per_set[repo.set] += counts
        unlabelled += loose
        if args.by_repo:
            print("\n".join(table(f"{repo.repo} at {repo.commit[:8]} ({repo.set})", counts)))
    for name, counts in per_set.items():
        print("\n".join(table(f"{name}: {sum(r.set == name for r in repos)} repositories", counts)))
    for line in unlabelled:
        print(f"unlabelled: {line}")
    return 1 if unlabelled else 0


if __name__ == "__main__":
    sys.exit(main())
