#!/usr/bin/env python3
"""Writes tests/data/torch/: PyTorch checkpoints (torch.save's formats) for fovea's reader
(src/io/torch_checkpoint.cpp) and the encoder's loading of .pt / .pth / pytorch_model.bin files.

The weights are the encoder fixtures' own (tests/data/encoder/*/model.safetensors, read with
scripts/fovea_testio/), so a test can require that fovea encodes a .pth exactly as it
encodes the safetensors file. Run with Debian's torch and torchvision (/usr/bin/python3); the
outputs are committed, the test suite never runs torch.

    /usr/bin/python3 scripts/make_torch_checkpoints.py [--out tests/data/torch]

What each file is:
  torchvision/vit.pth              torch.save(model.state_dict()) of the torchvision fixture
  torchvision/checkpoint.pth       a training checkpoint: {"model": DataParallel's state dict
                                   ("module." names), "epoch", "args": argparse.Namespace,
                                   "optimizer": {...}}
  torchvision/module.pt            torch.save(model): the whole pickled nn.Module
  torchvision/vit_legacy.pth       the state dict in torch.save's legacy (pre-1.6) format
  torchvision/config.json          the fixture's (torchvision files carry no head count)
  hf_vit/                          the HF ViT fixture as sharded pytorch_model-0000N-of-00002.bin
                                   with pytorch_model.bin.index.json, config.json and
                                   preprocessor_config.json: an HF directory without safetensors
  tensors.pt                       dtypes (F32 F16 BF16 F64 I64 I32 U8 BOOL), a transposed view, a
                                   slice at a storage offset, two views of one storage, a 0-d
                                   tensor, an empty tensor, nested dicts
  tensors_expected.safetensors     those tensors, contiguous, for the test to compare with
  evil.pt                          a state dict plus an object whose __reduce__ is os.system(...):
                                   fovea must read the tensor and never call anything
  zip64.pt                         tensors.pt's entries rewritten as ZIP64 (every size and offset
                                   in the ZIP64 extra fields and end records), as torch writes
                                   archives over 4 GiB: the reader must find the same tensors
  legacy.pt                        a small dict in the legacy format (fuzz seed)
  script.pt                        torch.jit.save of a scripted module (TorchScript)
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fovea_testio import safetensors  # noqa: E402
from fovea_testio.safetensors import read, to_torch  # noqa: E402

ROOT = os.path.dirname(HERE)
ENC = os.path.join(ROOT, "tests", "data", "encoder")


def state_dict_of(fixture):
    tensors, _ = read(os.path.join(ENC, fixture, "model.safetensors"))
    return {k: to_torch(v).clone() for k, v in tensors.items()}


class Evil:
    """What a hostile checkpoint carries: unpickling it with pickle.load would run a command."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/fovea-torch-checkpoint-pwned",))


def write_zip64(src, dst):
    """Rewrites the stored ZIP archive `src` with every 32-bit size and offset saturated
    (0xFFFFFFFF) and the real values in ZIP64 extra fields, plus the ZIP64 end record and its
    locator: the layout of an archive too big for 32-bit fields, at a size a test can hold.
    Data offsets stay 64-byte aligned (torch aligns storages; the reader maps them in place)."""
    import struct
    import zipfile
    zin = zipfile.ZipFile(src)
    out = bytearray()
    central = []
    for info in zin.infolist():
        data = zin.read(info.filename)
        name = info.filename.encode()
        z64 = struct.pack("<HHQQ", 1, 16, len(data), len(data))  # local: sizes only
        base = len(out) + 30 + len(name) + len(z64) + 4
        pad = (-base) % 64
        pad_field = struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # torch's "FB" padding field
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0, zipfile.crc32(data), 0xFFFFFFFF,
                           0xFFFFFFFF, len(name), len(z64) + len(pad_field))
        out += name + z64 + pad_field + data
        central.append((name, zipfile.crc32(data), len(data), offset))
    cd_start = len(out)
    for name, crc, size, offset in central:
        z64 = struct.pack("<HHQQQ", 1, 24, size, size, offset)
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                           len(name), len(z64), 0, 0, 0, 0, 0xFFFFFFFF)
        out += name + z64
    cd_size = len(out) - cd_start
    z64_end = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, len(central), len(central), cd_size, cd_start)
    out += struct.pack("<IIQI", 0x07064b50, 0, z64_end, 1)
    out += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(out)
    # Python's own reader agrees it is a ZIP64 archive with the same entries.
    assert zipfile.ZipFile(dst).namelist() == zin.namelist()
    for n in zin.namelist():
        assert zipfile.ZipFile(dst).read(n) == zin.read(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "torch"))
    out = ap.parse_args().out
    torch.manual_seed(0)

    # torchvision: a state dict, a training checkpoint, a pickled module.
    tv = os.path.join(out, "torchvision")
    os.makedirs(tv, exist_ok=True)
    sd = state_dict_of("torchvision")
    torch.save(sd, os.path.join(tv, "vit.pth"))
    torch.save(sd, os.path.join(tv, "vit_legacy.pth"), _use_new_zipfile_serialization=False)
    shutil.copy(os.path.join(ENC, "torchvision", "config.json"), os.path.join(tv, "config.json"))
    ns = argparse.Namespace(lr=0.1, model="vit_tiny", epochs=3)
    torch.save({"model": {"module." + k: v for k, v in sd.items()}, "epoch": 3, "args": ns,
                "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
                "best_acc": np.float64(0.5)},
               os.path.join(tv, "checkpoint.pth"))
    D = sd["class_token"].shape[-1]
    P = sd["conv_proj.weight"].shape[-1]
    G = int(round((sd["encoder.pos_embedding"].shape[1] - 1) ** 0.5))
    L = len({k.split(".")[2] for k in sd if k.startswith("encoder.layers.")})
    M = sd["encoder.layers.encoder_layer_0.mlp.0.weight"].shape[0]
    C = sd["heads.head.weight"].shape[0]
    heads = json.load(open(os.path.join(tv, "config.json")))["num_heads"]
    model = torchvision.models.VisionTransformer(image_size=G * P, patch_size=P, num_layers=L, num_heads=heads,
                                                 hidden_dim=D, mlp_dim=M, num_classes=C)
    model.load_state_dict(sd)
    torch.save(model, os.path.join(tv, "module.pt"))

    # HF ViT as a sharded pytorch_model.bin directory.
    hv = os.path.join(out, "hf_vit")
    os.makedirs(hv, exist_ok=True)
    hsd = state_dict_of("hf_vit")
    names = list(hsd)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = "pytorch_model-%05d-of-00002.bin" % (i + 1)
        torch.save({k: hsd[k] for k in part}, os.path.join(hv, fname))
        weight_map.update({k: fname for k in part})
    with open(os.path.join(hv, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size() for t in hsd.values())},
                   "weight_map": weight_map}, f, indent=2)
    for name in ("config.json", "preprocessor_config.json"):
        shutil.copy(os.path.join(ENC, "hf_vit", name), os.path.join(hv, name))

    # Dtypes and views.
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7
    shared = torch.randn(10)
    tensors = {
        "f32": torch.randn(3, 5),
        "f16": torch.randn(2, 3).half(),
        "bf16": torch.randn(2, 3).bfloat16(),
        "f64": torch.randn(4).double(),
        "i64": torch.arange(-3, 3, dtype=torch.int64),
        "i32": torch.tensor([7, -8, 9], dtype=torch.int32),
        "u8": torch.tensor([0, 128, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "transposed": base.t(),
        "sliced": base[1:3, 2:5],
        "shared_a": shared[2:6],
        "shared_b": shared[5:9],
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }
    saved = dict(tensors)
    saved["nested"] = {"inner": torch.ones(2, 2) * 2, "deeper": {"leaf": torch.full((3,), -1.0)}}
    torch.save(saved, os.path.join(out, "tensors.pt"))
    flat = dict(tensors)
    flat["nested.inner"] = saved["nested"]["inner"]
    flat["nested.deeper.leaf"] = saved["nested"]["deeper"]["leaf"]
    safetensors.write(os.path.join(out, "tensors_expected.safetensors"), safetensors.from_torch(flat), compact=False)

    write_zip64(os.path.join(out, "tensors.pt"), os.path.join(out, "zip64.pt"))

    # Hostile and refused files.
    torch.save({"weight": torch.ones(2, 3), "payload": Evil()}, os.path.join(out, "evil.pt"))
    torch.save({"weight": torch.ones(2, 3)}, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(out, "script.pt"))
    for root, _, files in sorted(os.walk(out)):
        for f in sorted(files):
            p = os.path.join(root, f)
            print("%8d  %s" % (os.path.getsize(p), os.path.relpath(p, ROOT)))


if __name__ == "__main__":
    main()
