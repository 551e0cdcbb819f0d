"""Shared by the binding's pytest tests: paths from CTest, small fixture images."""
import os
import subprocess

import numpy as np

CLI = os.environ.get("FOVEA_CLI", "build/fovea")
SOURCE = os.environ.get("FOVEA_SOURCE_DIR", ".")
ASTRONAUT = os.path.join(SOURCE, "data", "astronaut.jpg")


def photo(seed: int, h: int = 200, w: int = 264) -> np.ndarray:
    """A crop/flip of the astronaut sample (real photo statistics), [h, w, 3] uint8."""
    from PIL import Image
    img = np.asarray(Image.open(ASTRONAUT).convert("RGB"))
    rng = np.random.default_rng(seed)
    y = int(rng.integers(0, img.shape[0] - h))
    x = int(rng.integers(0, img.shape[1] - w))
    out = img[y:y + h, x:x + w]
    if seed % 2:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


def save_png(arr: np.ndarray, path: str) -> str:
    from PIL import Image
    Image.fromarray(arr).save(path)
    return path


def cli(*args, check=True):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"fovea {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r
