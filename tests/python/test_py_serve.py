"""The service (fovea.serve), its client (fovea.Client) and the hand-off forms (fovea.handoff).

In-process through FastAPI's TestClient, and as `python3 -m fovea.serve` in a subprocess (the
client over a real socket, raw sockets for slow and malformed requests, a client that goes away,
SIGTERM, SIGKILL with --cache-dir). Tiny fixture models only; no timing assertions.
"""
import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fovea
import fovea.handoff as handoff
from pyhelpers import ASTRONAUT, SOURCE, cli, photo, save_png

pytest.importorskip("fastapi")
pytest.importorskip("multipart")
from fastapi.testclient import TestClient  # noqa: E402

from fovea.serve import ServeConfig, create_app  # noqa: E402
from fovea.serve.batching import Batcher, Busy  # noqa: E402
from fovea.serve.cache import unpack  # noqa: E402

HF_VIT = os.path.join(SOURCE, "tests", "data", "encoder", "hf_vit", "model.safetensors")
MODELS = {"vit": HF_VIT, "rand": "random:vit-s16"}


def jpeg():
    with open(ASTRONAUT, "rb") as f:
        return f.read()


def png(a):
    return fovea.encode_image(a)


@pytest.fixture(scope="module")
def client():
    app = create_app(MODELS, ServeConfig(max_budget=2000, max_sessions=2))
    with TestClient(app) as c:
        yield c


def post(c, route, image=None, name="a.jpg", headers=None, **fields):
    files = {"image": (name, image)} if image is not None else None
    return c.post(route, files=files, data={k: str(v) for k, v in fields.items()}, headers=headers)


def error_of(r):
    body = r.json()
    assert list(body) == ["error"] and "\n" not in body["error"], r.text
    return body["error"]


# ---- routes ---------------------------------------------------------------------------------------

def test_health_models_page_metrics(client):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["models"] == ["vit", "rand"] and h["queued"] == {"vit": 0, "rand": 0}
    m = client.get("/v1/models").json()
    assert m["default"] == "vit"
    vit, rand = m["models"]
    g = vit["config"]["position_grid"]
    assert vit["default_foveation"] == "windows" and vit["default_budget"] == 2 * g * g
    assert rand["default_foveation"] == "mixed" and rand["random_weights"]
    page = client.get("/").text
    assert "fovea explorer" in page and "http://" not in page and "https://" not in page  # nothing from elsewhere
    post(client, "/v1/tokenize", jpeg(), model="rand")
    post(client, "/v1/encode", jpeg(), model="rand", budget=16)
    post(client, "/v1/encode", jpeg(), model="rand", budget="x")
    text = client.get("/metrics").text
    for line in ('fovea_requests_total{method="POST",route="/v1/tokenize",status="200"}',
                 'fovea_errors_total{route="/v1/encode",status="400"} 1.0', "fovea_encode_queue{model=\"rand\"}",
                 "fovea_encode_batch_requests_bucket", "fovea_encode_ms_bucket", 'fovea_cache_lookups_total{result="miss"',
                 "fovea_cache_bytes"):
        assert line in text, line


def test_encode_is_the_cli_file(tmp_path, client):
    """A lone request's file is `fovea encode -o`'s: the same tensors and metadata (but the source)."""
    img = save_png(photo(3), str(tmp_path / "p.png"))
    with open(img, "rb") as f:
        data = f.read()
    for model, fix in (("vit", "60,50"), ("rand", "120,90,20")):
        r = post(client, "/v1/encode", data, name="p.png", model=model, fixations=fix)
        assert r.status_code == 200, r.text
        served, smeta = handoff.parse_safetensors(r.content)
        out = tmp_path / f"{model}.safetensors"
        cli("encode", img, "--model", MODELS[model], "--fixation", fix, "-o", out)
        local = fovea.load(out)
        assert sorted(served) == sorted(local.keys())
        for k in served:
            np.testing.assert_allclose(served[k], local[k], rtol=0, atol=1e-5, err_msg=k)
        lmeta = dict(local.metadata)
        assert {k: v for k, v in smeta.items() if k != "source"} == {k: v for k, v in lmeta.items() if k != "source"}
        assert int(r.headers["X-Fovea-Tokens"]) == served["embeddings"].shape[0]


def test_path_requests_are_byte_identical_to_the_cli(tmp_path):
    """An image named by its path (--allow-path) has the CLI's source too: the very bytes."""
    img = save_png(photo(8), str(tmp_path / "p.png"))
    app = create_app(MODELS, ServeConfig(allow_paths=(str(tmp_path),), warmup=False))
    with TestClient(app) as c:
        r = post(c, "/v1/encode", path=img, fixations="70,40")
        assert r.status_code == 200, r.text
        cli("encode", img, "--model", HF_VIT, "--fixation", "70,40", "-o", tmp_path / "e.safetensors")
        assert r.content == (tmp_path / "e.safetensors").read_bytes()
        r = post(c, "/v1/tokenize", path=img, model="none", fixations="70,40", budget=50)
        cli("tokenize", img, "--fixation", "70,40", "--budget", "50", "-o", tmp_path / "t.safetensors")
        assert r.content == (tmp_path / "t.safetensors").read_bytes()
        # Paths outside the allowed folder, relative, missing, folders.
        for path, status, message in ((ASTRONAUT, 403, "is not under an --allow-path folder"),
                                      ("p.png", 400, "path must be absolute, got 'p.png'"),
                                      (str(tmp_path / "none.png"), 404, "no file"),
                                      (str(tmp_path), 400, "is a folder, not an image"),
                                      (str(tmp_path / ".." / os.path.basename(tmp_path) / ".." / "x.png"), 403, "")):
            r = post(c, "/v1/encode", path=path)
            assert r.status_code == status and message in error_of(r), (path, r.text)
        r = post(c, "/v1/encode", jpeg(), path=img)
        assert r.status_code == 400 and error_of(r) == "send an image or a path, not both"
    with TestClient(create_app({"rand": "random:vit-s16"}, ServeConfig(warmup=False))) as c:
        r = post(c, "/v1/encode", path=img)
        assert r.status_code == 403 and error_of(r).startswith("this service reads no paths: start it with --allow-path")


def test_json_in_and_out(client):
    """A JSON body (the image base64) answers as the form does; format=json gives the file's
    tensors (base64) and metadata."""
    data = jpeg()
    form = post(client, "/v1/encode", data, name="a.jpg", model="rand", fixations="100,120", budget=40)
    body = {"image": base64.b64encode(data).decode(), "filename": "a.jpg", "model": "rand", "fixations": [[100, 120]],
            "budget": 40}
    r = client.post("/v1/encode", json=body)
    assert r.status_code == 200 and r.content == form.content
    j = client.post("/v1/encode?format=json", json=body).json()
    tensors, meta = handoff.parse_safetensors_json(j)
    want, wmeta = handoff.parse_safetensors(form.content)
    assert meta == wmeta and sorted(tensors) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(tensors[k], want[k])
    assert j["tokens"] == want["embeddings"].shape[0] == len(j["token_norms"])
    np.testing.assert_allclose(j["token_norms"], np.linalg.norm(want["embeddings"], axis=1), atol=1e-3)
    one = client.post("/v1/encode", json={**body, "format": "json", "tensors": "embeddings"}).json()
    assert list(one["tensors"]) == ["embeddings"]
    r = client.post("/v1/encode", json={**body, "format": "json", "tensors": "embedings"})
    assert r.status_code == 400 and error_of(r).startswith("tensors: no tensor 'embedings'; the file holds embeddings")


@pytest.mark.parametrize("body,message", [
    (b"{", "malformed JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b"[" * 100000 + b"]" * 100000, "malformed JSON: nested too deeply"),
    (b"[1, 2]", "the JSON body must be an object, not list"),
    (b'{"image": 5}', "image must be the file's bytes in base64 (a string)"),
    (b'{"image": "not base64!"}', "image is not valid base64"),
    (b'{"image": "", "budget": [1]}', "budget must be an integer, got '[1]'"),
    (b'{"image": "", "budget": 1e400}', "budget must be an integer, got 'Infinity'"),
    (b'{"image": "", "fixations": [[NaN, 1]]}', "fixations: values must be finite"),
    (b'{"image": "", "fixations": {"x": 1}}', "fixations must be JSON [[...], ...] or 'a,b;c,d' numbers, got '{\"x\": 1}'"),
    (b'{"image": "", "surprise": 1}', "unknown field 'surprise' for /v1/encode"),
    (b'{"budget": 3}', "no image: send it as the file field 'image' (curl -F image=@photo.jpg), base64 in a JSON "
                       "object's \"image\", or a path"),
])
def test_hostile_json_is_one_line_400(client, body, message):
    r = client.post("/v1/encode", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert error_of(r) == message


def test_cache_keys_on_bytes_model_query_budget_mode(client):
    data = jpeg()
    a = post(client, "/v1/encode", data, model="rand", fixations="[[100, 120]]", budget=64)
    b = post(client, "/v1/encode", data, model="rand", fixations="100,120", budget=64)
    assert a.headers["X-Fovea-Cache"] == "miss" and b.headers["X-Fovea-Cache"] == "hit" and a.content == b.content
    for change in ({"fixations": "101,120"}, {"budget": 65}, {"foveation": "windows"}, {"precision": "bf16"},
                   {"precision": "int8"},
                   {"model": "vit"}, {"regions": "0,0,50,50"}):
        r = post(client, "/v1/encode", data, **{"model": "rand", "fixations": "100,120", "budget": 64, **change})
        assert r.status_code == 200 and r.headers["X-Fovea-Cache"] == "miss", change
    r = post(client, "/v1/encode", data + b"\0", model="rand", fixations="100,120", budget=64)  # other bytes
    assert r.headers["X-Fovea-Cache"] == "miss"
    r = post(client, "/v1/encode", data, name="b.jpg", model="rand", fixations="100,120", budget=64)  # other source
    assert r.headers["X-Fovea-Cache"] == "miss" and handoff.parse_safetensors(r.content)[1]["source"] == "b.jpg"


def test_cache_dir_survives_a_restart(tmp_path):
    folder = tmp_path / "cache"
    cfg = ServeConfig(cache_dir=str(folder), warmup=False, cache_bytes=1 << 20)
    with TestClient(create_app({"rand": "random:vit-s16"}, cfg)) as c:
        first = post(c, "/v1/encode", jpeg(), budget=16)
        assert first.headers["X-Fovea-Cache"] == "miss"
    names = sorted(os.listdir(folder))
    assert names[-1] == "secret" and len(names) == 2 and names[0].endswith(".entry")
    assert oct(os.stat(folder / "secret").st_mode & 0o777) == "0o600"
    assert unpack((folder / names[0]).read_bytes()).body == first.content
    with TestClient(create_app({"rand": "random:vit-s16"}, cfg)) as c:
        again = post(c, "/v1/encode", jpeg(), budget=16)
        assert again.headers["X-Fovea-Cache"] == "disk" and again.content == first.content
        assert post(c, "/v1/encode", jpeg(), budget=16).headers["X-Fovea-Cache"] == "hit"


def test_tokenize_file_summary_previews(client):
    f = post(client, "/v1/tokenize", jpeg(), model="none", budget=100)
    tensors, meta = handoff.parse_safetensors(f.content)
    assert f.headers["content-type"] == "application/octet-stream"
    assert tensors["patches"].shape[0] <= 100 and meta["budget"] == "100"
    r = post(client, "/v1/tokenize", jpeg(), model="vit", fixations="200,200", format="json", overlay=1, seen=1,
             rgb=1, tensors="positions,levels")
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["foveation"] == "windows" and b["windows"] and b["tokens"] == len(b["positions"]) == len(b["token_boxes"])
    assert b["metadata"]["query"] == "fixation(200,200)" and sorted(b["tensors"]) == ["levels", "positions"]
    assert len(b["token_norms"]) == len(b["token_levels"]) == len(b["token_covered"]) == b["tokens"]
    assert fovea.decode_image(base64.b64decode(b["overlay_png"])).shape == (512, 512, 3)
    assert fovea.decode_image(base64.b64decode(b["seen_png"])).shape == (512, 512, 3)
    # Each token's patch as the model sees it; a level-0 token's is the image's pixels.
    p = b["patch_size"]
    rgb = np.frombuffer(base64.b64decode(b["patches_rgb"]), np.uint8).reshape(b["tokens"], p, p, 3)
    i = b["token_levels"].index(0) if 0 in b["token_levels"] else None
    if i is not None:
        x0, y0 = (int(v) for v in b["token_boxes"][i][:2])
        np.testing.assert_array_equal(rgb[i], fovea.decode_image(jpeg())[y0:y0 + p, x0:x0 + p])


@pytest.mark.parametrize("fields,status,message", [
    ({"budget": "x"}, 400, "budget must be an integer, got 'x'"),
    ({"budget": "5000"}, 400, "budget must be in [1, 2000], got 5000"),
    ({"model": "nope"}, 404, "no model 'nope' is served (GET /v1/models lists them: vit, rand)"),
    ({"fixations": "1,2,3,4,5"}, 400, "fixations: each needs 2 or 3 or 4 numbers, one has 5"),
    ({"fixations": "[[1, 2"}, 400, "fixations must be JSON [[...], ...] or 'a,b;c,d' numbers, got '[[1, 2'"),
    ({"regions": "10,10,5,5"}, 400, "a region needs x1 > x0 and y1 > y0"),
    ({"foveation": "fancy"}, 400, "foveation must be one of windows, mixed; got 'fancy'"),
    ({"precision": "fp8"}, 400, "precision must be one of fp32, bf16, int8; got 'fp8'"),
    ({"format": "xml"}, 400, "format must be one of safetensors, json; got 'xml'"),
    ({"bogus": "1"}, 400, "unknown field 'bogus' for /v1/encode"),
])
def test_bad_fields_are_one_line_4xx(client, fields, status, message):
    r = post(client, "/v1/encode", jpeg(), **fields)
    assert r.status_code == status
    assert error_of(r) == message


def test_bad_requests_are_one_line_4xx(client):
    r = post(client, "/v1/encode", b"not an image")
    assert r.status_code == 400 and error_of(r).startswith("image a.jpg: cannot decode 'a.jpg': not an image file")
    r = post(client, "/v1/encode", jpeg()[:4000])
    assert r.status_code == 400 and "JPEG" in error_of(r)
    r = post(client, "/v1/encode", b"")
    assert r.status_code == 400 and error_of(r) == "the image file is empty"
    r = client.post("/v1/encode", content=b"<xml/>", headers={"content-type": "text/xml"})
    assert r.status_code == 415 and error_of(r).startswith("send a multipart form")
    r = client.post("/v1/encode", content=b"--x\r\nbroken", headers={"content-type": "multipart/form-data; boundary=y"})
    assert r.status_code == 400
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and error_of(r) == "no route GET /v1/nothing (GET /docs lists the routes)"
    r = client.get("/v1/encode")
    assert r.status_code == 405 and error_of(r) == "GET is not allowed on /v1/encode"


def test_limits():
    app = create_app({"rand": "random:vit-s16"},
                     ServeConfig(max_upload_bytes=len(jpeg()) - 1, max_pixels=100 * 100, max_queue=0, warmup=False))
    with TestClient(app) as c:
        r = post(c, "/v1/encode", jpeg())
        assert r.status_code == 413 and error_of(r).startswith("the request body is ")
        # No Content-Length (a chunked body): counted as it arrives.
        r = c.post("/v1/encode", content=iter([jpeg()[:100000], jpeg()[100000:]]),
                   headers={"content-type": "multipart/form-data; boundary=x"})
        assert r.status_code == 413 and error_of(r) == f"the request body is over the limit of {len(jpeg()) - 1} bytes"
        r = post(c, "/v1/tokenize", png(photo(1, 100, 120)), name="big.png")
        assert r.status_code == 413 and "big.png" in error_of(r), r.text
        r = post(c, "/v1/encode", png(photo(1, 64, 64)))
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert error_of(r) == "0 encodes already queued for this model (limit 0)"
        assert 'fovea_rejected_total{reason="busy"} 1.0' in c.get("/metrics").text


def test_api_key():
    app = create_app({"rand": "random:vit-s16"}, ServeConfig(api_key="s3cret", warmup=False))
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200 and c.get("/").status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        assert error_of(r) == "a valid API key is required: Authorization: Bearer KEY or X-API-Key: KEY"
        r = c.get("/metrics", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and error_of(r) == "the API key is not valid"
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert post(c, "/v1/tokenize", jpeg(), headers={"X-API-Key": "s3cret"}).status_code == 200


class HeldModel:
    """A model whose encodes wait until released, so that later requests queue up."""

    def __init__(self, model):
        self.model = model
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = []
        self.lock = threading.Lock()

    def encode_full(self, t, precision, threads):
        with self.lock:
            self.calls.append(len(t))
        self.started.set()
        self.release.wait(60)
        return self.model.encode_full(t, precision, threads)

    def encode_many(self, ts, precision, threads):
        with self.lock:
            self.calls.append([len(t) for t in ts])
        self.release.wait(60)
        return self.model.encode_many(ts, precision, threads)


def test_request_timeout_drops_the_work():
    app = create_app({"rand": "random:vit-s16"}, ServeConfig(request_timeout_s=0.5, encode_workers=1, warmup=False))
    held = HeldModel(fovea.Model("random:vit-s16"))
    with TestClient(app) as c:
        svc = app.state.service
        svc.batchers["rand"].model = held
        held.started.clear()
        threading.Thread(target=lambda: post(c, "/v1/encode", png(photo(2, 64, 64)), budget=4)).start()
        assert held.started.wait(30)  # one encode holds the worker: the next one waits in the queue
        r = post(c, "/v1/encode", png(photo(3, 64, 64)), budget=4)
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        assert error_of(r) == "the encode did not finish within the request timeout of 0.5 s; its work was dropped"
        held.release.set()
        for _ in range(300):
            if svc.batchers["rand"].running() == 0:
                break
            time.sleep(0.01)
        assert held.calls == [4]  # the dropped request never reached the encoder
        assert 'fovea_dropped_total{reason="timeout"}' in c.get("/metrics").text


# ---- batching -------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,foveation", [(HF_VIT, "windows"), (HF_VIT, "mixed"), ("random:vit-s16", "mixed")])
def test_batcher_encodes_queued_requests_together(spec, foveation):
    model = fovea.Model(spec)
    held = HeldModel(model)
    b = Batcher(held, max_batch=3, max_tokens=1 << 30, max_queue=8, workers=1)
    ts = [fovea.tokenize(photo(i), fixations=[(40 + 10 * i, 60)], model=model, foveation=foveation) for i in range(6)]
    futs = [b.submit(ts[0])]
    assert held.started.wait(60)
    futs += [b.submit(t) for t in ts[1:]]  # queued behind the held encode
    held.release.set()
    results = [f.result(60) for f in futs]
    b.close()
    assert [len(c) if isinstance(c, list) else 1 for c in held.calls] == [1, 3, 2]
    assert [n for _, n in results] == [1, 3, 3, 3, 2, 2]
    for t, (e, _) in zip(ts, results):
        alone = model.encode_full(t)
        np.testing.assert_allclose(e.embeddings, alone.embeddings, rtol=0, atol=1e-4)
        assert (e.rows is None and alone.rows is None) or (e.rows == alone.rows).all()
        if alone.window_class_tokens is not None:
            np.testing.assert_allclose(e.window_class_tokens, alone.window_class_tokens, rtol=0, atol=1e-4)


def test_batcher_caps_the_tokens_of_a_batch():
    model = fovea.Model("random:vit-s16")
    held = HeldModel(model)
    ts = [fovea.tokenize(photo(0), budget=16, model=model)] * 5
    b = Batcher(held, max_batch=8, max_tokens=2 * len(ts[0]) + 1, workers=1)
    futs = [b.submit(ts[0])]
    assert held.started.wait(60)
    futs += [b.submit(t) for t in ts[1:]]
    held.release.set()
    assert [f.result(60)[1] for f in futs] == [1, 2, 2, 2, 2]
    b.close()
    assert [len(c) if isinstance(c, list) else 1 for c in held.calls] == [1, 2, 2]


def test_a_large_request_runs_beside_the_small_ones():
    """While a large encode runs on its own lane, small requests keep flowing on their worker, in
    arrival order; a second large request waits for the first."""
    model = fovea.Model("random:vit-s16")
    held = HeldModel(model)
    small = fovea.tokenize(photo(0), budget=8, model=model)
    large = fovea.tokenize(photo(1), budget=64, model=model)
    b = Batcher(held, max_batch=2, max_tokens=32, workers=1)
    first = b.submit(large)
    assert held.started.wait(60)
    second = b.submit(large)
    smalls = [b.submit(small) for _ in range(4)]
    time.sleep(0.2)
    with held.lock:
        calls = list(held.calls)
    assert calls == [len(large), [len(small)] * 2]  # the second large one waits; small ones went ahead
    held.release.set()
    assert [f.result(60)[1] for f in smalls] == [2, 2, 2, 2] and second.result(60)[1] == 1 and first.result(60)
    b.close()


def test_batcher_drops_cancelled_requests_busy_and_close():
    model = fovea.Model("random:vit-s16")
    held = HeldModel(model)
    b = Batcher(held, max_batch=2, max_queue=1, workers=1)
    t = fovea.tokenize(photo(0), budget=16)
    first = b.submit(t)
    assert held.started.wait(60)
    second = b.submit(t)
    with pytest.raises(Busy, match=r"1 encodes already queued for this model \(limit 1\)"):
        b.submit(t)
    assert second.cancel()  # a client that went away: its slot frees at once
    third = b.submit(t)
    held.release.set()
    b.close()  # encodes what is queued first
    assert first.result(60)[1] == 1 and third.result(60)[1] == 1 and held.calls == [len(t), len(t)]
    with pytest.raises(Busy, match="shutting down"):
        b.submit(t)


def test_encode_many_checks_its_input():
    model = fovea.Model("random:vit-s16")
    assert model.encode_many([]) == []
    with pytest.raises(TypeError, match="encode_many takes a list of fovea.Tokens"):
        model.encode_many([np.zeros(3)])
    a = fovea.tokenize(photo(0), budget=16, model=model)
    b = fovea.tokenize(photo(1), budget=16, model=model, dtype="f16")
    with pytest.raises(ValueError, match="one dtype"):
        model.encode_many([a, b])


# ---- video sessions -------------------------------------------------------------------------------

def frames(n):
    base = photo(5, 160, 192)
    out = []
    for i in range(n):
        f = base.copy()
        f[20:40, 20 + 8 * i:40 + 8 * i] = 255  # a small moving square
        out.append(f)
    return out


def test_video_session_equals_local_session(client):
    # token_threshold 0.1: at the default (0.07) this 60-token fixture recomputes every token of
    # the last frame, and the test checks that only some are.
    r = post(client, "/v1/video/sessions", model="vit", budget=60, fixation="30,30", token_threshold=0.1)
    assert r.status_code == 201, r.text
    assert r.json()["fixation"] == [30, 30]
    sid = r.json()["session"]
    local = fovea.VideoSession(fovea.Model(HF_VIT), budget=60, token_threshold=0.1)
    for i, f in enumerate(frames(4)):
        fields = {} if i % 2 else {"fixations": "30,30"}  # the session's fixation when a frame brings none
        r = post(client, f"/v1/video/sessions/{sid}/frames", png(f), **fields)
        assert r.status_code == 200, r.text
        got, meta = handoff.parse_safetensors(r.content)
        want = local.process(f, fixations=[(30, 30)])
        np.testing.assert_array_equal(got["positions"], want.positions)
        np.testing.assert_array_equal(got["recomputed"], want.recomputed)
        np.testing.assert_allclose(got["embeddings"], want.embeddings, rtol=0, atol=1e-5)
        assert meta["frame"] == str(i) and meta["refresh"] == ("true" if i == 0 else "false")
    # This 60-token fixture's square moves over most tokens' context: the first reused frame does
    # more than VideoParams::exact_above_work of a full encode's work, so the frames after it are
    # encoded exactly (every token recomputed), in the service as in the local session.
    assert 0 < int(meta["recomputed_tokens"]) <= int(meta["tokens"])
    s = client.get(f"/v1/video/sessions/{sid}").json()
    assert s["frames"] == 4 and 0 <= s["reuse_rate"] < 1
    assert client.delete(f"/v1/video/sessions/{sid}").json()["closed"]
    r = post(client, f"/v1/video/sessions/{sid}/frames", png(frames(1)[0]))
    assert r.status_code == 404 and error_of(r).startswith(f"no video session '{sid}'")


def test_video_session_limits(client):
    sids = [post(client, "/v1/video/sessions", model="none").json()["session"] for _ in range(2)]
    r = post(client, "/v1/video/sessions", model="none")
    assert r.status_code == 503 and error_of(r).startswith("2 video sessions are open (limit 2)")
    r = post(client, f"/v1/video/sessions/{sids[0]}/frames", b"garbage", name="f.png")
    assert r.status_code == 400 and error_of(r).startswith("frame f.png: ")
    r = post(client, f"/v1/video/sessions/{sids[0]}/frames", png(frames(1)[0]), format="json", tensors="positions")
    assert r.json()["refresh"] and r.json()["refresh_reason"] == "first" and list(r.json()["tensors"]) == ["positions"]
    r = post(client, "/v1/video/sessions", model="none", fixation="1,2,3,4,5")
    assert r.status_code == 400 and error_of(r) == "fixation: each needs 2 or 3 or 4 numbers, one has 5"
    for s in sids:
        client.delete(f"/v1/video/sessions/{s}")


def test_video_session_expires_when_idle():
    app = create_app({"rand": "random:vit-s16"}, ServeConfig(session_idle_s=0.05, warmup=False))
    with TestClient(app) as c:
        sid = post(c, "/v1/video/sessions", model="none").json()["session"]
        time.sleep(0.2)
        r = c.get(f"/v1/video/sessions/{sid}")
        assert r.status_code == 404 and "expired after 0.05 s idle" in error_of(r)


# ---- hand-off: the shapes and dtypes each runtime documents ---------------------------------------

@pytest.fixture(scope="module")
def encoding():
    model = fovea.Model(HF_VIT)
    return model.encode_full(fovea.tokenize(photo(2), fixations=[(50, 50)], model=model))


def test_handoff_vllm(encoding):
    e = encoding
    n, d = e.embeddings.shape
    v = handoff.vllm(e, "USER: <image>\nWhat is it? ASSISTANT:")
    img = v["multi_modal_data"]["image"]
    assert img.shape == (1, n, d) and img.dtype == np.float32  # (images, feature size, hidden size)
    part = handoff.vllm_image_embeds(e, "npy")
    assert part["type"] == "image_embeds"
    raw = base64.b64decode(part["image_embeds"], validate=True)
    assert raw[:6] == b"\x93NUMPY"  # what vLLM's ImageEmbeddingMediaIO checks for
    np.testing.assert_array_equal(np.load(io.BytesIO(raw)), e.embeddings)
    torch = pytest.importorskip("torch")
    raw = base64.b64decode(handoff.vllm_image_embeds(e)["image_embeds"], validate=True)
    t = torch.load(io.BytesIO(raw), weights_only=True)  # as vLLM loads it
    assert tuple(t.shape) == (n, d) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.numpy(), e.embeddings)


def test_handoff_sglang_hf_llama_cpp(encoding):
    e = encoding
    n, d = e.embeddings.shape
    assert handoff.image_token_count(e) == n
    s = handoff.sglang(e, image_grid_thw=[[1, 2, 2]])
    assert s["format"] == "precomputed_embedding" and s["feature"].shape == (n, d) and s["image_grid_thw"] == [[1, 2, 2]]
    ids = [1, 5] + [9] * n + [7]
    text = np.arange(len(ids) * d, dtype=np.float32).reshape(len(ids), d)
    merged = handoff.hf_inputs_embeds(text, ids, 9, e)
    np.testing.assert_array_equal(merged[2:2 + n], e.embeddings)
    np.testing.assert_array_equal(merged[[0, 1, -1]], text[[0, 1, -1]])
    with pytest.raises(ValueError, match=f"the prompt holds 1 image tokens \\(id 9\\); the image has {n} embeddings"):
        handoff.hf_inputs_embeds(text[:4], [1, 9, 2, 3], 9, e)
    ll = handoff.llama_cpp(e, n_past=10)
    assert ll["embd"].flags.c_contiguous and ll["embd"].dtype == np.float32 and (ll["n_tokens"], ll["n_embd"]) == (n, d)
    assert ll["pos"].dtype == np.int32 and ll["pos"].tolist() == list(range(10, 10 + n)) and ll["n_pos"] == n
    torch = pytest.importorskip("torch")
    # transformers' LLaVA: inputs_embeds.masked_scatter(special_image_mask, image_features)
    t = torch.from_numpy(text.copy())
    mask = (torch.tensor(ids) == 9)[:, None].expand_as(t)
    np.testing.assert_array_equal(t.masked_scatter(mask, torch.from_numpy(e.embeddings)).numpy(), merged)


def test_handoff_positions_for_mrope(encoding):
    e = encoding
    n = len(e)
    p = handoff.positions(e)
    assert p.shape == (n, 4) and p.dtype == np.float32
    ids, nxt = handoff.mrope_positions(e, start=5)
    unit = p[:, 2].min()
    assert ids.shape == (3, n) and ids.dtype == np.int64 and (ids[0] == 5).all()
    np.testing.assert_array_equal(ids[1], 5 + np.floor(p[:, 1] / unit))  # h: the centre's row
    np.testing.assert_array_equal(ids[2], 5 + np.floor(p[:, 0] / unit))  # w: its column
    assert nxt == ids[1:].max() + 1
    ll = handoff.llama_cpp(e, n_past=5, mrope=True)
    pos = ll["pos"].reshape(4, n)  # section-major, as llama.cpp's decode_embd_batch lays them out
    np.testing.assert_array_equal(pos[:3], ids)
    assert (pos[3] == 0).all() and ll["n_pos"] == nxt - 5


def test_safetensors_bytes_round_trip(tmp_path):
    t = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
         "c": np.array([1, 0, 1], np.uint8)}
    data = handoff.safetensors_bytes(t, {"k": "v"})
    (tmp_path / "x.safetensors").write_bytes(data)
    f = fovea.load(tmp_path / "x.safetensors")  # the library reads it
    assert f.metadata == {"k": "v"} and sorted(f.keys()) == ["a", "b", "c"]
    back, meta = handoff.parse_safetensors(data)
    for k in t:
        np.testing.assert_array_equal(back[k], t[k])
    j = json.loads(json.dumps(handoff.safetensors_json(data)))
    again, meta2 = handoff.parse_safetensors_json(j)
    assert meta2 == {"k": "v"} and all((again[k] == t[k]).all() for k in t)
    with pytest.raises(ValueError, match="not a safetensors file"):
        handoff.parse_safetensors(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")


# ---- the process: python3 -m fovea.serve, the client, raw sockets, signals ----------------------

def start_server(*args):
    p = subprocess.Popen([sys.executable, "-m", "fovea.serve", "--port", "0", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("fovea serve: http://"):
        p.kill()
        raise AssertionError(f"the service did not start: {line!r} {p.stderr.read()}")
    return p, line.split()[2]


def stop(p):
    if p.poll() is None:
        p.kill()
        p.wait()


def address(url):
    host, port = url.split("//")[1].split(":")
    return host, int(port)


def raw_request(url, data: bytes, pause_after: float = 0.0, read_timeout: float = 30.0) -> bytes:
    s = socket.create_connection(address(url))
    s.settimeout(read_timeout)
    try:
        s.sendall(data)
        time.sleep(pause_after)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def metric(url, name):
    text = fovea.Client(url)._request("GET", "/metrics")[0].decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_process_client_slow_and_gone_clients_and_sigterm(tmp_path):
    # The request timeout runs from a request's first byte to its answer, so it must cover the
    # 1.5 s batch window plus an encode on a loaded machine; the slow clients wait it out.
    p, url = start_server("--model", f"vit={HF_VIT}", "--model", "random:vit-s16", "--batch-window-ms", "1500",
                          "--request-timeout-s", "5", "--allow-path", str(tmp_path))
    try:
        c = fovea.Client(url)
        assert c.health()["models"] == ["vit", "random-vit-s16"]
        img = photo(4)
        e = c.encode(img, fixations=[(60, 50)])
        model = fovea.Model(HF_VIT)
        alone = model.encode_full(fovea.tokenize(fovea.decode_image(png(img)), fixations=[(60, 50)], model=model))
        np.testing.assert_allclose(e.embeddings, alone.embeddings, rtol=0, atol=1e-5)
        assert e.cache == "miss" and c.encode(img, fixations=[(60, 50)]).cache == "hit"
        path = save_png(img, str(tmp_path / "p.png"))
        assert c.encode(path=path, fixations=[(60, 50)]).tensors.keys() == e.tensors.keys()
        t = c.tokenize(ASTRONAUT, budget=50, model="random-vit-s16")
        assert t["tokens"] <= 50 and t.patches.shape[0] == t["tokens"] and t.patches.dtype == np.float32
        assert t.metadata["budget"] == "50" and t.cache == "miss"
        with pytest.raises(fovea.client.ServiceError) as err:
            c.encode(img, budget=0)
        assert err.value.status == 400 and err.value.message == "budget must be in [1, 4096], got 0"
        with c.video_session(budget=40, model="vit", fixation=(30, 30)) as s:
            rs = [s.push(f) for f in frames(3)]
            assert rs[0].refresh and not rs[2].refresh and rs[2].embeddings.shape[0] == len(rs[2])

        # A request head that never ends, a body that never ends, and bytes that are not HTTP.
        out = raw_request(url, b"POST /v1/encode HTTP/1.1\r\nHost: x\r\nContent-Type: multi")
        assert out.startswith(b"HTTP/1.1 408 ") and out.endswith(b'{"error": "the request head did not arrive within 5 s"}')
        out = raw_request(url, b"POST /v1/encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 1000\r\n\r\n{\"budget\": ")
        assert out.startswith(b"HTTP/1.1 408 ") and out.endswith(b'{"error":"the request body did not arrive within 5 s"}')
        out = raw_request(url, b"NOT HTTP AT ALL\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 400 ") and out.endswith(b'{"error": "malformed HTTP request"}')
        assert metric(url, 'fovea_dropped_total{reason="head_timeout"}') == 1

        # A client that goes away while its encode waits (held by the 1.5 s batch window): the
        # encode is dropped, never run.
        before = metric(url, "fovea_encode_batch_requests_count")
        body = json.dumps({"image": base64.b64encode(png(photo(9, 64, 64))).decode(), "model": "random-vit-s16"}).encode()
        head = f"POST /v1/encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        s = socket.create_connection(address(url))
        s.sendall(head.encode() + body)
        for _ in range(500):
            if c.health()["queued"]["random-vit-s16"] == 1:
                break
            time.sleep(0.01)
        s.close()
        for _ in range(500):
            if metric(url, 'fovea_dropped_total{reason="disconnect"}') == 1:
                break
            time.sleep(0.01)
        time.sleep(1.6)  # past the batch window: a job still queued would run now
        assert metric(url, 'fovea_dropped_total{reason="disconnect"}') == 1
        assert metric(url, "fovea_encode_batch_requests_count") == before and c.health()["queued"]["random-vit-s16"] == 0

        # SIGTERM with an encode in flight (held 1.5 s by the batch window): it is answered, then the
        # process exits 0.
        done = {}
        th = threading.Thread(target=lambda: done.setdefault("r", c.encode(photo(6), model="random-vit-s16")))
        th.start()
        for _ in range(600):
            if c.health()["queued"]["random-vit-s16"] == 1:
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        th.join(60)
        assert len(done["r"]) > 0
        assert p.wait(60) == 0
        assert p.stdout.read().strip().endswith("fovea serve: stopped")
    finally:
        stop(p)


_MAGIC_PART = b"FOVEA-SERVE-CA"


def test_sigkill_leaves_no_half_written_file(tmp_path):
    """Killed while it writes its disk cache: only whole entries and the secret remain, and a new
    process serves them."""
    folder = tmp_path / "cache"
    p, url = start_server("--model", "random:vit-s16", "--cache-dir", str(folder), "--no-warmup")
    try:
        c = fovea.Client(url)
        stop_at = time.monotonic() + 60
        n = 0
        errors = []

        def load():
            nonlocal n
            while time.monotonic() < stop_at:
                try:
                    c.encode(png(photo(n % 50, 64, 64)), budget=8 + n % 7)
                except Exception as e:  # the kill ends it
                    errors.append(e)
                    return
                n += 1

        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        while n < 20 and time.monotonic() < stop_at:
            time.sleep(0.01)
        p.kill()
        p.wait()
        for t in threads:
            t.join(60)
    finally:
        stop(p)
    names = sorted(os.listdir(folder))
    entries = [x for x in names if x.endswith(".entry")]
    # A kill between a temporary's write and its rename (filesystems without O_TMPFILE) may leave
    # a temporary name behind, never a part of an entry under an entry's name.
    temporaries = [x for x in names if x.startswith(".tmp-")]
    assert set(names) == set(entries) | set(temporaries) | {"secret"} and len(entries) >= 10
    for x in entries:
        assert unpack((folder / x).read_bytes()) is not None, x
    (folder / ".tmp-interrupted").write_bytes(_MAGIC_PART)  # as a kill mid-write leaves it
    p, url = start_server("--model", "random:vit-s16", "--cache-dir", str(folder), "--no-warmup")
    try:
        assert fovea.Client(url).encode(png(photo(0, 64, 64)), budget=8).cache == "disk"
        assert not [x for x in os.listdir(folder) if x.startswith(".tmp-")]  # removed at start
    finally:
        stop(p)


def test_process_refuses_a_bad_model():
    r = subprocess.run([sys.executable, "-m", "fovea.serve", "--model", "/nonexistent/model.safetensors", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("fovea: error: ") and r.stderr.count("\n") == 1


def test_api_key_over_the_socket():
    p, url = start_server("--model", "random:vit-s16", "--api-key", "k3y", "--no-warmup")
    try:
        with pytest.raises(fovea.client.ServiceError) as err:
            fovea.Client(url).models()
        assert err.value.status == 401
        assert fovea.Client(url, api_key="k3y").models()["default"] == "random-vit-s16"
        assert fovea.Client(url).health()["status"] == "ok"
    finally:
        stop(p)


def test_garbage_on_the_socket_is_logged_in_one_line_each():
    # Uvicorn logs a request it cannot parse with h11's traceback; a stream of garbage must not fill
    # the log (or a pipe nobody drains) with them: one line per bad request.
    p, url = start_server("--model", "random:vit-s16", "--no-warmup")
    try:
        for i in range(3):
            raw_request(url, b"\x16\x03\x01\x02\x00\x01\x00" + bytes([i]) * 40 + b"\r\n\r\n", read_timeout=10)
        assert fovea.Client(url).encode(png(photo(0, 64, 64)), budget=8).tensors["embeddings"].shape[0] >= 1
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        err = p.stderr.read()
    lines = [x for x in err.splitlines() if "Invalid HTTP request" in x]
    assert len(lines) == 3, err
    assert "Traceback" not in err and all("illegal request line" in x for x in lines), err


def test_a_body_over_the_limit_gets_its_413_while_the_client_still_sends():
    # The service answers 413 after 1 MiB of a chunked body and closes, while the client goes on
    # writing 16 MiB before it reads (as most HTTP clients do). A plain close with unread data
    # resets the connection: the client's write fails and the 413 is lost. The lingering close
    # reads and drops the rest first, so the whole body goes out and the 413 is read after it.
    p, url = start_server("--model", "random:vit-s16", "--no-warmup", "--max-upload-mb", "1")
    try:
        chunk = b"100000\r\n" + b"x" * 0x100000 + b"\r\n"
        for _ in range(3):
            s = socket.create_connection(address(url))
            s.settimeout(30)
            try:
                s.sendall(b"POST /v1/encode HTTP/1.1\r\nHost: h\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n")
                for _ in range(16):
                    s.sendall(chunk)
                s.sendall(b"0\r\n\r\n")
                head = b""
                while b"\r\n\r\n" not in head:
                    data = s.recv(65536)
                    if not data:
                        break
                    head += data
            finally:
                s.close()
            assert head.startswith(b"HTTP/1.1 413 "), head[:200]
        # and the service goes on serving
        assert fovea.Client(url).encode(png(photo(0, 64, 64)), budget=8).tensors["embeddings"].shape[0] >= 1
    finally:
        stop(p)
