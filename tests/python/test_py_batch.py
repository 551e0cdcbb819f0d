"""The batch CLI: many inputs (files, directories, .tar shards), one output each, bad images
skipped and counted; outputs equal single-image runs."""
import json
import os
import tarfile

import numpy as np

import fovea
from pyhelpers import cli, photo, save_png


def make_inputs(root):
    os.makedirs(root / "dir" / "sub")
    paths = [save_png(photo(1), str(root / "dir" / "p1.png")), save_png(photo(2), str(root / "dir" / "sub" / "p2.png"))]
    (root / "dir" / "notes.txt").write_text("not an image")  # ignored in a directory
    (root / "dir" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    single = save_png(photo(4), str(root / "p4.png"))
    with tarfile.open(root / "shard-000.tar", "w") as t:
        t.add(paths[0], "samples/000001.png")
        t.add(single, "samples/000002.png")
        bad = root / "bad.jpg"
        bad.write_bytes(b"\xff\xd8 nope")
        t.add(bad, "samples/000003.jpg")
        meta = root / "m.json"
        meta.write_text("{}")
        t.add(meta, "samples/000001.json")  # other WebDataset fields are ignored
    return paths, single


def test_batch_tokenize(tmp_path):
    paths, single = make_inputs(tmp_path)
    out = tmp_path / "out"
    r = cli("tokenize", tmp_path / "dir", tmp_path / "shard-000.tar", single, "--budget", 100, "-o", out, "--json",
            check=False)
    assert r.returncode == 1, r.stderr  # two bad images
    summary = json.loads(r.stdout)["batch"]
    assert summary["images"] == 7 and summary["ok"] == 5 and summary["failed"] == 2
    assert 0 < summary["first_image_s"] <= summary["elapsed_s"] and summary["steady_images_per_s"] > 0
    failed = sorted(f["input"] for f in summary["failures"])
    assert failed[0].endswith("broken.png") and failed[1].endswith("shard-000.tar:samples/000003.jpg")
    assert r.stderr.count("fovea: warning: skipped") == 2
    assert r.stderr.strip().splitlines()[-1] == "fovea: error: 2 of 7 images failed (each is named above)"
    assert sorted(os.listdir(out)) == ["p1.safetensors", "p2.safetensors", "p4.safetensors", "shard-000.tar"]
    # Each output equals the single-image run's file, byte for byte.
    for p in paths + [single]:
        ref = tmp_path / "ref.safetensors"
        cli("tokenize", p, "--budget", 100, "-o", ref)
        assert (out / (os.path.splitext(os.path.basename(p))[0] + ".safetensors")).read_bytes() == ref.read_bytes()
    with tarfile.open(out / "shard-000.tar") as t:
        names = t.getnames()
        assert names == ["samples/000001.safetensors", "samples/000002.safetensors"]
        member = t.extractfile("samples/000002.safetensors").read()
    (tmp_path / "m.safetensors").write_bytes(member)
    f, g = fovea.load(tmp_path / "m.safetensors"), fovea.load(out / "p4.safetensors")
    assert np.array_equal(f["patches"], g["patches"])
    assert f.metadata["source"].endswith("shard-000.tar:samples/000002.png")


def test_batch_encode_into_one_shard(tmp_path):
    paths, single = make_inputs(tmp_path)
    out = tmp_path / "all.tar"
    r = cli("encode", *paths, single, "--model", "random:vit-s16", "--budget", 64, "--threads", 1, "-o", out, "--json")
    assert json.loads(r.stdout)["batch"]["ok"] == 3
    ref = tmp_path / "ref.safetensors"
    cli("encode", single, "--model", "random:vit-s16", "--budget", 64, "--threads", 1, "-o", ref)
    with tarfile.open(out) as t:
        assert t.getnames() == ["p1.safetensors", "p2.safetensors", "p4.safetensors"]
        assert t.extractfile("p4.safetensors").read() == ref.read_bytes()


def test_batch_refuses_bad_arguments(tmp_path):
    paths, single = make_inputs(tmp_path)
    r = cli("tokenize", single, single, "-o", tmp_path / "o", check=False)
    assert r.returncode == 2 and "would both write" in r.stderr
    r = cli("tokenize", single, paths[0], check=False)
    assert r.returncode == 2 and "-o DIR" in r.stderr
    r = cli("tokenize", single, tmp_path / "missing.png", "-o", tmp_path / "o", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "missing.png" in r.stderr
    assert not (tmp_path / "o").exists()  # nothing was started


def _tar_header(name, size_field, typ=b"0"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108], h[108:116], h[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"00000000000\0"
    h[156:157] = typ
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def test_hostile_shard_headers_are_skipped_not_followed(tmp_path):
    """A shard is untrusted: a member size near 2^64 (GNU base-256) once rounded to a seek back
    onto its own header, and `fovea tokenize shard.tar` read that header forever (found by
    reading the reader). Every size is now checked against the bytes left."""
    import subprocess
    from pyhelpers import CLI
    near_2_64 = b"\x80" + (2**64 - 512).to_bytes(11, "big")
    cases = {
        "loop_image.tar": _tar_header(b"a.jpg", near_2_64),  # counted, then read: the image path
        "loop_other.tar": _tar_header(b"a.txt", near_2_64),  # skipped: the other path
        "past_end.tar": _tar_header(b"a.jpg", b"%011o\0" % 10**6),  # 1 MB claimed, 1 KB there
        "long_name.tar": _tar_header(b"././@LongLink", b"%011o\0" % 10**6, b"L"),
    }
    for name, head in cases.items():
        (tmp_path / name).write_bytes(head + bytes(1024))
        r = subprocess.run([CLI, "tokenize", str(tmp_path / name), "-o", str(tmp_path / "out") + "/"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        assert "claims" in r.stderr and "left (truncated or damaged)" in r.stderr, (name, r.stderr)
        assert "1 of 1 images failed" in r.stderr, (name, r.stderr)


def test_shard_members_that_leave_the_folder_are_skipped(tmp_path):
    """Output members are named after input members: an absolute name or a '..' component would
    carry a path traversal into the output shard. Such members are skipped and named."""
    shard = tmp_path / "in.tar"
    png = save_png(photo(1), str(tmp_path / "p.png"))
    with tarfile.open(shard, "w") as t:
        t.add(png, "ok/000001.png")
        t.add(png, "../000002.png")
        t.add(png, "a/../../000003.png")
        info = t.gettarinfo(png, "abs/000004.png")  # (add() strips a leading '/')
        info.name = "/abs/000004.png"
        with open(png, "rb") as f:
            t.addfile(info, f)
        t.add(png, "a..b/000005.png")  # '..' inside a name is fine
    out = tmp_path / "out"
    r = cli("tokenize", shard, "--budget", 64, "-o", out, check=False)
    assert r.returncode == 1, r.stderr
    assert "3 of 5 images failed" in r.stderr, r.stderr
    assert r.stderr.count("leaves the shard's folder") == 3, r.stderr
    with tarfile.open(out / "in.tar") as t:
        assert sorted(t.getnames()) == ["a..b/000005.safetensors", "ok/000001.safetensors"]
