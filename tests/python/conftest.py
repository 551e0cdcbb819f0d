# pytest configuration for the Python binding's tests (test_py_*.py), run by CTest with Debian's
# /usr/bin/python3 -m pytest. CTest passes the build's paths in the environment:
#   PYTHONPATH=<build>/python  FOVEA_CLI=<build>/fovea  FOVEA_SOURCE_DIR=<source>
# The other tests/python/test_*.py are scripts (run with --cli/--source/--work), not pytest tests.
import os

def pytest_ignore_collect(collection_path, config):
    # Only the binding's tests are pytest tests.
    name = collection_path.name
    return name.startswith("test_") and name.endswith(".py") and not name.startswith("test_py_")
