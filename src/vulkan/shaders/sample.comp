// Foveated sampling: every token's P x P patch, read with textureLod from its mip level, into
// the TokenBatch layout [N, 3, P, P] (tokens grouped by level, as the TokenLayout is sorted).
// The level comes from the RateMap (an R8_UINT image, one texel per finest tile, one layer
// per image) at the token's first tile; the TokenLayout's level must agree (else the status
// counter says so and the host throws). Sampling is NEAREST at texel centres, clamped to the
// edge of the level: exactly the CPU extraction (extract.hpp). Output: mode 0 packs four
// uint8 per word; mode 1 writes float v * scale[c] + bias[c] (`precise`: one multiply, one
// add, as the CPU does).
#version 450
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;
layout(binding = 0) uniform sampler2DArray pyramid;    // R8_UNORM, one layer per channel plane
layout(binding = 1) uniform usampler2DArray rate_map;  // R8_UINT, one layer per image
layout(std430, binding = 2) readonly buffer Tokens { uvec4 tokens[]; };  // x, y, level, image
layout(std430, binding = 3) writeonly buffer Out { uint words[]; };
layout(std430, binding = 4) buffer Status { uint mismatches; uint bad_levels; } status;
layout(push_constant) uniform Push {
  uint n_words;         // output words
  uint n_elems;         // N * 3 * P * P
  uint P;
  uint channels;        // 1 or 3 planes per image in the pyramid texture
  uint mode;            // 0: uint8, 1: float
  uint row_invocations; // invocations per dispatch row (groups_x * 64)
  uint num_levels;      // levels in the pyramid texture
  uint pad;
  vec4 scale;
  vec4 bias;
} pc;

uint sample_elem(uint e) {
  const uint plane = pc.P * pc.P;
  const uint tok = e / (3u * plane);
  const uint r = e - tok * 3u * plane;
  const uint c = r / plane;
  const uint pix = r - c * plane;
  const uint py = pix / pc.P, px = pix - py * pc.P;
  const uvec4 t = tokens[tok];
  const ivec2 tiles = textureSize(rate_map, 0).xy;
  const ivec2 tile = min(ivec2(t.x << t.z, t.y << t.z), tiles - 1);
  uint level = texelFetch(rate_map, ivec3(tile, int(t.w)), 0).r;
  if (r == 0u && level != t.z) atomicAdd(status.mismatches, 1u);
  if (level >= pc.num_levels) {
    if (r == 0u) atomicAdd(status.bad_levels, 1u);
    level = pc.num_levels - 1u;
  }
  const ivec2 size = textureSize(pyramid, int(level)).xy;
  const int tx = clamp(int(t.x * pc.P + px), 0, size.x - 1);
  const int ty = clamp(int(t.y * pc.P + py), 0, size.y - 1);
  const uint layer = t.w * pc.channels + (pc.channels == 3u ? c : 0u);
  const vec2 uv = (vec2(tx, ty) + 0.5) / vec2(size);
  const float v = textureLod(pyramid, vec3(uv, float(layer)), float(level)).r;
  return uint(round(v * 255.0));
}

void main() {
  const uint w = gl_GlobalInvocationID.y * pc.row_invocations + gl_GlobalInvocationID.x;
  if (w >= pc.n_words) return;
  if (pc.mode == 0u) {
    uint word = 0u;
    for (uint k = 0u; k < 4u; ++k) {
      const uint e = 4u * w + k;
      if (e < pc.n_elems) word |= sample_elem(e) << (8u * k);
    }
    words[w] = word;
  } else {
    const uint plane = pc.P * pc.P;
    const uint c = (w % (3u * plane)) / plane;
    precise float v = float(sample_elem(w)) * pc.scale[c] + pc.bias[c];
    words[w] = floatBitsToUint(v);
  }
}
