// Gathers byte runs of the token store's sparse buffer (through one window of at most
// maxStorageBufferRange bytes) into a packed output. Reads only bound pages.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
uint src_word(uint i) { return src[i]; }
#include "gather_common.glsl"
void copy_stretch(uint w, uint s, uint sh, uint n) {
  if (sh == 0u) {
    for (uint i = 0u; i < n; ++i) dst[w + i] = src[s + i];
    return;
  }
  uint lo = src[s];
  for (uint i = 0u; i < n; ++i) {
    const uint hi = src[s + i + 1u];
    dst[w + i] = (lo >> sh) | (hi << (32u - sh));
    lo = hi;
  }
}
