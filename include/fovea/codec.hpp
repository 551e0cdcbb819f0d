// fovea/codec.hpp — the former name of fovea/compress.hpp (the compress stage's header: folder
// src/compress, target fovea::compress), kept for one release so that programs written against
// it still compile. New code includes fovea/compress.hpp (docs/reference/api-stability.md).
//
//   std::unique_ptr<fovea::Codec> c = fovea::make_codec("int8", 768);
#pragma once
#include "fovea/export.hpp"

#include "fovea/compress.hpp"
