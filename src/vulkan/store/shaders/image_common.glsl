// Virtual word i of the token store's sparse image -> texel of level 0. Blocks of
// block_w x block_h texels are row-major in a layer (blocks_x per row, blocks_y rows), layers
// follow each other; inside a block, words are row-major over its texels.
ivec3 word_texel(uint i, uint block_w, uint block_h, uint blocks_x, uint blocks_y) {
  const uint per_block = block_w * block_h;
  const uint block = i / per_block, t = i - block * per_block;
  const uint per_layer = blocks_x * blocks_y;
  const uint layer = block / per_layer, r = block - layer * per_layer;
  const uint by = r / blocks_x, bx = r - by * blocks_x;
  const uint ty = t / block_w, tx = t - ty * block_w;
  return ivec3(int(bx * block_w + tx), int(by * block_h + ty), int(layer));
}
