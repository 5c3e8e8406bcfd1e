"""Image classification with the device decided once and passed down."""

# The answer is embedded as a JSON string literal, which is also a valid Python literal, so no
# project name (quotes, backslashes, triple quotes) can break or inject into this file.
PROJECT_NAME = {{ cookiecutter.project_name | tojson }}
__version__ = "0.1.0"
