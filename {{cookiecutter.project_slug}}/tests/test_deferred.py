"""deferred(): the CLIs' stand-in for a module imported once the flags passed behaves as that module, for tests too."""

from {{ cookiecutter.package_name }} import errors
from {{ cookiecutter.package_name }}.deferred import deferred


def test_a_patch_through_a_stand_in_is_made_and_undone_on_the_module(monkeypatch):
    """monkeypatch.setattr on a stand-in patches the module, and undo gives the module its own value back (pytest 9.2
    reads the value to restore from the target's __dict__: a stand-in's own would hold nothing, and undo would delete
    the module's attribute)."""
    stand_in = deferred("{{ cookiecutter.package_name }}.errors")
    original = errors.one_line
    assert stand_in.__dict__ is errors.__dict__
    monkeypatch.setattr(stand_in, "one_line", lambda error: "patched")
    assert errors.one_line(ValueError()) == "patched"
    monkeypatch.undo()
    assert errors.one_line is original
