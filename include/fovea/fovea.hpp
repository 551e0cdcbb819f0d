// fovea/fovea.hpp — the whole public API in one include: every public header this build of
// fovea has (the encoder's and the video headers only when it was built with them).
//
//   fovea::Executor exec;
//   fovea::Query q;
//   fovea::TokenizeParams params;
//   params.alloc.budget_tokens = 256;
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), q, params, exec);
//
// What is stable and what is not: docs/reference/api-stability.md. The single headers stay: a program
// may include only what it uses.
#pragma once
#include "fovea/export.hpp"
#include "fovea/version_gen.hpp"

#include "fovea/allocate.hpp"
#include "fovea/codec_interface.hpp"
#include "fovea/compress.hpp"
#include "fovea/embeddings.hpp"
#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/files.hpp"
#include "fovea/gguf.hpp"
#include "fovea/grid.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/store.hpp"
#include "fovea/tar.hpp"
#include "fovea/tensor.hpp"
#include "fovea/token_cache.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/torch_checkpoint.hpp"
#include "fovea/view.hpp"
#include "fovea/viz.hpp"
#include "fovea/vulkan.hpp"
#include "fovea/windows.hpp"
#if FOVEA_BUILT_WITH_ENCODER
#include "fovea/encoder.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/native.hpp"
#endif
#if FOVEA_BUILT_WITH_ENCODER && FOVEA_BUILT_WITH_FFMPEG
#include "fovea/video.hpp"
#endif
