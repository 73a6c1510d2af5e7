#pragma once
// The GPT of examples/gpt: plain layer structs, the way a user writes them. The tests and the
// benchmark train this same model.
#include <epl/epl.hpp>

namespace gpt {
namespace nn = epl::nn;

struct Shape {
  std::int64_t vocab = 256, context = 64, layers = 2, heads = 4, dim = 128;
};

struct Block {
  nn::Residual<nn::LayerNorm, nn::CausalSelfAttention> attn;
  nn::Residual<nn::LayerNorm, nn::Mlp> mlp;
};
struct Embed {
  nn::Embedding tok;
  nn::PositionEmbedding pos;
};
struct Head {
  nn::LayerNorm ln;
  nn::Linear lm;
};
/// Embedding, a stack of blocks, the head. The block count is a run-time value, so the stack
/// is a combinator-free loop over a vector: a layer type of its own.
struct Blocks {
  std::vector<Block> blocks;
  template <class V> void visit(V&& v) {
    for (std::size_t i = 0; i < blocks.size(); ++i) v(std::to_string(i), blocks[i]);
  }
  template <class Ctx> epl::Tensor forward(Ctx& ctx, const epl::Tensor& x) {
    epl::Tensor h = x;
    for (auto& b : blocks) h = nn::forward(b, ctx, h);
    return h;
  }
  template <class Ctx> epl::Tensor backward(Ctx& ctx, const epl::Tensor& dy) {
    epl::Tensor g = dy;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) g = nn::backward(*it, ctx, g);
    return g;
  }
};
struct Gpt {
  Embed embed;
  Blocks body;
  Head head;
};

inline Block make_block(const Shape& s) {
  return {nn::Residual<nn::LayerNorm, nn::CausalSelfAttention>(nn::LayerNorm(s.dim), nn::CausalSelfAttention(s.dim, s.heads)),
          nn::Residual<nn::LayerNorm, nn::Mlp>(nn::LayerNorm(s.dim), nn::Mlp(s.dim))};
}
inline Gpt make_gpt(const Shape& s) {
  Gpt g{{nn::Embedding(s.vocab, s.dim), nn::PositionEmbedding(s.context, s.dim)}, {}, {nn::LayerNorm(s.dim), nn::Linear(s.dim, s.vocab)}};
  for (std::int64_t i = 0; i < s.layers; ++i) g.body.blocks.push_back(make_block(s));
  return g;
}
/// Training FLOPs per token: 6 per parameter-use (forward 2, backward 4) plus attention's
/// q k^T and p v (forward 4 t d per layer, backward twice that; t = context).
inline double flops_per_token(const Shape& s, std::int64_t params) {
  return 6.0 * static_cast<double>(params) + 12.0 * static_cast<double>(s.layers * s.context * s.dim);
}
}  // namespace gpt
