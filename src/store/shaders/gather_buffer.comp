// Gathers byte runs of the token store's sparse buffer (through one window of at most
// maxStorageBufferRange bytes) into a packed output. Reads only bound pages.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
uint src_word(uint i) { return src[i]; }
#include "gather_common.glsl"
