"""{{ cookiecutter.project_name }}: image classification with the device decided once."""

__version__ = "0.1.0"
