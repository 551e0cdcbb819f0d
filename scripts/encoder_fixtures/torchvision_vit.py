"""torchvision's VisionTransformer (vit_b_16's layout, reduced), its own module as the reference."""
import json
import os

import torch
import torchvision

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, D, G, HEADS, IMAGENET_MEAN, IMAGENET_STD, LAYERS, MLP, P, close, f32, foveated_tokens, patches_of,
    randomize, raw_image, sample_positions)


def make_torchvision(out, gen, raw_gen):
    os.makedirs(out, exist_ok=True)
    model = torchvision.models.VisionTransformer(image_size=G * P, patch_size=P, num_layers=LAYERS,
                                                 num_heads=HEADS, hidden_dim=D, mlp_dim=MLP, num_classes=10)
    model = model.double().eval()
    randomize(model, gen)
    # torchvision checkpoints carry no config; fovea reads the head count from config.json when
    # present (else it guesses from the width), so the fixture states it.
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["torchvision.models.VisionTransformer"], "num_heads": HEADS}, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F32")

    cases, meta = {}, {}

    def module_forward(px):  # VisionTransformer.forward up to the classifier, in its own code
        x = model._process_input(px)
        x = torch.cat([model.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = model.encoder(x)
        return x, model.heads(x[:, 0])

    def token_forward(patches, pos, width, height):
        x = model.conv_proj(patches).flatten(1)
        pe = model.encoder.pos_embedding[0]
        x = x + sample_positions(pe[1:], pos, width, height)
        x = torch.cat([model.class_token[0] + pe[:1], x], dim=0).unsqueeze(0)
        x = model.encoder.ln(model.encoder.layers(x))
        return x, model.heads(x[:, 0])

    def record(name, patches, pos, width, height, hidden, logits):
        cases[f"{name}.patches"] = f32(patches)
        cases[f"{name}.positions"] = f32(pos)
        cases[f"{name}.last_hidden"] = f32(hidden[0, 1:])
        cases[f"{name}.class_token"] = f32(hidden[0, :1])
        cases[f"{name}.pooled"] = f32(hidden[0, :1])
        cases[f"{name}.logits"] = f32(logits)
        meta[f"{name}.image_width"], meta[f"{name}.image_height"] = width, height

    with torch.no_grad():
        px = torch.randn((1, C, G * P, G * P), generator=gen, dtype=torch.float64)
        hidden, logits = module_forward(px)
        patches, pos = patches_of(px)
        h2, _ = token_forward(patches, pos, G * P, G * P)
        close(h2, hidden, "torchvision token-level forward vs VisionTransformer (native grid)")
        record("native", patches, pos, G * P, G * P, hidden, logits)
        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        hidden, logits = token_forward(patches, pos, W, H)
        record("foveated", patches, pos, W, H, hidden, logits)
        # From raw pixels through torchvision's own transforms (ToTensor + Normalize with
        # ImageNet's mean and std, as every torchvision ViT weight set's transforms()); no
        # preprocessor_config.json: fovea must know the ImageNet defaults itself.
        img = raw_image(raw_gen, out)
        import torchvision.transforms.functional as TF
        px = torch.from_numpy(img).permute(2, 0, 1).to(torch.float64) / 255.0
        px = TF.normalize(px, IMAGENET_MEAN, IMAGENET_STD).unsqueeze(0)
        hidden, logits = module_forward(px)
        patches, pos = patches_of(px)
        record("raw", patches, pos, G * P, G * P, hidden, logits)
        meta["raw.image"] = "image.png"
    meta["cases"] = "native,foveated,raw"
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)
