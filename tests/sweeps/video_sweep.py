#!/usr/bin/python3
"""The `fovea video` input sweep: a matrix of small clips made with Debian's ffmpeg from a real
photo (skimage's astronaut, else data/astronaut.jpg), each run through `fovea video` without a
model and with one, checked, one line per run.

    /usr/bin/python3 tests/sweeps/video_sweep.py [--quick] [--build-dir build] [--out /tmp/vsweep] [--only REGEX]
                                                  [--modes none,incremental,exact,off,check] [--model random:vit-tiny]
                                                  [--timeout 120] [--json FILE]

Codecs and containers, pixel formats, odd and tiny sizes, rotation and aspect metadata, variable
frame rate and missing or repeated timestamps, a mid-stream size change, files with no or more
streams, images, empty/text/truncated/corrupted files, and the options (--max-frames, --every,
--fps, --fixations, bad outputs). Clips that this ffmpeg cannot make are reported as `skip`.

Per run it checks:
  * no crash, no hang (--timeout), exit code 0, 1 or 2 (a usage error);
  * on failure: exactly one `fovea: error:` line on stderr, nothing else but `fovea: warning:` /
    `fovea: note:` lines, no output file, no temp or spill file left in the output's folder;
  * on success: the file's tensors: frame_offsets [F+1] strictly increasing from 0 to T, pts [F]
    F64 strictly increasing, positions [T, 4], levels [T], recomputed [T] and the rows
    (patches or embeddings) [T, ...]; F = the frames ffprobe decodes (after --every /
    --max-frames; --fps is checked for spacing) and = the JSON's `frames`; the pts equal
    ffprobe's best-effort timestamps when those increase (else they must still increase).
Each case says what is expected (`ok`, `error`, or `any` when either is fine); a run whose
outcome is not the expected one, or that breaks a check, is `FAIL`.

Output: `case mode exit frames verdict [detail]`, then a summary. Exit status 1 if any FAIL.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fovea_testio.safetensors import read  # noqa: E402

# --quick: one clip of each kind of trouble (container, pixel format, size, rotation, timestamps,
# streams, not a video, options, outputs), run without a model and through the incremental encoder.
QUICK_CASES = ("h264_mp4_bframes|vp9_webm|mjpeg_avi|y4m_420|pix_yuv420p10_h264|pix_gray_ffv1|pix_yuva420p_vp9|"
               "size_1x1_y4m_420|rotate_90_mov|vfr_mkv|dup_pts_mkv|concat_ts_sizes_restart|audio_only_wav|"
               "two_video_streams_mkv|image_png|empty_file|random_bytes|missing_file|directory|opt_max_frames_3|"
               "opt_every_3|opt_fps_5|opt_fixations_bad_row|opt_every_0|opt_out_missing_dir|opt_out_is_directory")
QUICK_MODES = "none,incremental"

FF = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]


def photo():
    try:
        import skimage
        p = os.path.join(os.path.dirname(skimage.__file__), "data", "astronaut.png")
        if os.path.exists(p):
            return p
    except ImportError:
        pass
    return os.path.join(ROOT, "data", "astronaut.jpg")


PHOTO = photo()


def src(w, h, n, fmt=None, extra_vf=None, rate=25):
    """ffmpeg input and filter: the photo scaled a little larger than w×h and cropped with a
    window that moves 2 px right and 1 px down per frame (real content, and motion)."""
    vf = f"scale={w + 2 * n + 2}:{h + n + 2},setsar=1,crop={w}:{h}:'2*n':'n'"
    if extra_vf:
        vf += "," + extra_vf
    if fmt:
        vf += f",format={fmt}"
    return ["-loop", "1", "-framerate", str(rate), "-i", PHOTO, "-vf", vf, "-frames:v", str(n)]


def ffmpeg(*args):
    r = subprocess.run(FF + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["ffmpeg failed"])[-1])


def clip(name, codec_args, w=100, h=60, n=8, fmt=None, extra_vf=None, rate=25, post=None):
    def make(path):
        ffmpeg(*src(w, h, n, fmt, extra_vf, rate), *codec_args, path)
        if post:
            post(path)
    return make


def retagged(base_make, ext, tag_args):
    """base_make's clip stream-copied with extra metadata (e.g. a rotate tag)."""
    def make(path):
        tmp = f"{path}.plain.{ext}"
        base_make(tmp)
        ffmpeg("-i", tmp, "-c", "copy", *tag_args, path)
        os.remove(tmp)
    return make


def write_bytes(data):
    def make(path):
        with open(path, "wb") as f:
            f.write(data)
    return make


def truncated(base_make, base_ext, fraction):
    def make(path):
        tmp = path + ".full" + base_ext
        base_make(tmp)
        data = open(tmp, "rb").read()
        os.remove(tmp)
        with open(path, "wb") as f:
            f.write(data[: int(len(data) * fraction)])
    return make


def playlist(base_make, base_ext):
    """An HLS playlist naming a real clip by absolute path: refused (fovea reads only the file
    it is given; before 2026-11-27 ffmpeg's HLS demuxer read the listed file)."""
    def make(path):
        seg = os.path.abspath(path + ".segment" + base_ext)
        base_make(seg)
        with open(path, "w") as f:
            f.write(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:1.0,\n{seg}\n#EXT-X-ENDLIST\n")
    return make


def head_cut(base_make, base_ext, fraction):
    """The file without its first `fraction` of bytes (a capture joined mid-stream)."""
    def make(path):
        tmp = path + ".full" + base_ext
        base_make(tmp)
        data = open(tmp, "rb").read()
        os.remove(tmp)
        with open(path, "wb") as f:
            f.write(data[int(len(data) * fraction):])
    return make


def damaged(base_make, base_ext, lo=0.4, hi=0.6, zero=False):
    def make(path):
        tmp = path + ".full" + base_ext
        base_make(tmp)
        data = bytearray(open(tmp, "rb").read())
        os.remove(tmp)
        s = 99
        for i in range(int(len(data) * lo), int(len(data) * hi)):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            data[i] = 0 if zero else s & 0xFF
        with open(path, "wb") as f:
            f.write(data)
    return make


def concat_ts(sizes, continuous):
    """Two H.264 segments of different sizes in MPEG-TS, joined byte for byte (what `cat a.ts
    b.ts` or a stream switching resolution gives). continuous: the second segment's timestamps
    follow the first's; else they start over (go back)."""
    def make(path):
        parts = []
        for k, (w, h) in enumerate(sizes):
            p = f"{path}.part{k}.ts"
            off = ["-output_ts_offset", str(0.32 * k)] if continuous else []
            ffmpeg(*src(w, h, 8), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-bf", "0", *off, "-f", "mpegts", p)
            parts.append(p)
        with open(path, "wb") as out:
            for p in parts:
                out.write(open(p, "rb").read())
                os.remove(p)
    return make


def with_audio(first):
    def make(path):
        v = path + ".v.mkv"
        ffmpeg(*src(100, 60, 8), "-c:v", "libx264", "-pix_fmt", "yuv420p", v)
        a = ["-f", "lavfi", "-i", "sine=frequency=440:duration=0.5"]
        if first:
            ffmpeg(*a, "-i", v, "-map", "0:a", "-map", "1:v", "-c:v", "copy", "-c:a", "libvorbis", "-shortest", path)
        else:
            ffmpeg("-i", v, *a, "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "libvorbis", path)
        os.remove(v)
    return make


def two_videos(path):
    a, b = path + ".a.mkv", path + ".b.mkv"
    ffmpeg(*src(64, 48, 4), "-c:v", "ffv1", a)
    ffmpeg(*src(100, 60, 8), "-c:v", "ffv1", b)
    ffmpeg("-i", a, "-i", b, "-map", "0:v", "-map", "1:v", "-c", "copy", path)
    os.remove(a), os.remove(b)


def audio_only(codec):
    def make(path):
        ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=0.5", "-c:a", codec, path)
    return make


def cover_art(path):
    jpg = path + ".cover.jpg"
    ffmpeg("-i", PHOTO, "-vf", "scale=64:64", jpg)
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=0.5", "-i", jpg, "-map", "0:a", "-map", "1:v",
           "-c:a", "libmp3lame", "-c:v", "copy", "-disposition:v", "attached_pic", path)
    os.remove(jpg)


def image(w, h, codec_args):
    def make(path):
        ffmpeg("-i", PHOTO, "-vf", f"scale={w}:{h},setsar=1", "-frames:v", "1", *codec_args, path)
    return make


def jpeg_exif_orientation(path):
    """A JPEG whose EXIF says 'rotate 90° clockwise to display' (orientation 6)."""
    plain = path + ".plain.jpg"
    image(100, 60, [])(plain)
    data = open(plain, "rb").read()
    os.remove(plain)
    # APP1 Exif, big-endian TIFF, one IFD entry: Orientation (0x0112) SHORT 1 = 6.
    tiff = b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00\x01" + b"\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00" + b"\x00\x00\x00\x00"
    payload = b"Exif\x00\x00" + tiff
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    with open(path, "wb") as f:
        f.write(data[:2] + app1 + data[2:])


def y4m_gray(w, h, n):
    def make(path):
        ffmpeg(*src(w, h, n, "gray"), "-strict", "-1", "-f", "yuv4mpegpipe", path)
    return make


H264 = ["-c:v", "libx264", "-pix_fmt", "yuv420p"]
X265 = ["-c:v", "libx265", "-x265-params", "log-level=error"]
FFV1 = ["-c:v", "ffv1"]


def cases(tmp):
    """(name, extension, maker, fovea args, expected, expected frame count or None: ffprobe's)."""
    C = []

    def add(name, ext, make, expect="ok", args=(), frames=None, modes=None, display=None):
        C.append(dict(name=name, ext=ext, make=make, expect=expect, args=list(args), frames=frames, modes=modes,
                      display=display))

    # ---- codecs and containers (100×60: not a multiple of the 16-px patch) ----
    add("h264_mp4_bframes", "mp4", clip("", H264 + ["-bf", "3"]))
    add("h264_mp4_bf0", "mp4", clip("", H264 + ["-bf", "0"]))
    add("h264_mp4_faststart", "mp4", clip("", H264 + ["-movflags", "+faststart"]))
    add("h264_mkv_bframes", "mkv", clip("", H264 + ["-bf", "3"]))
    add("h264_annexb_raw", "h264", clip("", H264 + ["-f", "h264"]))
    add("h264_ts", "ts", clip("", H264 + ["-f", "mpegts"]))
    add("hevc_mp4", "mp4", clip("", X265 + ["-pix_fmt", "yuv420p", "-tag:v", "hvc1"]))
    add("hevc_mkv", "mkv", clip("", X265 + ["-pix_fmt", "yuv420p"]))
    add("vp8_webm", "webm", clip("", ["-c:v", "libvpx", "-b:v", "200k"]))
    add("vp9_webm", "webm", clip("", ["-c:v", "libvpx-vp9", "-b:v", "200k", "-deadline", "realtime", "-cpu-used", "8"]))
    add("av1_aom_mkv", "mkv", clip("", ["-c:v", "libaom-av1", "-cpu-used", "8", "-crf", "40", "-b:v", "0"]))
    add("av1_svt_mp4", "mp4", clip("", ["-c:v", "libsvtav1", "-preset", "12"], w=128, h=64))
    add("mpeg4_avi", "avi", clip("", ["-c:v", "mpeg4", "-q:v", "5"]))
    add("mpeg4_mp4_bframes", "mp4", clip("", ["-c:v", "mpeg4", "-q:v", "5", "-bf", "2"]))
    add("mpeg2_ts", "ts", clip("", ["-c:v", "mpeg2video", "-q:v", "5", "-f", "mpegts"]))
    add("mpeg2_ts_interlaced", "ts", clip("", ["-c:v", "mpeg2video", "-q:v", "5", "-flags", "+ildct+ilme",
                                               "-top", "1", "-f", "mpegts"], w=96, h=64))
    add("mjpeg_avi", "avi", clip("", ["-c:v", "mjpeg", "-q:v", "5", "-pix_fmt", "yuvj420p"]))
    add("mjpeg_raw", "mjpeg", clip("", ["-c:v", "mjpeg", "-q:v", "5", "-pix_fmt", "yuvj420p", "-f", "mjpeg"]))
    add("ffv1_mkv", "mkv", clip("", FFV1))
    add("prores_mov", "mov", clip("", ["-c:v", "prores_ks", "-profile:v", "2"]))
    add("gif", "gif", clip("", []))
    add("y4m_420", "y4m", clip("", ["-pix_fmt", "yuv420p"]))
    add("y4m_444", "y4m", clip("", ["-pix_fmt", "yuv444p"]))
    add("png_in_mov", "mov", clip("", ["-c:v", "png"]))
    add("apng", "apng", clip("", ["-f", "apng", "-plays", "0"]))
    add("theora_ogv", "ogv", clip("", ["-c:v", "libtheora", "-q:v", "5"], w=96, h=64))
    add("rawvideo_bgr24_avi", "avi", clip("", ["-c:v", "rawvideo", "-pix_fmt", "bgr24"]))
    add("qtrle_rgb24_mov", "mov", clip("", ["-c:v", "qtrle", "-pix_fmt", "rgb24"]))
    add("wmv2_asf", "wmv", clip("", ["-c:v", "wmv2"]))
    add("flv1_flv", "flv", clip("", ["-c:v", "flv"]))
    add("vp9_mp4", "mp4", clip("", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"]))
    add("h264_mov_bframes", "mov", clip("", H264))
    add("h264_nut", "nut", clip("", H264))

    # ---- pixel formats ----
    add("pix_yuvj420p_h264", "mp4", clip("", ["-c:v", "libx264", "-pix_fmt", "yuvj420p"]))
    add("pix_fullrange_flag_h264", "mp4", clip("", ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-color_range", "pc"]))
    add("pix_yuv422p_h264", "mp4", clip("", ["-c:v", "libx264", "-pix_fmt", "yuv422p"]))
    add("pix_yuv444p_h264", "mp4", clip("", ["-c:v", "libx264", "-pix_fmt", "yuv444p"]))
    add("pix_yuv420p10_h264", "mkv", clip("", ["-c:v", "libx264", "-pix_fmt", "yuv420p10le"]))
    add("pix_yuv420p10_hevc", "mkv", clip("", X265 + ["-pix_fmt", "yuv420p10le"]))
    add("pix_yuv420p10_vp9", "webm", clip("", ["-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p10le", "-deadline", "realtime",
                                               "-cpu-used", "8"]))
    add("pix_yuv422p10_prores", "mov", clip("", ["-c:v", "prores_ks", "-profile:v", "3", "-pix_fmt", "yuv422p10le"]))
    add("pix_gray_h264", "mkv", clip("", ["-c:v", "libx264", "-pix_fmt", "gray"]))
    add("pix_gray_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "gray"]))
    add("pix_gray16_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "gray16le"]))
    add("pix_gray_y4m", "y4m", y4m_gray(100, 60, 8))
    add("pix_rgb24_x264rgb", "mkv", clip("", ["-c:v", "libx264rgb", "-pix_fmt", "rgb24"]))
    add("pix_bgr0_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "bgr0"]))
    add("pix_gbrp16_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "gbrp16le"]))
    add("pix_yuva420p_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "yuva420p"]))
    add("pix_yuva420p_vp9", "webm", clip("", ["-c:v", "libvpx-vp9", "-pix_fmt", "yuva420p", "-deadline", "realtime",
                                              "-cpu-used", "8"]))
    add("pix_rgba_png_mov", "mov", clip("", ["-c:v", "png", "-pix_fmt", "rgba"]))
    add("pix_yuva444p10_prores4444", "mov", clip("", ["-c:v", "prores_ks", "-profile:v", "4444",
                                                      "-pix_fmt", "yuva444p10le"]))
    add("pix_yuv410p_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "yuv410p"]))
    add("pix_nv12_rawvideo_nut", "nut", clip("", ["-c:v", "rawvideo", "-pix_fmt", "nv12"]))
    add("pix_pal8_gif", "gif", clip("", ["-pix_fmt", "pal8"]))

    # ---- sizes ----
    for w, h in [(1, 1), (2, 2), (15, 9), (101, 77), (3, 4096), (4096, 3), (16, 16), (17, 1)]:
        # 3x4096: the coarsest tiling the tokenizer allows is one token per P px of the long side
        # (512 with the fixture's 8-px patches): over the default budget, refused as fovea
        # tokenize refuses the same image (a usage error naming --budget).
        add(f"size_{w}x{h}_ffv1", "mkv", clip("", FFV1 + ["-pix_fmt", "yuv444p"], w=w, h=h, n=4),
            expect="any" if max(w, h) >= 4096 else "ok")
    for w, h in [(2, 2), (16, 16), (102, 78)]:
        add(f"size_{w}x{h}_h264", "mp4", clip("", H264, w=w, h=h, n=4))
    add("size_15x9_mjpeg", "avi", clip("", ["-c:v", "mjpeg", "-pix_fmt", "yuvj420p"], w=15, h=9, n=4))
    add("size_101x77_y4m_420", "y4m", clip("", ["-pix_fmt", "yuv420p"], w=101, h=77, n=4))
    add("size_1x1_y4m_420", "y4m", clip("", ["-pix_fmt", "yuv420p"], w=1, h=1, n=3))
    add("size_1280x720_h264", "mp4", clip("", H264, w=1280, h=720, n=3))

    # ---- metadata: rotation, aspect ----
    # ffmpeg 5.1 writes a display matrix when a stream is copied with a rotate tag (not when encoding).
    for deg in (90, 180, 270):
        add(f"rotate_{deg}_mp4", "mp4", retagged(clip("", H264), "mp4", ["-metadata:s:v:0", f"rotate={deg}"]),
            display=(100, 60) if deg == 180 else (60, 100))
    add("rotate_90_mov", "mov", retagged(clip("", H264), "mov", ["-metadata:s:v:0", "rotate=90"]), display=(60, 100))
    add("rotate_90_mp4_no_autorotate", "mp4", retagged(clip("", H264), "mp4", ["-metadata:s:v:0", "rotate=90"]),
        args=["--no-autorotate"], display=(100, 60))
    add("sar_2_1_h264", "mp4", clip("", H264, extra_vf="setsar=2/1"))
    add("sar_mkv_aspect_16_9", "mkv", clip("", H264 + ["-aspect", "16:9"]))

    # ---- timestamps ----
    add("vfr_mkv", "mkv", clip("", H264 + ["-bf", "0", "-fps_mode", "passthrough"], extra_vf="setpts='N*N/25/TB'"))
    add("vfr_mp4_bframes", "mp4", clip("", H264 + ["-fps_mode", "passthrough", "-video_track_timescale", "1000"],
                                       extra_vf="setpts='(N+floor(N/3)*2)/25/TB'"))
    add("dup_pts_mkv", "mkv", clip("", ["-c:v", "ffv1", "-fps_mode", "passthrough", "-enc_time_base", "1/25"],
                                   extra_vf="setpts='floor(N/2)/25/TB'"))
    add("y4m_fps_1000", "y4m", clip("", ["-pix_fmt", "yuv420p"], rate=1000))
    add("concat_ts_sizes_restart", "ts", concat_ts([(100, 60), (64, 48)], continuous=False))
    add("concat_ts_sizes_continuous", "ts", concat_ts([(100, 60), (64, 48)], continuous=True))

    # ---- streams and non-videos ----
    add("audio_only_wav", "wav", audio_only("pcm_s16le"), expect="error")
    add("audio_only_m4a", "m4a", audio_only("aac"), expect="error")
    add("audio_then_video_mkv", "mkv", with_audio(True))
    add("video_then_audio_mkv", "mkv", with_audio(False))
    add("two_video_streams_mkv", "mkv", two_videos)
    add("mp3_with_cover_art", "mp3", cover_art, expect="error")
    add("image_png", "png", image(100, 60, []), frames=1)
    add("image_jpg", "jpg", image(100, 60, []), frames=1)
    add("image_jpg_exif_orientation_6", "jpg", jpeg_exif_orientation, frames=1)
    add("empty_file", "mp4", write_bytes(b""), expect="error")
    add("text_file", "mp4", write_bytes(b"this is not a video, just a note\n" * 20), expect="error")
    add("random_bytes", "bin", write_bytes(bytes((i * 7919 + 13) & 0xFF for i in range(50000))), expect="error")
    add("missing_file", "mp4", None, expect="error")
    add("directory", "dir", lambda p: os.makedirs(p, exist_ok=True), expect="error")

    # ---- truncated and damaged ----
    mp4 = clip("", H264, n=12)
    mp4fs = clip("", H264 + ["-movflags", "+faststart"], n=12)
    mkv = clip("", H264, n=12)
    ts = clip("", H264 + ["-f", "mpegts"], n=12)
    y4m = clip("", ["-pix_fmt", "yuv420p"], n=12)
    avi = clip("", ["-c:v", "mjpeg", "-pix_fmt", "yuvj420p"], n=12)
    add("hls_playlist_naming_a_local_file", "m3u8", playlist(ts, ".ts"), expect="error")
    for pct in (10, 50, 90):
        f = pct / 100
        add(f"trunc{pct}_mp4", "mp4", truncated(mp4, ".mp4", f), expect="any")
        add(f"trunc{pct}_mp4_faststart", "mp4", truncated(mp4fs, ".mp4", f), expect="ok" if pct >= 90 else "any")
        add(f"trunc{pct}_mkv", "mkv", truncated(mkv, ".mkv", f), expect="any")
        add(f"trunc{pct}_ts", "ts", truncated(ts, ".ts", f), expect="any")
        add(f"trunc{pct}_y4m", "y4m", truncated(y4m, ".y4m", f), expect="ok" if pct >= 50 else "any")
        add(f"trunc{pct}_avi", "avi", truncated(avi, ".avi", f), expect="any")
    # An MPEG-TS capture without its first 40 % (no SPS/PPS until the next keyframe: ffmpeg
    # drops the frames before it, as ffprobe counts).
    add("head_cut_ts", "ts", head_cut(clip("", H264 + ["-g", "10", "-f", "mpegts"], n=30), ".ts", 0.4))
    for name, make, ext in [("mp4", mp4fs, ".mp4"), ("mkv", mkv, ".mkv"), ("ts", ts, ".ts"), ("avi", avi, ".avi"),
                            ("y4m", y4m, ".y4m")]:
        add(f"corrupt_mid_{name}", ext[1:], damaged(make, ext), expect="ok")
        add(f"zeroed_mid_{name}", ext[1:], damaged(make, ext, zero=True), expect="ok")

    # ---- options (on a 12-frame H.264 clip) ----
    base = clip("", H264, n=12)
    csv_past = os.path.join(tmp, "fix_past_end.csv")
    csv_bad = os.path.join(tmp, "fix_bad_row.csv")
    csv_hdr = os.path.join(tmp, "fix_header_only.csv")
    csv_out = os.path.join(tmp, "fix_outside.csv")
    with open(csv_past, "w") as f:
        f.write("frame,x,y\n0,20,20\n5,80,40\n500,10,10\n")
    with open(csv_bad, "w") as f:
        f.write("frame,x,y\n0,20,20\n3,abc,40\n")
    with open(csv_hdr, "w") as f:
        f.write("frame,x,y\n")
    with open(csv_out, "w") as f:
        f.write("0,-500,20\n4,1e9,-1e9\n")
    add("opt_max_frames_3", "mp4", base, args=["--max-frames", "3"], frames=3)
    add("opt_every_3", "mp4", base, args=["--every", "3"], frames=4)
    add("opt_every_100", "mp4", base, args=["--every", "100"], frames=1)
    add("opt_every_3_max_2", "mp4", base, args=["--every", "3", "--max-frames", "2"], frames=2)
    add("opt_fps_100_above_source", "mp4", base, args=["--fps", "100"], frames=12)
    add("opt_fps_5", "mp4", base, args=["--fps", "5"], frames=3)
    add("opt_fps_0.001", "mp4", base, args=["--fps", "0.001"], frames=1)
    add("opt_fixations_past_end", "mp4", base, args=["--fixations", csv_past])
    add("opt_fixations_outside_image", "mp4", base, args=["--fixations", csv_out])
    add("opt_fixations_bad_row", "mp4", base, args=["--fixations", csv_bad], expect="error")
    add("opt_fixations_header_only", "mp4", base, args=["--fixations", csv_hdr], expect="error")
    add("opt_fixations_missing_file", "mp4", base, args=["--fixations", os.path.join(tmp, "nope.csv")], expect="error")
    add("opt_two_inputs", "mp4", base, args=[os.path.join(tmp, "clips", "h264_mp4_bf0.mp4")], expect="error",
        modes=["none"])
    add("opt_every_0", "mp4", base, args=["--every", "0"], expect="error", modes=["none"])
    add("opt_fps_0", "mp4", base, args=["--fps", "0"], expect="error", modes=["none"])
    add("opt_budget_1", "mp4", base, args=["--budget", "1"], expect="error")
    add("opt_budget_2", "mp4", base, args=["--budget", "2"])
    add("opt_patch_14", "mp4", base, args=["--patch", "14"], modes=["none"])
    add("opt_keyframe_2_group_3", "mp4", base, args=["--keyframe", "2", "--group", "3"])
    add("opt_out_missing_dir", "mp4", base, args=["-o", os.path.join(tmp, "no", "such", "dir", "x.safetensors")],
        expect="error")
    add("opt_out_is_directory", "mp4", base, args=["-o", tmp], expect="error")
    add("opt_out_under_a_file", "mp4", base, args=["-o", "/etc/hostname/x.safetensors"], expect="error")
    add("opt_out_read_only_fs", "mp4", base, args=["-o", "/proc/x.safetensors"], expect="error")
    add("opt_fps_5_vfr", "mkv", clip("", H264 + ["-bf", "0", "-fps_mode", "passthrough"],
                                     extra_vf="setpts='N*N/25/TB'", n=12), args=["--fps", "5"])
    return C


MODES = {
    "none": [],
    "incremental": ["--reuse", "incremental"],
    "exact": ["--reuse", "exact"],
    "off": ["--reuse", "off"],
    "check": ["--reuse", "incremental", "--check"],
    # a real (tiny) HF CLIP checkpoint with its own preprocessing, 8-px patches, --check
    "fixture": ["--reuse", "incremental", "--check"],
    # fovea.video() from the Python module (build/python), no model
    "python": [],
}
FIXTURE_MODEL = os.path.join(ROOT, "tests", "data", "encoder", "clip")

# fovea.video() for the python mode: the CLI's flags it has, as keyword arguments.
PY_RUN = r'''
import json, sys, fovea
a = json.loads(sys.argv[1])
try:
    s = fovea.video(a["path"], output=a["out"], threads=1, **a["kw"])
except (ValueError, OSError, RuntimeError) as e:
    print(f"fovea: error: {e}", file=sys.stderr)
    sys.exit(2 if isinstance(e, ValueError) else 1)
for w in s.pop("warnings"):
    print(f"fovea: warning: {w}", file=sys.stderr)
s["video"]["sample_aspect_ratio"] = "%d:%d" % tuple(s["video"]["sample_aspect_ratio"])
s["decode"] = {k: s[k] for k in ("frames_decoded", "corrupt_packets", "corrupt_frames", "timestamps_repaired")}
print(json.dumps(s))
'''
PY_FLAGS = {"--max-frames": ("max_frames", int), "--every": ("every", int), "--fps": ("fps", float),
            "--budget": ("budget", int), "--patch": ("patch", int), "--keyframe": ("keyframe", int),
            "--group": ("group", int), "--no-autorotate": ("autorotate", None)}


def python_call(case, out):
    """The python mode's command for a case, or None when it uses a flag fovea.video has not."""
    kw, a, i = {}, case["args"], 0
    while i < len(a):
        if a[i] == "-o":
            out = a[i + 1]
            i += 2
            continue
        if a[i] not in PY_FLAGS:
            return None, out
        name, conv = PY_FLAGS[a[i]]
        if conv is None:
            kw[name] = False
            i += 1
        else:
            kw[name] = conv(a[i + 1])
            i += 2
    return [sys.executable, "-c", PY_RUN, json.dumps(dict(path=case["path"], out=out, kw=kw))], out


def ffprobe_frames(path):
    """[(pts seconds or None)] of every decoded frame of the best video stream, or None."""
    r = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "V:0", "-show_entries",
                        "frame=best_effort_timestamp_time", "-of", "json", path],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None
    try:
        frames = json.loads(r.stdout).get("frames", [])
    except json.JSONDecodeError:
        return None
    out = []
    for f in frames:
        t = f.get("best_effort_timestamp_time")
        out.append(float(t) if t not in (None, "N/A") else None)
    return out


def leftovers(folder, before):
    if not os.path.isdir(folder):
        return []
    return sorted(f for f in set(os.listdir(folder)) - before if ".tmp-" in f or ".spill-" in f)


def check_file(path, n_expected, probe, args, model):
    """'' when the file is consistent, else what is wrong."""
    try:
        t, meta = read(path, strict=True)
    except Exception as e:  # noqa: BLE001
        return f"unreadable: {e}"
    need = ["frame_offsets", "pts", "positions", "levels", "recomputed", "embeddings" if model else "patches"]
    for k in need:
        if k not in t:
            return f"no {k}"
    off, pts = t["frame_offsets"], t["pts"]
    F = len(pts)
    T = t["levels"].shape[0]
    if off.dtype.str[1:] != "i8" or pts.dtype.str[1:] != "f8":
        return "dtypes"
    if off.shape != (F + 1,) or off[0] != 0 or off[-1] != T:
        return f"frame_offsets {off.shape} {off[:3]}..{off[-1]} vs T={T}"
    if F > 0 and not (off[1:] > off[:-1]).all():
        return "frame_offsets not strictly increasing"
    if not all(t[k].shape[0] == T for k in need[2:]) or t["positions"].shape != (T, 4):
        return "row counts"
    if F > 1 and not (pts[1:] > pts[:-1]).all():
        bad = int(((pts[1:] > pts[:-1]) == 0).nonzero()[0][0])
        return f"pts not strictly increasing at {bad}: {pts[bad]} then {pts[bad + 1]}"
    if not all(math.isfinite(x) for x in pts):
        return "pts not finite"
    if n_expected is not None and F != n_expected:
        return f"{F} frames, expected {n_expected}"
    return ""


def monotone(pts):
    """ffprobe's timestamps repaired as fovea documents it (VideoFrame::pts_s), for --fps."""
    out, offset = [], 0.0
    for t in pts:
        step = 1 / 25
        if t is None:
            t = out[-1] + step if out else 0.0
        else:
            t += offset
            if out and not t > out[-1]:
                back = out[-1] - t
                if back >= step / 2:
                    offset += back + step
                    t = out[-1] + step
                else:
                    t = out[-1] + step / 16
        out.append(t)
    return out


def sampled(pts, fps):
    """How many frames --fps keeps (fovea::frame_sampler's grid rule)."""
    kept, nxt, start = 0, None, None
    for t in pts:
        if start is None:
            start, nxt, kept = t, t + 1 / fps, 1
            continue
        if t + 1e-9 < nxt:
            continue
        nxt = start + (math.floor((t + 1e-9 - start) * fps) + 1) / fps
        kept += 1
    return kept


def expected_frames(case, probe):
    if case["frames"] is not None:
        return case["frames"]
    if probe is None:
        return None
    a = case["args"]
    if "--fps" in a:
        return sampled(monotone(probe), float(a[a.index("--fps") + 1]))
    return len(probe)


def pts_detail(path, probe, case):
    """Compares the file's pts with ffprobe's when nothing filters frames and ffprobe's increase."""
    if probe is None or case["args"] or any(p is None for p in probe):
        return ""
    if not all(b > a for a, b in zip(probe, probe[1:])):
        return ""  # repaired by fovea (checked: its pts increase); counted in decode.timestamps_repaired
    t, _ = read(path)
    pts = list(t["pts"])
    if len(pts) != len(probe):
        return ""
    worst = max((abs(a - b) for a, b in zip(pts, probe)), default=0)
    if worst > 1e-3:
        return f"pts differ from ffprobe's by {worst:.4g} s"
    return ""


def run_case(fovea, case, mode, model, timeout, tmp):
    inp = case["path"]
    out_dir = os.path.join(tmp, "out", case["name"])
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"{mode}.safetensors")
    if os.path.exists(out):
        os.remove(out)
    args = list(case["args"])
    if "-o" in args:
        out = args[args.index("-o") + 1]
        out_dir = os.path.dirname(out)
    else:
        args += ["-o", out]
    before = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()
    cmd = [fovea, "video", inp, "--json", "--threads", "1"] + args + MODES[mode]
    if mode == "fixture":
        cmd += ["--model", FIXTURE_MODEL]
    elif mode == "python":
        cmd, out = python_call(case, out)
        if cmd is None:
            return dict(exit="-", frames="-", verdict="n/a", detail="a flag fovea.video has not")
    elif mode != "none":
        cmd += ["--model", model]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(exit="timeout", frames="-", verdict="FAIL", detail=f"hang (> {timeout} s)")
    secs = time.time() - t0
    code = r.returncode
    err_lines = [l for l in r.stderr.splitlines() if l.strip()]
    errors = [l for l in err_lines if l.startswith("fovea: error:")]
    other = [l for l in err_lines if not l.startswith(("fovea: error:", "fovea: warning:", "fovea: note:"))]
    warnings = [l for l in err_lines if l.startswith("fovea: warning:")]
    left = leftovers(out_dir, before)
    res = dict(exit=code, frames="-", secs=round(secs, 2), warnings=len(warnings))
    if code < 0:
        res.update(verdict="FAIL", detail=f"killed by signal {signal.Signals(-code).name}: {r.stderr[-300:]!r}")
        return res
    if code != 0:
        msg = errors[0] if errors else (err_lines[-1] if err_lines else "")
        res["message"] = msg
        problems = []
        if code not in (1, 2):  # 2: a usage error (invalid_argument), 1: anything else
            problems.append(f"exit {code}")
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines")
        if other:
            problems.append(f"stray stderr: {other[0][:120]!r}")
        if os.path.exists(out) and not os.path.isdir(out):
            problems.append("output file left")
        if left:
            problems.append(f"temp files left: {left}")
        if case["expect"] == "ok":
            problems.append("expected success")
        res.update(verdict="FAIL" if problems else "rejected", detail="; ".join(problems) or msg)
        return res
    # success
    problems = []
    if case["expect"] == "error":
        problems.append("expected an error")
    if other:
        problems.append(f"stray stderr: {other[0][:120]!r}")
    if left:
        problems.append(f"temp files left: {left}")
    try:
        js = json.loads(r.stdout)
    except json.JSONDecodeError:
        js = {}
        problems.append("stdout is not JSON")
    probe = case.get("probe")
    n_exp = expected_frames(case, probe)
    if not os.path.exists(out):
        problems.append("no output file")
    else:
        p = check_file(out, n_exp, probe, case["args"], mode not in ("none", "python"))
        if p:
            problems.append(p)
        else:
            t, meta = read(out)
            res["frames"] = len(t["pts"])
            if js.get("frames") != res["frames"]:
                problems.append(f"JSON frames {js.get('frames')} != file {res['frames']}")
            d = pts_detail(out, probe, case)
            if d:
                problems.append(d)
            if mode in ("check", "fixture"):
                cmin = js.get("min_cosine", 0)
                if not cmin > 0.9:
                    problems.append(f"min cosine {cmin}")
    dec = js.get("decode", {})
    info = []
    if dec.get("corrupt_packets") or dec.get("corrupt_frames"):
        info.append(f"corrupt packets {dec.get('corrupt_packets')}, frames {dec.get('corrupt_frames')}")
    v = js.get("video", {})
    if v.get("orientation", 1) != 1:
        info.append(f"{v['rotation']}{'' if v.get('rotation_applied') else ' (not applied)'}")
    if case.get("display") and (v.get("width"), v.get("height")) != case["display"]:
        problems.append(f"frames {v.get('width')}x{v.get('height')}, expected {case['display'][0]}x{case['display'][1]}")
    if v.get("sample_aspect_ratio", "1:1") != "1:1":
        info.append(f"SAR {v['sample_aspect_ratio']}")
    if dec.get("timestamps_repaired"):
        info.append(f"{dec['timestamps_repaired']} timestamps repaired")
    if warnings:
        info.append(f"{len(warnings)} warnings: {warnings[0][len('fovea: warning: '):][:100]}")
    res["video"] = v
    res.update(verdict="FAIL" if problems else "ok", detail="; ".join(problems + info))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--fovea", help="the fovea binary (default: BUILD_DIR/fovea)")
    ap.add_argument("--out", default="/tmp/vsweep")
    ap.add_argument("--only", help="regex on case names")
    ap.add_argument("--quick", action="store_true",
                    help="%d representative clips, modes %s (the test suite's form)" % (QUICK_CASES.count("|") + 1, QUICK_MODES))
    ap.add_argument("--modes", default=None, help="default none,incremental,exact,off,check,fixture,python")
    ap.add_argument("--model", default="random:vit-tiny")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--keep", action="store_true", help="reuse clips already in --out")
    a = ap.parse_args()
    if a.quick:
        a.only = a.only or "^(%s)$" % QUICK_CASES
        a.modes = a.modes or QUICK_MODES
    a.modes = a.modes or "none,incremental,exact,off,check,fixture,python"
    fovea = a.fovea or os.path.join(a.build_dir, "fovea")
    if not os.path.exists(fovea):
        fovea = os.path.join(a.build_dir, "tools", "fovea", "fovea")
    if not shutil.which("ffmpeg"):
        sys.exit("video_sweep: ffmpeg not found (apt-get install ffmpeg)")
    pypath = os.path.join(a.build_dir, "python")
    os.environ["PYTHONPATH"] = pypath + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    tmp = os.path.abspath(a.out)
    clips = os.path.join(tmp, "clips")
    os.makedirs(clips, exist_ok=True)
    modes = a.modes.split(",")
    results = []
    fails = 0
    print(f"{'case':34} {'mode':11} {'exit':>5} {'frames':>6}  verdict  detail", flush=True)
    for case in cases(tmp):
        if a.only and not re.search(a.only, case["name"]):
            continue
        path = os.path.join(clips, f"{case['name']}.{case['ext']}")
        case["path"] = path
        if case["make"] is None:
            if os.path.exists(path):
                os.remove(path)
        elif not (a.keep and os.path.exists(path)):
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                case["make"](path)
            except Exception as e:  # noqa: BLE001
                if os.path.isfile(path):
                    os.remove(path)
                print(f"{case['name']:34} {'-':11} {'-':>5} {'-':>6}  skip     ffmpeg cannot make it: {e}", flush=True)
                results.append(dict(case=case["name"], mode="-", verdict="skip", detail=str(e)))
                continue
        case["probe"] = ffprobe_frames(path) if os.path.isfile(path) else None
        for mode in case["modes"] or modes:
            r = run_case(fovea, case, mode, a.model, a.timeout, tmp)
            r.update(case=case["name"], mode=mode, expect=case["expect"])
            results.append(r)
            fails += r["verdict"] == "FAIL"
            if r["verdict"] == "n/a":
                continue
            print(f"{case['name']:34} {mode:11} {str(r['exit']):>5} {str(r['frames']):>6}  {r['verdict']:8} "
                  f"{r.get('detail', '')}", flush=True)
    n = len([r for r in results if r["verdict"] != "skip"])
    by = {}
    for r in results:
        by[r["verdict"]] = by.get(r["verdict"], 0) + 1
    print(f"\n{n} runs: " + ", ".join(f"{v} {k}" for k, v in sorted(by.items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
