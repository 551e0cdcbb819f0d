"""Builds the benchmark executable a bench/*.py script runs: the bench_* targets are not part of
`all` (the test command does not need them), so each script asks CMake for its own, which is a
no-op when it is up to date. The build directory must be configured (scripts/build.sh or
scripts/test.sh did that)."""
import os
import subprocess
import sys


def ensure(build_dir, target):
    """Path of build_dir/bench/<target>, built first; exits with CMake's message on failure."""
    exe = os.path.join(build_dir, "bench", target)
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        sys.exit(f"{build_dir} is not a configured build directory: run scripts/build.sh first")
    r = subprocess.run(["cmake", "--build", build_dir, "--target", target], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(exe):
        sys.exit(f"building {target} failed:\n{(r.stdout + r.stderr).strip()[-3000:]}")
    return exe
