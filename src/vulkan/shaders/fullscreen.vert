// One triangle that covers the whole viewport, from gl_VertexIndex alone (no vertex buffer):
// (-1,-1), (3,-1), (-1,3). Used by the shading-rate render (shading_rate.cpp).
#version 450

void main() {
  const vec2 p = vec2(float((gl_VertexIndex & 1) << 2) - 1.0, float((gl_VertexIndex & 2) << 1) - 1.0);
  gl_Position = vec4(p, 0.0, 1.0);
}
