// Writes byte runs into the token store's sparse R32_UINT image (level 0): from a staging
// buffer, or zeros. One invocation per destination word; a word a run covers only partly is
// read-modified-written. Runs of one dispatch never share a word (the host splits them).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "image_common.glsl"
layout(local_size_x = 64) in;
layout(binding = 0, r32ui) uniform uimage2DArray img;
layout(std430, binding = 1) readonly buffer Src { uint src[]; };
struct Run {
  uint word;    // first destination word (virtual)
  uint lead;    // destination byte offset within that word (0..3)
  uint bytes;   // run length
  uint source;  // first staging byte, or 0xffffffff: zeros
  uint prefix;  // first invocation of this run
  uint pad0, pad1, pad2;
};
layout(std430, binding = 2) readonly buffer Runs { Run runs[]; };
layout(push_constant) uniform Push {
  uint run_first, run_count;
  uint inv_first, inv_end;
  uint block_w, block_h, blocks_x, blocks_y;
} pc;

uint staged_byte(uint b) { return (src[b >> 2] >> (8u * (b & 3u))) & 0xffu; }

uint find_run(uint g) {
  uint lo = pc.run_first, hi = pc.run_first + pc.run_count - 1u;
  while (lo < hi) {
    const uint mid = (lo + hi + 1u) >> 1;
    if (runs[mid].prefix <= g) lo = mid;
    else hi = mid - 1u;
  }
  return lo;
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint g = pc.inv_first + gl_GlobalInvocationID.x; g < pc.inv_end; g += stride) {
    const Run run = runs[find_run(g)];
    const uint j = g - run.prefix;
    const ivec3 at = word_texel(run.word + j, pc.block_w, pc.block_h, pc.blocks_x, pc.blocks_y);
    const int q0 = int(4u * j) - int(run.lead);  // run byte at this word's byte 0
    const bool zero = run.source == 0xffffffffu;
    if (q0 >= 0 && uint(q0) + 4u <= run.bytes) {
      uint v = 0u;
      if (!zero) {
        const uint b = run.source + uint(q0), sh = 8u * (b & 3u);
        v = sh == 0u ? src[b >> 2] : (src[b >> 2] >> sh) | (src[(b >> 2) + 1u] << (32u - sh));
      }
      imageStore(img, at, uvec4(v));
      continue;
    }
    uint value = 0u, mask = 0u;
    for (uint k = 0u; k < 4u; ++k) {
      const int q = q0 + int(k);
      if (q < 0 || uint(q) >= run.bytes) continue;
      mask |= 0xffu << (8u * k);
      if (!zero) value |= staged_byte(run.source + uint(q)) << (8u * k);
    }
    const uint old = imageLoad(img, at).r;
    imageStore(img, at, uvec4((old & ~mask) | value));
  }
}
