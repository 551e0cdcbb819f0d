"""The service (fovea.serve), its client (fovea.Client) and the hand-off forms (fovea.handoff).

In-process through FastAPI's TestClient, and once as `python3 -m fovea.serve` in a subprocess (the
client over a real socket, SIGTERM). Tiny fixture models only; no timing assertions.
"""
import os
import signal
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

HF_VIT = os.path.join(SOURCE, "tests", "data", "encoder", "hf_vit", "model.safetensors")
MODELS = {"vit": HF_VIT, "rand": "random:vit-s16"}


def jpeg():
    with open(ASTRONAUT, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def client():
    app = create_app(MODELS, ServeConfig(max_budget=2000, max_sessions=2))
    with TestClient(app) as c:
        yield c


def post(c, route, image=None, name="a.jpg", **fields):
    files = {"image": (name, image)} if image is not None else None
    return c.post(route, files=files, data={k: str(v) for k, v in fields.items()})


def error_of(r):
    body = r.json()
    assert list(body) == ["error"] and "\n" not in body["error"], r.text
    return body["error"]


# ---- routes ---------------------------------------------------------------------------------------

def test_health_models_page_metrics(client):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["models"] == ["vit", "rand"]
    m = client.get("/v1/models").json()
    assert m["default"] == "vit"
    vit, rand = m["models"]
    g = vit["config"]["position_grid"]
    assert vit["default_foveation"] == "windows" and vit["default_budget"] == 2 * g * g
    assert rand["default_foveation"] == "mixed" and rand["random_weights"]
    assert "fovea explorer" in client.get("/").text
    post(client, "/v1/tokenize", jpeg(), model="rand")
    text = client.get("/metrics").text
    assert 'fovea_requests_total{method="POST",route="/v1/tokenize",status="200"}' in text
    assert "fovea_cache_bytes" in text and "fovea_encode_queue" in text


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


def test_cache_hits_identical_requests_only(client):
    data = jpeg()
    a = post(client, "/v1/encode", data, model="rand", fixations="[[100, 120]]", budget=64)
    b = post(client, "/v1/encode", data, model="rand", fixations="100,120", budget=64)
    c = post(client, "/v1/encode", data, model="rand", fixations="101,120", budget=64)
    d = post(client, "/v1/encode", data + b"\0", model="rand", fixations="100,120", budget=64)  # other bytes
    assert [x.status_code for x in (a, b, c, d)] == [200] * 4
    assert a.headers["X-Fovea-Cache"] == "miss" and b.headers["X-Fovea-Cache"] == "hit"
    assert a.content == b.content
    assert c.headers["X-Fovea-Cache"] == "miss" and d.headers["X-Fovea-Cache"] == "miss"


def test_tokenize_summary_overlay_and_file(client):
    r = post(client, "/v1/tokenize", jpeg(), model="vit", fixations="200,200", overlay=1)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["foveation"] == "windows" and b["windows"] and b["tokens"] == len(b["positions"])
    import base64
    png = base64.b64decode(b["overlay_png"])
    assert png.startswith(b"\x89PNG") and fovea.decode_image(png).shape == (512, 512, 3)
    f = post(client, "/v1/tokenize", jpeg(), model="none", budget=100, format="safetensors")
    tensors, meta = handoff.parse_safetensors(f.content)
    assert tensors["patches"].shape[0] <= 100 and meta["budget"] == "100"


@pytest.mark.parametrize("fields,status,message", [
    ({"budget": "x"}, 400, "budget must be an integer, got 'x'"),
    ({"budget": "5000"}, 400, "budget must be in [1, 2000], got 5000"),
    ({"model": "nope"}, 404, "no model 'nope' is served (GET /v1/models lists them: vit, rand)"),
    ({"fixations": "1,2,3,4,5"}, 400, "fixations: each needs 2 or 3 or 4 numbers, one has 5"),
    ({"fixations": "[[1, 2"}, 400, "fixations must be JSON [[...], ...] or 'a,b;c,d' numbers, got '[[1, 2'"),
    ({"regions": "10,10,5,5"}, 400, "a region needs x1 > x0 and y1 > y0"),
    ({"foveation": "fancy"}, 400, "foveation must be one of windows, mixed; got 'fancy'"),
    ({"precision": "fp8"}, 400, "precision must be one of fp32, bf16; got 'fp8'"),
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
    r = post(client, "/v1/encode", budget=3)
    assert r.status_code == 400 and error_of(r).startswith("no image")
    r = client.post("/v1/encode", content=b"{}", headers={"content-type": "application/json"})
    assert r.status_code == 415 and error_of(r).startswith("send a multipart form")
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
        r = post(c, "/v1/tokenize", png(photo(1, 100, 120)), name="big.png")
        assert r.status_code == 413 and "big.png" in error_of(r), r.text
        r = post(c, "/v1/encode", png(photo(1, 64, 64)))
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert error_of(r) == "0 encodes already queued for this model (limit 0)"
        assert 'fovea_rejected_total{reason="busy"} 1.0' in c.get("/metrics").text


# ---- batching -------------------------------------------------------------------------------------

class HeldModel:
    """A model whose first encode waits until released, so that later requests queue up."""

    def __init__(self, model):
        self.model = model
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = []

    def encode_full(self, t, precision, threads):
        self.calls.append(1)
        self.started.set()
        self.release.wait(60)
        return self.model.encode_full(t, precision, threads)

    def encode_many(self, ts, precision, threads):
        self.calls.append(len(ts))
        return self.model.encode_many(ts, precision, threads)


@pytest.mark.parametrize("spec,foveation", [(HF_VIT, "windows"), (HF_VIT, "mixed"), ("random:vit-s16", "mixed")])
def test_batcher_encodes_queued_requests_together(spec, foveation):
    model = fovea.Model(spec)
    held = HeldModel(model)
    b = Batcher(held, max_batch=3, max_tokens=1 << 30, max_queue=8)
    ts = [fovea.tokenize(photo(i), fixations=[(40 + 10 * i, 60)], model=model, foveation=foveation) for i in range(6)]
    futs = [b.submit(ts[0])]
    assert held.started.wait(60)
    futs += [b.submit(t) for t in ts[1:]]  # queued behind the held encode
    held.release.set()
    results = [f.result(60) for f in futs]
    b.close()
    assert held.calls == [1, 3, 2]
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
    b = Batcher(held, max_batch=8, max_tokens=2 * len(ts[0]))
    futs = [b.submit(ts[0])]
    assert held.started.wait(60)
    futs += [b.submit(t) for t in ts[1:]]
    held.release.set()
    assert [f.result(60)[1] for f in futs] == [1, 2, 2, 2, 2]
    b.close()
    assert held.calls == [1, 2, 2]


def test_video_session_expires_when_idle():
    app = create_app({"rand": "random:vit-s16"}, ServeConfig(session_idle_s=0.05, warmup=False))
    with TestClient(app) as c:
        sid = post(c, "/v1/video/sessions", model="none").json()["session"]
        time.sleep(0.2)
        r = c.get(f"/v1/video/sessions/{sid}")
        assert r.status_code == 404 and "expired after 0.05 s idle" in error_of(r)


def test_batcher_busy_and_close():
    model = fovea.Model("random:vit-s16")
    held = HeldModel(model)
    b = Batcher(held, max_batch=2, max_queue=1)
    t = fovea.tokenize(photo(0), budget=16)
    first = b.submit(t)
    assert held.started.wait(60)
    second = b.submit(t)
    with pytest.raises(Busy, match=r"1 encodes already queued for this model \(limit 1\)"):
        b.submit(t)
    held.release.set()
    b.close()  # encodes what is queued first
    assert first.result(60)[1] == 1 and second.result(60)[1] == 1
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


def png(a):
    from fovea._png import png_bytes
    return png_bytes(a)


def test_video_session_equals_local_session(client):
    r = post(client, "/v1/video/sessions", model="vit", budget=60)
    assert r.status_code == 201, r.text
    sid = r.json()["session"]
    local = fovea.VideoSession(fovea.Model(HF_VIT), budget=60)
    for i, f in enumerate(frames(4)):
        r = post(client, f"/v1/video/sessions/{sid}/frames", png(f), fixations="30,30")
        assert r.status_code == 200, r.text
        got, meta = handoff.parse_safetensors(r.content)
        want = local.process(f, fixations=[(30, 30)])
        np.testing.assert_array_equal(got["positions"], want.positions)
        np.testing.assert_array_equal(got["recomputed"], want.recomputed)
        np.testing.assert_allclose(got["embeddings"], want.embeddings, rtol=0, atol=1e-5)
        assert meta["frame"] == str(i) and meta["refresh"] == ("true" if i == 0 else "false")
    assert 0 < int(meta["recomputed_tokens"]) < int(meta["tokens"])  # only what the square touched
    s = client.get(f"/v1/video/sessions/{sid}").json()
    assert s["frames"] == 4 and 0 < s["reuse_rate"] < 1
    assert client.delete(f"/v1/video/sessions/{sid}").json()["closed"]
    r = post(client, f"/v1/video/sessions/{sid}/frames", png(frames(1)[0]))
    assert r.status_code == 404 and error_of(r).startswith(f"no video session '{sid}'")


def test_video_session_limits(client):
    sids = [post(client, "/v1/video/sessions", model="none").json()["session"] for _ in range(2)]
    r = post(client, "/v1/video/sessions", model="none")
    assert r.status_code == 503 and error_of(r).startswith("2 video sessions are open (limit 2)")
    r = post(client, f"/v1/video/sessions/{sids[0]}/frames", b"garbage", name="f.png")
    assert r.status_code == 400 and error_of(r).startswith("frame f.png: ")
    r = post(client, f"/v1/video/sessions/{sids[0]}/frames", png(frames(1)[0]), format="json")
    assert r.json()["refresh"] and r.json()["refresh_reason"] == "first"
    for s in sids:
        client.delete(f"/v1/video/sessions/{s}")


# ---- hand-off -------------------------------------------------------------------------------------

def test_handoff_forms():
    model = fovea.Model(HF_VIT)
    e = model.encode_full(fovea.tokenize(photo(2), fixations=[(50, 50)], model=model))
    n, d = e.embeddings.shape
    assert handoff.image_token_count(e) == n
    v = handoff.vllm(e, "USER: <image>\nWhat is it? ASSISTANT:")
    assert v["multi_modal_data"]["image"].shape == (1, n, d)
    s = handoff.sglang(e)
    assert s["format"] == "precomputed_embedding" and s["feature"].shape == (n, d)
    ll = handoff.llama_cpp(e)
    assert ll["embd"].flags.c_contiguous and ll["embd"].dtype == np.float32 and (ll["n_tokens"], ll["n_embd"]) == (n, d)
    ids = [1, 5] + [9] * n + [7]
    text = np.arange(len(ids) * d, dtype=np.float32).reshape(len(ids), d)
    merged = handoff.hf_inputs_embeds(text, ids, 9, e)
    np.testing.assert_array_equal(merged[2:2 + n], e.embeddings)
    np.testing.assert_array_equal(merged[[0, 1, -1]], text[[0, 1, -1]])
    with pytest.raises(ValueError, match=f"the prompt holds 1 image tokens \\(id 9\\); the image has {n} embeddings"):
        handoff.hf_inputs_embeds(text[:4], [1, 9, 2, 3], 9, e)


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
    with pytest.raises(ValueError, match="not a safetensors file"):
        handoff.parse_safetensors(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")


# ---- the process: python3 -m fovea.serve, the client, SIGTERM -------------------------------------

def start_server(*args):
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-m", "fovea.serve", "--port", "0", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    if not line.startswith("fovea serve: http://"):
        p.kill()
        raise AssertionError(f"the service did not start: {line!r} {p.stderr.read()}")
    return p, line.split()[2]


def test_process_client_and_sigterm(tmp_path):
    p, url = start_server("--model", f"vit={HF_VIT}", "--model", "random:vit-s16", "--batch-window-ms", "1500")
    try:
        c = fovea.Client(url)
        assert c.health()["models"] == ["vit", "random-vit-s16"]
        img = photo(4)
        e = c.encode(img, fixations=[(60, 50)])
        model = fovea.Model(HF_VIT)
        alone = model.encode_full(fovea.tokenize(fovea.decode_image(png(img)), fixations=[(60, 50)], model=model))
        np.testing.assert_allclose(e.embeddings, alone.embeddings, rtol=0, atol=1e-5)
        assert e.cache == "miss" and c.encode(img, fixations=[(60, 50)]).cache == "hit"
        assert handoff.vllm(e, "<image>")["multi_modal_data"]["image"].shape == (1,) + alone.embeddings.shape
        t = c.tokenize(ASTRONAUT, budget=50, model="random-vit-s16")
        assert t["tokens"] <= 50
        with pytest.raises(fovea.client.ServiceError) as err:
            c.encode(img, budget=0)
        assert err.value.status == 400 and err.value.message == "budget must be in [1, 4096], got 0"
        with c.video_session(budget=40, model="vit") as s:
            rs = [s.push(f, fixations=[(30, 30)]) for f in frames(3)]
            assert rs[0].refresh and not rs[2].refresh and rs[2].embeddings.shape[0] == len(rs[2])

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
        if p.poll() is None:
            p.kill()
            p.wait()


def test_process_refuses_a_bad_model():
    r = subprocess.run([sys.executable, "-m", "fovea.serve", "--model", "/nonexistent/model.safetensors", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("fovea serve: ") and r.stderr.count("\n") == 1
