// The store stage's include tree must not show the compress stage's header: the store depends
// on the Codec interface only (build.layering.compress_from_store is expected to fail to compile).
#include "fovea/compress.hpp"
