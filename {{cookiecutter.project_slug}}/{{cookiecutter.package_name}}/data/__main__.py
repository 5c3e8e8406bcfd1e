"""`python -m {{ cookiecutter.package_name }}.data check DATA`: the data check (data/check.py)."""

import sys

from .check import main  # the imported module's main, not a copy run as __main__: workers find _probe by name

if __name__ == "__main__":
    sys.exit(main())
