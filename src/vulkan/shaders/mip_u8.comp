// One 2x2 box reduction step of uint8 mips: level l (src) -> level l+1 (dst), every layer.
// Exactly the CPU rule (pyramid.hpp): (a + b + c + d + 2) >> 2. Clamping the second
// column/row to the edge turns it into (a + b + 1) >> 1 for 1x2 / 2x1 boxes: with a == b and
// c == d, (2a + 2c + 2) >> 2 == (a + c + 1) >> 1; odd extents drop their last column/row
// because dst extents are floor(src / 2).
#version 450
layout(local_size_x = 8, local_size_y = 8, local_size_z = 1) in;
layout(binding = 0, r8ui) uniform readonly uimage2DArray src;
layout(binding = 1, r8ui) uniform writeonly uimage2DArray dst;
layout(push_constant) uniform Push { ivec2 src_size; ivec2 dst_size; } pc;

void main() {
  const ivec3 id = ivec3(gl_GlobalInvocationID);
  if (id.x >= pc.dst_size.x || id.y >= pc.dst_size.y) return;
  const int x0 = 2 * id.x, y0 = 2 * id.y;
  const int x1 = min(x0 + 1, pc.src_size.x - 1), y1 = min(y0 + 1, pc.src_size.y - 1);
  const uint a = imageLoad(src, ivec3(x0, y0, id.z)).r;
  const uint b = imageLoad(src, ivec3(x1, y0, id.z)).r;
  const uint c = imageLoad(src, ivec3(x0, y1, id.z)).r;
  const uint d = imageLoad(src, ivec3(x1, y1, id.z)).r;
  imageStore(dst, id, uvec4((a + b + c + d + 2u) >> 2));
}
