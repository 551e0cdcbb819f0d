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
// Consecutive words are consecutive texels of a block row: step the texel instead of dividing
// for every word; a new block (every block_w * block_h words) is located afresh.
void copy_stretch(uint w, uint s, uint sh, uint n) {
  const uint per_block = pc.block_w * pc.block_h;
  uint t = s % per_block, tx = t % pc.block_w;
  ivec3 at = word_texel(s, pc.block_w, pc.block_h, pc.blocks_x, pc.blocks_y);
  const uint count = sh == 0u ? n : n + 1u;  // a shifted stretch reads one word more
  uint lo = 0u;
  for (uint i = 0u; i < count; ++i) {
    const uint v = imageLoad(src, at).r;
    if (sh == 0u) dst[w + i] = v;
    else if (i > 0u) dst[w + i - 1u] = (lo >> sh) | (v << (32u - sh));
    lo = v;
    ++t;
    ++tx;
    if (t == per_block) {
      t = tx = 0u;
      at = word_texel(s + i + 1u, pc.block_w, pc.block_h, pc.blocks_x, pc.blocks_y);
    } else if (tx == pc.block_w) {
      tx = 0u;
      at.x -= int(pc.block_w - 1u);
      at.y += 1;
    } else {
      at.x += 1;
    }
  }
}
