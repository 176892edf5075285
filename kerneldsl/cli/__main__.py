"""``python -m kerneldsl.cli``: the ``kerneldsl`` command."""

import sys

from . import main

if __name__ == "__main__":  # importing the module (as the package's import walks do) runs nothing
    sys.exit(main())
