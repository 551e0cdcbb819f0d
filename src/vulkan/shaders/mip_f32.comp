// One 2x2 box reduction step of float mips, in the CPU's exact operation order
// (pyramid.hpp): ((a + c) + (b + d)) * 0.25 with a b the top pair and c d the bottom pair.
// `precise` forbids fusing or reassociating. Edge clamping makes a 1x2 / 2x1 box
// ((a + c) + (a + c)) * 0.25 == (a + c) * 0.5 exactly, as on the CPU.
#version 450
layout(local_size_x = 8, local_size_y = 8, local_size_z = 1) in;
layout(binding = 0, r32f) uniform readonly image2DArray src;
layout(binding = 1, r32f) uniform writeonly image2DArray dst;
layout(push_constant) uniform Push { ivec2 src_size; ivec2 dst_size; } pc;

void main() {
  const ivec3 id = ivec3(gl_GlobalInvocationID);
  if (id.x >= pc.dst_size.x || id.y >= pc.dst_size.y) return;
  const int x0 = 2 * id.x, y0 = 2 * id.y;
  const int x1 = min(x0 + 1, pc.src_size.x - 1), y1 = min(y0 + 1, pc.src_size.y - 1);
  const float a = imageLoad(src, ivec3(x0, y0, id.z)).r;
  const float b = imageLoad(src, ivec3(x1, y0, id.z)).r;
  const float c = imageLoad(src, ivec3(x0, y1, id.z)).r;
  const float d = imageLoad(src, ivec3(x1, y1, id.z)).r;
  precise float left = a + c;
  precise float right = b + d;
  precise float v = (left + right) * 0.25;
  imageStore(dst, id, vec4(v));
}
