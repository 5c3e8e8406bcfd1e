"""scripts/lint_score.py scores the device lint against hand labels; its data holds together."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]


def load_scorer():
    """scripts/lint_score.py as a module."""
    spec = importlib.util.spec_from_file_location("lint_score", TEMPLATE / "scripts" / "lint_score.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lint_score"] = module
    spec.loader.exec_module(module)
    return module


def test_every_label_names_a_listed_repository_at_its_commit_with_a_reason() -> None:
    """labels.csv parses (known labels, rules, reasons, no duplicates) and agrees with repos.csv."""
    scorer = load_scorer()
    data = TEMPLATE / "scripts" / "lint_corpus"
    repos = {(r.repo, r.commit) for r in scorer.read_repos(data / "repos.csv")}
    labels = scorer.read_labels(data / "labels.csv")
    with (data / "labels.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(labels) == len(rows) > 0
    assert {(row["repo"], row["commit"]) for row in rows} <= repos
    assert {row["set"] for row in rows} <= {"tuning", *(f"held-out-{n}" for n in range(1, 17))}


def write_corpus(tmp_path: Path, label_rows: list[str]) -> tuple[Path, Path]:
    """A one-repository corpus and its data folder: a hazard, a false alarm and a missed line."""
    corpus, data = tmp_path / "corpus", tmp_path / "data"
    (corpus / "me+demo").mkdir(parents=True)
    (corpus / "me+demo" / "train.py").write_text(
        "import torch\n"
        "device = torch.device('cuda')\n"
        "state = torch.load('x.pt', map_location='cpu')\n"
        "args = ('cuda:0',) + args\n")
    data.mkdir()
    (data / "repos.csv").write_text("set,repo,commit\nheld-out-1,me/demo,abc\n")
    (data / "labels.csv").write_text("set,repo,commit,file,line,rule,label,reason\n" + "".join(label_rows))
    return corpus, data


def test_scores_count_right_false_alarms_and_misses(tmp_path: Path, capsys) -> None:
    """A labelled hazard found is right, a `not` found is a false alarm, a hazard not found is missed."""
    corpus, data = write_corpus(tmp_path, [
        "held-out-1,me/demo,abc,train.py,2,DEV002,hazard,hard-coded device\n",
        "held-out-1,me/demo,abc,train.py,3,DEV004,not,a file this code wrote\n",
        "held-out-1,me/demo,abc,train.py,4,DEV002,hazard,a device string the lint misses\n",
    ])
    assert load_scorer().main([str(corpus), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "| DEV002 | 1 | 0 | 1 | 1.00 | 0.50 |" in out
    assert "| DEV004 | 0 | 1 | 0 | 0.00 | – |" in out
    assert "| **all** | 1 | 1 | 1 | 0.50 | 0.50 |" in out


def test_an_unlabelled_finding_fails_the_score(tmp_path: Path, capsys) -> None:
    """Figures with unlabelled findings in them would not be the measured ones: exit 1, the line named."""
    corpus, data = write_corpus(tmp_path, ["held-out-1,me/demo,abc,train.py,2,DEV002,hazard,hard-coded\n"])
    assert load_scorer().main([str(corpus), "--data", str(data)]) == 1
    assert "unlabelled: me/demo/train.py:3: DEV004" in capsys.readouterr().out


def test_a_missing_checkout_or_a_bad_label_is_exit_2(tmp_path: Path, capsys) -> None:
    """No checkout of a listed repository, or a label without a reason: one line on stderr, exit 2."""
    corpus, data = write_corpus(tmp_path, ["held-out-1,me/demo,abc,train.py,2,DEV002,hazard,\n"])
    assert load_scorer().main([str(corpus), "--data", str(data)]) == 2
    assert "label must be one of" in capsys.readouterr().err
    (data / "labels.csv").write_text("set,repo,commit,file,line,rule,label,reason\n")
    assert load_scorer().main([str(tmp_path / "nowhere"), "--data", str(data)]) == 2
    assert "not in" in capsys.readouterr().err


def test_set_picks_the_sets_to_score_and_needs_only_their_checkouts(tmp_path: Path, capsys) -> None:
    """`--set a,b` scores those sets; a listed repository of another set need not be checked out."""
    corpus, data = write_corpus(tmp_path, ["held-out-1,me/demo,abc,train.py,2,DEV002,hazard,hard-coded\n",
                                           "held-out-1,me/demo,abc,train.py,3,DEV004,hazard,a user's file\n"])
    with (data / "repos.csv").open("a") as handle:
        handle.write("held-out-4,me/absent,def\n")
    scorer = load_scorer()
    assert scorer.main([str(corpus), "--data", str(data)]) == 2
    assert "not in" in capsys.readouterr().err
    assert scorer.main([str(corpus), "--data", str(data), "--set", "tuning,held-out-1"]) == 0
    out = capsys.readouterr().out
    assert "### held-out-1: 1 repositories" in out and "held-out-4" not in out


def test_lint_speed_prints_files_per_cpu_second_of_the_lint_as_a_process(tmp_path: Path, capsys) -> None:
    """scripts/lint_speed.py runs the lint as users do and prints the figure; a missing folder is exit 2."""
    spec = importlib.util.spec_from_file_location("lint_speed", TEMPLATE / "scripts" / "lint_speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import torch\nx = torch.ones(2).to(device)\n")
    (tmp_path / "pkg" / ".venv").mkdir()
    (tmp_path / "pkg" / ".venv" / "b.py").write_text("x = 1\n")
    assert speed.main([str(tmp_path / "pkg"), "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "devicelint.py: 1 files; CPU seconds per run" in out and "files per CPU-second" in out
    assert speed.main([str(tmp_path / "nowhere")]) == 2
    assert "no such path" in capsys.readouterr().err


def test_every_hazard_counts_the_misses_of_rules_that_did_not_run(tmp_path: Path, capsys) -> None:
    """A labelled hazard of an opt-in rule (DEV007) is missed only when recall is of every hazard the policy names."""
    corpus, data = write_corpus(tmp_path, ["held-out-1,me/demo,abc,train.py,2,DEV002,hazard,hard-coded\n",
                                           "held-out-1,me/demo,abc,train.py,3,DEV004,hazard,a user's file\n",
                                           "held-out-1,me/demo,abc,train.py,9,DEV007,hazard,a CPU tensor in forward\n"])
    scorer = load_scorer()
    assert scorer.main([str(corpus), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "DEV007" not in out and "| **all** | 2 | 0 | 0 | 1.00 | 1.00 |" in out
    assert scorer.main([str(corpus), "--data", str(data), "--every-hazard"]) == 0
    out = capsys.readouterr().out
    assert "| DEV007 | 0 | 0 | 1 | – | 0.00 |" in out and "| **all** | 2 | 0 | 1 | 1.00 | 0.67 |" in out
