"""Makes the package importable from the source tree when it is not installed (the
cargo test wrapper installs it with pip into a temporary directory and puts that on
PYTHONPATH instead, so the tests exercise the installed package)."""

import importlib.util
import os
import sys

if importlib.util.find_spec("ferrobay_s3") is None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
