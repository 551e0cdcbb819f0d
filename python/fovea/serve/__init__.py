"""fovea.serve: fovea as an HTTP service (FastAPI over the library).

    python3 -m fovea.serve --model /models/vit/model.safetensors --port 8080
    curl -F image=@photo.jpg -F fixations='512,300' http://127.0.0.1:8080/v1/encode -o photo.safetensors

Models are loaded and warmed once, at start. Concurrent encodes of one model are batched into one
encoder call (Model.encode_many). Finished responses are kept in a content-hash cache (BLAKE2b of
the model, the parameters and the image's bytes). Video sessions take frames one at a time and
re-do only what changed. GET / is an explorer page; GET /metrics Prometheus metrics. docs/how-to/serve.md
has the routes, the limits and what was measured.

    from fovea.serve import create_app, ServeConfig
    app = create_app({"vit": "random:vit-s16"}, ServeConfig(max_batch=4))   # any ASGI server

fovea.Client is the Python client.
"""

from .app import ApiError, ServeConfig, create_app

__all__ = ["create_app", "ServeConfig", "ApiError"]
