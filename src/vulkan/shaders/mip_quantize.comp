// The rounding step of the uint8 blit chain (backend.cpp record_blit_mips_u8). The chain is
// filtered by vkCmdBlitImage in R32_SFLOAT, in LSB units (0..255), so no rounding happens in
// the blit itself; this pass then rounds each new level exactly as the CPU does (pyramid.hpp)
// and writes it both to the uint8 pyramid and back to the float chain, which the next blit
// reads. The CPU's (a + b + c + d + 2) >> 2 is floor(m + 0.5) with m = (a + b + c + d) / 4 on a
// grid of quarters ((a + b + 1) >> 1 for 1x2 boxes: halves); floor(m + 0.625) gives the same
// integer for any m within 0.125 of the grid point, which absorbs the driver's filter error.
//   mode 0: chain = float(u8)                  (level 0, once)
//   mode 1: u8 = chain = floor(chain + 0.625)  (every level after its blit)
#version 450
layout(local_size_x = 8, local_size_y = 8, local_size_z = 1) in;
layout(binding = 0, r32f) uniform image2DArray chain;
layout(binding = 1, r8ui) uniform uimage2DArray levels;
layout(push_constant) uniform Push { ivec2 size; uint mode; uint pad; } pc;

void main() {
  const ivec3 id = ivec3(gl_GlobalInvocationID);
  if (id.x >= pc.size.x || id.y >= pc.size.y) return;
  if (pc.mode == 0u) {
    imageStore(chain, id, vec4(float(imageLoad(levels, id).r)));
    return;
  }
  const float q = clamp(floor(imageLoad(chain, id).r + 0.625), 0.0, 255.0);
  imageStore(levels, id, uvec4(uint(q)));
  imageStore(chain, id, vec4(q));
}
