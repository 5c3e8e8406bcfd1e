"""The suite decides its own pretrained-weights situation: whatever the machine has cached or can download, a
fixture of any scope and a test find no weights and fetch none (tests/conftest.py, "The machine decides nothing")."""

import os

import pytest
import torch

from {{ cookiecutter.package_name }}.model import resolve_pretrained, weights_file

BACKBONE = "{{ cookiecutter.backbone }}"


def _pretrained_default() -> tuple[str, bool, str | None]:
    """Where torch hub looks for the backbone's weights, and what the project's pretrained default decides."""
    return (weights_file(BACKBONE), *resolve_pretrained(BACKBONE, requested=True, explicit=False))


def _fetch(tmp_path) -> str:
    """What happens when torch hub is asked to fetch a file (a file:// URL: no network needed to see it fetched)."""
    (tmp_path / "weights.pth").write_bytes(b"not a checkpoint")
    try:
        torch.hub.load_state_dict_from_url((tmp_path / "weights.pth").as_uri(), model_dir=str(tmp_path / "hub"))
    except OSError as error:
        return f"refused: {error}"
    except Exception as error:  # the file was fetched, then could not be unpickled
        return f"fetched: {error!r}"
    return "fetched"


@pytest.fixture(scope="module")
def module_scope(tmp_path_factory):
    """What a module-scoped fixture sees: it runs before every function-scoped one, offline_weights among them."""
    return _pretrained_default(), _fetch(tmp_path_factory.mktemp("fetch"))


def test_a_module_scoped_fixture_finds_no_cached_weights_and_trains_from_scratch(module_scope):
    """A reference run made by a module-scoped fixture starts where the runs compared with it start (issue 46)."""
    (path, pretrained, note), _ = module_scope
    assert not os.path.exists(path) and not pretrained and note, path


def test_a_test_finds_no_cached_weights_and_trains_from_scratch():
    """The project's pretrained default falls back to training from scratch with a note, as offline."""
    path, pretrained, note = _pretrained_default()
    assert not os.path.exists(path) and not pretrained and note


def test_torch_hub_fetches_nothing_in_a_fixture_or_a_test(module_scope, tmp_path):
    """torch hub is offline for the whole session, not only inside each test."""
    assert module_scope[1].startswith("refused: "), module_scope[1]
    assert _fetch(tmp_path).startswith("refused: ")
