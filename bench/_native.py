"""What the native-resolution towers' benchmarks (native_speed.py, native_foveated.py,
native_mixed.py, native_resize_check.py) share: the photo they feed at a given size, the cosine they
judge fovea's outputs against a reference by, and random tower weights."""
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


def random_weights(shapes, gen):
    """Random float32 torch tensors of `shapes` ({name: shape}) from torch generator `gen`: matrices
    scaled by 1/sqrt(fan-in), norm weights near 1, biases small (a tower whose activations stay
    in range through many blocks)."""
    import torch  # the benchmarks that call this have torch; the others need not

    sd = {}
    for name, shape in shapes.items():
        if len(shape) >= 2:
            t = torch.randn(shape, generator=gen) / float(np.sqrt(np.prod(shape[1:])))
        elif name.endswith("weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            t = 0.05 * torch.randn(shape, generator=gen)
        sd[name] = t.to(torch.float32)
    return sd
