// Gathers byte runs of the token store's sparse R32_UINT 2D array image (level 0) into a
// packed output. Reads only texels of bound blocks.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "image_common.glsl"
layout(binding = 0, r32ui) uniform readonly uimage2DArray src;
uint src_word(uint i);
#include "gather_common.glsl"
uint src_word(uint i) {
  return imageLoad(src, word_texel(i, pc.block_w, pc.block_h, pc.blocks_x, pc.blocks_y)).r;
}
