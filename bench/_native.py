"""What the native-resolution towers' benchmarks (native_speed.py, native_foveated.py,
native_resize_check.py) share: the photo they feed at a given size, and the cosine they judge
fovea's outputs against a reference by."""
import numpy as np
from PIL import Image

SKIMAGE_DATA = "/usr/lib/python3/dist-packages/skimage/data"


def photo(w, h, name="coffee"):
    """skimage's photo `name` resized to w x h (PIL bicubic), as an [h, w, 3] uint8 array."""
    src = Image.open(f"{SKIMAGE_DATA}/{name}.png").convert("RGB")
    return np.asarray(src.resize((w, h), Image.BICUBIC))


def cosine(a, b):
    """Cosine of two arrays taken as flat vectors, in float64."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))
