// The quadtree-aware merge: four nearly identical siblings become their parent token.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "fovea/compress.hpp"
#include "fovea/error.hpp"

namespace fovea {
namespace {

struct Node {
  std::vector<float> emb;
  std::vector<int64_t> members;  // input rows
};
using Key = std::tuple<int, int64_t, int64_t>;  // level, y index, x index (sort order of the output)

double cosine(const float* a, const float* b, int64_t d) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < d; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  if (aa == 0 && bb == 0) return 1;
  if (aa == 0 || bb == 0) return 0;
  return ab / std::sqrt(aa * bb);
}

}  // namespace

MergeResult merge_siblings(const Tensor& embeddings, const Tensor& positions, const MergeParams& params) {
  if (embeddings.dtype() != DType::f32 || embeddings.rank() != 2)
    throw Error(Errc::invalid_argument, "merge: embeddings must be [N, D] F32");
  const int64_t n = embeddings.dim(0), dim = embeddings.dim(1);
  if (positions.dtype() != DType::f32 || positions.rank() != 2 || positions.dim(1) != 4 || positions.dim(0) != n)
    throw Error(Errc::invalid_argument, "merge: positions must be [" + std::to_string(n) + ", 4] F32");
  if (!(params.min_cosine >= -1 && params.min_cosine <= 1))
    throw Error(Errc::invalid_argument, "merge: the minimum cosine must be in [-1, 1]");
  const float* pos = positions.data<float>();
  const float* x = embeddings.data<float>();

  // Level-0 token side (P): side / 2^level, the same for every token of a quadtree allocation.
  std::map<Key, Node> nodes;
  double base = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float cx = pos[4 * i], cy = pos[4 * i + 1], side = pos[4 * i + 2], lv = pos[4 * i + 3];
    const int level = int(std::lround(lv));
    const bool finite = std::isfinite(cx) && std::isfinite(cy) && std::isfinite(side) && std::isfinite(lv);
    if (!finite || side <= 0 || level < 0 || level > 30 || std::fabs(lv - float(level)) > 1e-4f)
      throw Error(Errc::corrupt_data, "merge: token " + std::to_string(i) +
                                          " is not a quadtree token (level must be a whole number; uniform-grid "
                                          "tokens cannot be merged)");
    const double p = double(side) / double(int64_t(1) << level);
    if (base == 0) base = p;
    const double ix = (double(cx) - 0.5 * side) / side, iy = (double(cy) - 0.5 * side) / side;
    if (std::fabs(p - base) > 1e-3 * base || std::fabs(ix - std::round(ix)) > 1e-3 || std::fabs(iy - std::round(iy)) > 1e-3)
      throw Error(Errc::corrupt_data, "merge: token " + std::to_string(i) + " (centre " + std::to_string(cx) + ", " +
                                          std::to_string(cy) + ", side " + std::to_string(side) +
                                          ") is not on the quadtree grid of the other tokens");
    Node node;
    node.emb.assign(x + i * dim, x + (i + 1) * dim);
    node.members = {i};
    if (!nodes.emplace(Key{level, int64_t(std::llround(iy)), int64_t(std::llround(ix))}, std::move(node)).second)
      throw Error(Errc::corrupt_data, "merge: tokens overlap (two tokens at level " + std::to_string(level) +
                                          " cover the same box)");
  }

  MergeResult r;
  int top = nodes.empty() ? -1 : std::get<0>(nodes.rbegin()->first);  // highest level present
  for (int level = 0; level < params.max_level && level <= top; ++level) {
    // Groups of siblings at this level (std::map keeps them in key order: deterministic).
    std::map<std::pair<int64_t, int64_t>, std::vector<Key>> groups;
    for (auto it = nodes.lower_bound(Key{level, INT64_MIN, INT64_MIN});
         it != nodes.end() && std::get<0>(it->first) == level; ++it)
      groups[{std::get<1>(it->first) / 2, std::get<2>(it->first) / 2}].push_back(it->first);
    for (const auto& [parent, kids] : groups) {
      if (kids.size() != 4) continue;
      const Key up{level + 1, parent.first, parent.second};
      if (nodes.count(up)) continue;  // a parent box already holds a token (not a quadtree)
      std::vector<float> mean(size_t(dim), 0.f);
      for (const Key& k : kids)
        for (int64_t d = 0; d < dim; ++d) mean[size_t(d)] += 0.25f * nodes[k].emb[size_t(d)];
      bool similar = true;
      for (const Key& k : kids) similar = similar && cosine(nodes[k].emb.data(), mean.data(), dim) >= params.min_cosine;
      if (!similar) continue;
      Node merged;
      merged.emb = std::move(mean);
      for (const Key& k : kids) {
        Node& c = nodes[k];
        merged.members.insert(merged.members.end(), c.members.begin(), c.members.end());
        nodes.erase(k);
      }
      nodes.emplace(up, std::move(merged));
      top = std::max(top, level + 1);
      ++r.groups_merged;
      ++r.groups_per_level[level];
    }
  }

  const int64_t m = int64_t(nodes.size());
  r.embeddings = Tensor(DType::f32, {m, dim});
  r.positions = Tensor(DType::f32, {m, 4});
  r.levels = Tensor(DType::i32, {m});
  r.parent = Tensor(DType::i32, {n});
  int64_t row = 0;
  for (const auto& [key, node] : nodes) {
    const auto [level, iy, ix] = key;
    const double side = base * double(int64_t(1) << level);
    std::copy(node.emb.begin(), node.emb.end(), r.embeddings.data<float>() + row * dim);
    float* p = r.positions.data<float>() + 4 * row;
    p[0] = float((double(ix) + 0.5) * side);
    p[1] = float((double(iy) + 0.5) * side);
    p[2] = float(side);
    p[3] = float(level);
    r.levels.data<int32_t>()[row] = level;
    for (int64_t i : node.members) r.parent.data<int32_t>()[i] = int32_t(row);
    ++row;
  }
  return r;
}

Tensor unmerge(const MergeResult& merged) {
  const int64_t n = merged.parent.numel(), dim = merged.embeddings.dim(1);
  Tensor out(DType::f32, {n, dim});
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = merged.parent.data<int32_t>()[i];
    std::copy_n(merged.embeddings.data<float>() + p * dim, dim, out.data<float>() + i * dim);
  }
  return out;
}

}  // namespace fovea
