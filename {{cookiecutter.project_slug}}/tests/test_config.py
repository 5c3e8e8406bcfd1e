"""config.DEVICE is resolved once, from the flag, else the environment variable, else the default."""

import pytest
import torch

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.devkit import DeviceError


def test_flag_wins_over_environment_variable(monkeypatch):
    """An explicit --device beats the environment variable."""
    monkeypatch.setenv(config.DEVICE_ENV_VAR, "not-a-device")
    assert config.configure_device("cpu") == torch.device("cpu")
    assert config.DEVICE == torch.device("cpu")


def test_environment_variable_is_used_without_a_flag(monkeypatch):
    """With no flag, the environment variable decides, and a bad value there is refused too."""
    monkeypatch.setenv(config.DEVICE_ENV_VAR, "meta")
    assert config.configure_device(None) == torch.device("meta")
    monkeypatch.setenv(config.DEVICE_ENV_VAR, "gpu")
    with pytest.raises(DeviceError, match="'gpu'"):
        config.configure_device(None)


def test_generation_default_applies_last(monkeypatch):
    """With neither flag nor variable, the default chosen at generation is the spec."""
    monkeypatch.delenv(config.DEVICE_ENV_VAR, raising=False)
    assert config.device_spec(None) == config.DEFAULT_DEVICE


def test_train_config_is_plain_data():
    """The training config serialises to plain values (JSON and weights_only checkpoints): scalars, lists of them."""
    plain = (str, int, float, bool, type(None))
    values = config.TrainConfig().to_dict()
    assert all(isinstance(v, plain) or (isinstance(v, list) and all(isinstance(i, plain) for i in v))
               for v in values.values())
