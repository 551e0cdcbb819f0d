// Foveated sampling: every token's P x P patch, read with textureLod from its mip level, into
// the TokenBatch layout [N, 3, P, P] (tokens grouped by level, as the TokenLayout is sorted).
// The level comes from the RateMap (an R8_UINT image, one texel per finest tile, one layer
// per image) at the token's first tile; the TokenLayout's level must agree (else the status
// counter says so and the host throws). Sampling is NEAREST at texel centres, clamped to the
// edge of the level: exactly the CPU extraction (extract.hpp).
// Work units (one invocation each):
//   mode 1, float: one patch row (P outputs): v * scale[c] + bias[c] (`precise`: one multiply,
//           one add, as the CPU does);
//   mode 2, uint8 with P % 4 == 0: one patch row, packed four per word (rows are word-aligned);
//   mode 0, uint8 otherwise: one output word (four elements, possibly of two rows).
#version 450
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;
layout(binding = 0) uniform sampler2DArray pyramid;    // R8_UNORM, one layer per channel plane
layout(binding = 1) uniform usampler2DArray rate_map;  // R8_UINT, one layer per image
layout(std430, binding = 2) readonly buffer Tokens { uvec4 tokens[]; };  // x, y, level, image
layout(std430, binding = 3) writeonly buffer Out { uint words[]; };
layout(std430, binding = 4) buffer Status { uint mismatches; uint bad_levels; } status;
layout(push_constant) uniform Push {
  uint n_units;         // invocations with work: rows (modes 1, 2) or words (mode 0)
  uint n_elems;         // N * 3 * P * P
  uint P;
  uint channels;        // 1 or 3 planes per image in the pyramid texture
  uint mode;
  uint row_invocations; // invocations per dispatch row (groups_x * 64)
  uint num_levels;      // levels in the pyramid texture
  uint pad;
  vec4 scale;
  vec4 bias;
} pc;

// Where patch row (tok, c, py) reads: level, texture size, source row, layer.
struct Row {
  uvec4 t;
  uint level;
  ivec2 size;
  int ty;
  uint layer;
};

Row locate(uint tok, uint c, uint py, bool report) {
  Row r;
  r.t = tokens[tok];
  const ivec2 tiles = textureSize(rate_map, 0).xy;
  const ivec2 tile = min(ivec2(r.t.x << r.t.z, r.t.y << r.t.z), tiles - 1);
  r.level = texelFetch(rate_map, ivec3(tile, int(r.t.w)), 0).r;
  if (report && r.level != r.t.z) atomicAdd(status.mismatches, 1u);
  if (r.level >= pc.num_levels) {
    if (report) atomicAdd(status.bad_levels, 1u);
    r.level = pc.num_levels - 1u;
  }
  // max(1, n >> level), as mip_extent: not textureSize(pyramid, level), which llvmpipe
  // evaluates with one lane's level when the level differs across lanes.
  r.size = max(textureSize(pyramid, 0).xy >> int(r.level), ivec2(1));
  r.ty = clamp(int(r.t.y * pc.P + py), 0, r.size.y - 1);
  r.layer = r.t.w * pc.channels + (pc.channels == 3u ? c : 0u);
  return r;
}

uint fetch(Row r, uint px) {
  const int tx = clamp(int(r.t.x * pc.P + px), 0, r.size.x - 1);
  const vec2 uv = (vec2(tx, r.ty) + 0.5) / vec2(r.size);
  const float v = textureLod(pyramid, vec3(uv, float(r.layer)), float(r.level)).r;
  return uint(round(v * 255.0));
}

void main() {
  const uint u = gl_GlobalInvocationID.y * pc.row_invocations + gl_GlobalInvocationID.x;
  if (u >= pc.n_units) return;
  const uint P = pc.P;
  if (pc.mode == 0u) {
    uint word = 0u;
    for (uint k = 0u; k < 4u; ++k) {
      const uint e = 4u * u + k;
      if (e >= pc.n_elems) break;
      const uint plane = P * P;
      const uint tok = e / (3u * plane);
      const uint rem = e - tok * 3u * plane;
      const uint c = rem / plane;
      const uint pix = rem - c * plane;
      const uint py = pix / P, px = pix - py * P;
      word |= fetch(locate(tok, c, py, rem == 0u), px) << (8u * k);
    }
    words[u] = word;
    return;
  }
  const uint tok = u / (3u * P);
  const uint rem = u - tok * 3u * P;
  const uint c = rem / P;
  const uint py = rem - c * P;
  const Row r = locate(tok, c, py, rem == 0u);
  const uint base = u * P;  // first output element of this row
  if (pc.mode == 1u) {
    for (uint px = 0u; px < P; ++px) {
      precise float v = float(fetch(r, px)) * pc.scale[c] + pc.bias[c];
      words[base + px] = floatBitsToUint(v);
    }
  } else {
    for (uint px = 0u; px < P; px += 4u)
      words[(base + px) / 4u] = fetch(r, px) | (fetch(r, px + 1u) << 8u) | (fetch(r, px + 2u) << 16u) |
                                (fetch(r, px + 3u) << 24u);
  }
}
