// Decode-on-gather: compressed token records of the store's sparse buffer (through
// one window) decoded straight into f32 embeddings. Invocations stride over output elements;
// element e of the dispatch is dimension d of token t = e / D, read from its record's bytes.
//   kind 0: f16 (2 bytes an element), 1: bf16, 2: u8 affine (x = lo[d] + step[d] * q).
// Records of f16/bf16 start at even bytes (2·D-byte records, page-aligned sequences).
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };  // record byte offset in the window, per token of the batch
layout(std430, binding = 3) readonly buffer Par { vec2 par[]; };  // u8 affine: (lo, step) per dimension
layout(push_constant) uniform Push {
  uint tok_first, tok_count;  // this dispatch's tokens (indices into tok[] and the batch output)
  uint dim, kind;
} pc;

void main() {
  const uint total = pc.tok_count * pc.dim;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint e = gl_GlobalInvocationID.x; e < total; e += stride) {
    const uint t = e / pc.dim, d = e - t * pc.dim;
    const uint base = tok[pc.tok_first + t];
    precise float v;
    if (pc.kind == 2u) {
      const uint b = base + d;
      const uint q = (src[b >> 2] >> (8u * (b & 3u))) & 0xffu;
      const vec2 p = par[d];
      precise float prod = p.y * float(q);
      v = p.x + prod;
    } else {
      const uint b = base + 2u * d;
      const uint h = (src[b >> 2] >> (8u * (b & 3u))) & 0xffffu;
      v = pc.kind == 0u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
    }
    dst[(pc.tok_first * pc.dim) + e] = v;
  }
}
