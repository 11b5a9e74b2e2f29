"""Prints the installed TensorFlow's major.minor version ('2.21'), read from the package metadata
without importing TensorFlow: the Makefile installs the tf-keras that matches it."""

import importlib.metadata
import re
import sys

for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        continue
    print(re.match(r"\d+\.\d+", version)[0])  # type: ignore[index]
    sys.exit(0)
sys.exit("no TensorFlow installed")
