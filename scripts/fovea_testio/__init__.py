"""File I/O for fovea's fixture, sweep and test scripts, written after the formats' specs with
nothing but the standard library and numpy (torch only where a caller hands in torch tensors):

    from fovea_testio import safetensors, gguf
    tensors, metadata = safetensors.read("tokens.safetensors")      # {name: np.ndarray}, {str: str}
    safetensors.write("model.safetensors", {"w": np.zeros((2, 3), np.float32)}, {"format": "pt"})
    g = gguf.read("mmproj.gguf")                                     # key/values and tensors as data
    gguf.write("out.gguf", g.kvs, [(name, data, shape, gguf.GGML_F16)])

fovea never reads these modules: they are a second, independent reader and writer, so a test
can check fovea's files with code fovea did not write. Scripts put this folder (scripts/) on
sys.path and import the package.
"""
