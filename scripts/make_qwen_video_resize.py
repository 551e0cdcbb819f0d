#!/usr/bin/python3
"""Writes tests/data/encoder/qwen_video_resize.json: the sizes the Qwen-VL video processors resize
video frames to, for a sweep of frame sizes, aspect ratios, frame counts and pixel limits, by
the reference's rules (written from transformers' video_processing_qwen2_vl.py and
video_processing_qwen3_vl.py; plain Python, nothing else needed):

  * Qwen2-VL / Qwen2.5-VL (Qwen2VLVideoProcessor): every frame through the image processor's
    smart_resize within the video processor's limits (size.shortest_edge / longest_edge, which
    min_pixels / max_pixels override); the frame count only sets grid_t = ceil(frames / 2);
  * Qwen3-VL (Qwen3VLVideoProcessor): its own smart_resize over the video: fewer frames than
    temporal_patch_size is an error; a side below the factor is first scaled up (int(), both by
    max(factor / h, factor / w)); the area test is on round(frames / tp) * tp * h_bar * w_bar, the
    scale beta on frames * h * w; with cap_pixels_per_frame the budget becomes
    frames * max(min(768 * factor^2, longest_edge // frames), int(shortest_edge * 1.05)).

    /usr/bin/python3 scripts/make_qwen_video_resize.py [--out tests/data/encoder]

Rows: family, frames, height, width, min_pixels, max_pixels, cap, resized_height, resized_width,
grid_t (resized 0 x 0: the processor raises).
"""
import argparse
import json
import math
import os


def image_smart_resize(height, width, factor, min_pixels, max_pixels):
    """image_processing_qwen2_vl.smart_resize (what Qwen2VLVideoProcessor calls per frame)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen3_video_smart_resize(num_frames, height, width, temporal_factor, factor, min_pixels, max_pixels):
    """video_processing_qwen3_vl.smart_resize."""
    if num_frames < temporal_factor:
        raise ValueError("t must be larger than temporal_factor")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen3_video_resize(num_frames, height, width, shortest_edge, longest_edge, cap, factor=32, temporal=2):
    """Qwen3VLVideoProcessor.resize's size."""
    max_pixels = longest_edge
    if cap:
        frame_cap = 768 * factor * factor
        per_frame = max(min(frame_cap, longest_edge // num_frames), int(shortest_edge * 1.05))
        max_pixels = per_frame * num_frames
    return qwen3_video_smart_resize(num_frames, height, width, temporal, factor, shortest_edge, max_pixels)


SIZES = [(1, 1), (20, 300), (27, 27), (31, 64), (63, 17), (240, 320), (320, 240), (360, 640), (480, 854), (720, 1280),
         (1080, 1920), (1920, 1080), (2160, 3840), (1944, 2592), (100, 3000), (3000, 101), (50, 9999), (10, 2500),
         (224, 336), (224, 320), (448, 448), (601, 603), (333, 777)]
FRAMES = [1, 2, 3, 4, 5, 8, 16, 17, 32, 64, 100, 255, 768]
# (min, max): the video processors' defaults, Qwen2.5-VL-7B's preprocessor_config.json, Qwen3-VL's
# video_preprocessor_config.json, a small budget.
LIMITS = {"qwen2_vl": [(128 * 28 * 28, 28 * 28 * 768), (3136, 12845056), (3136, 200704)],
          "qwen3_vl": [(128 * 32 * 32, 32 * 32 * 768), (4096, 25165824), (65536, 16777216), (4096, 1048576)]}


def rows():
    out = []
    for h, w in SIZES:
        for mn, mx in LIMITS["qwen2_vl"]:
            for frames in (1, 2, 5, 16):
                try:
                    rh, rw = image_smart_resize(h, w, 28, mn, mx)
                except ValueError:
                    rh = rw = 0
                out.append(["qwen2_vl", frames, h, w, mn, mx, False, rh, rw, -(-frames // 2)])
        for mn, mx in LIMITS["qwen3_vl"]:
            for frames in FRAMES:
                for cap in (False, True):
                    try:
                        rh, rw = qwen3_video_resize(frames, h, w, mn, mx, cap)
                    except ValueError:
                        rh = rw = 0
                    out.append(["qwen3_vl", frames, h, w, mn, mx, cap, rh, rw, -(-frames // 2)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "encoder"))
    a = ap.parse_args()
    path = os.path.join(a.out, "qwen_video_resize.json")
    with open(path, "w") as f:
        json.dump({"columns": ["family", "frames", "height", "width", "min_pixels", "max_pixels", "cap_pixels_per_frame",
                               "resized_height", "resized_width", "grid_t"], "rows": rows()}, f)
        f.write("\n")
    print(path)


if __name__ == "__main__":
    main()
