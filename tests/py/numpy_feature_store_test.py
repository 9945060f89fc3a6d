#!/usr/bin/env python3
"""ctest driver: mltool_testgen writes a formula feature store (rows that do not fill a
page, dims that are not a power of two), then check_feature_store.py reads it with numpy.

Environment: MLTOOL_TESTGEN (the generator), DTYPE (float32 or float16).
"""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
with tempfile.TemporaryDirectory() as tmp:
    store = os.path.join(tmp, "features")
    subprocess.run([os.environ["MLTOOL_TESTGEN"], "features", store, "2049", "37", os.environ["DTYPE"]],
                   check=True)
    sys.exit(subprocess.run([sys.executable, os.path.join(here, "check_feature_store.py"), store]).returncode)
