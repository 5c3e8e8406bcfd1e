"""`python -m {{ cookiecutter.package_name }}.data check DATA`: the data check (data/check.py)."""

import importlib
import sys

if __name__ == "__main__":
    # The imported module's main, not a copy run as __main__: worker processes find _probe under its real name.
    sys.exit(importlib.import_module(f"{__package__}.check").main())
