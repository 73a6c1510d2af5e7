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
/// Embedding, a stack of blocks (their count chosen at run time: nn::Repeat, which a pipeline
/// can cut between), the head.
struct Gpt {
  Embed embed;
  nn::Repeat<Block> body;
  Head head;
};

inline Block make_block(const Shape& s) {
  return {nn::Residual<nn::LayerNorm, nn::CausalSelfAttention>(nn::LayerNorm(s.dim), nn::CausalSelfAttention(s.dim, s.heads)),
          nn::Residual<nn::LayerNorm, nn::Mlp>(nn::LayerNorm(s.dim), nn::Mlp(s.dim))};
}
inline Gpt make_gpt(const Shape& s) {
  Gpt g{{nn::Embedding(s.vocab, s.dim), nn::PositionEmbedding(s.context, s.dim)}, {}, {nn::LayerNorm(s.dim), nn::Linear(s.dim, s.vocab)}};
  for (std::int64_t i = 0; i < s.layers; ++i) g.body.layers.push_back(make_block(s));
  return g;
}
/// The same layers declared as a two-stage pipeline (epl::Pipeline): the embedding and the first
/// half of the blocks on one stage, the other half and the head on the next. Its parameters are
/// numbered in the same order as Gpt's, so it starts from the same initialisation.
using TwoStageGpt = epl::Pipeline<epl::Replicate<1, Embed, nn::Repeat<Block>>, epl::Replicate<1, nn::Repeat<Block>, Head>>;
inline TwoStageGpt make_two_stage_gpt(const Shape& s) {
  Gpt g = make_gpt(s);
  const auto half = static_cast<std::ptrdiff_t>(g.body.layers.size() / 2);
  nn::Repeat<Block> first(std::vector<Block>(g.body.layers.begin(), g.body.layers.begin() + half));
  nn::Repeat<Block> second(std::vector<Block>(g.body.layers.begin() + half, g.body.layers.end()));
  return TwoStageGpt(epl::Replicate<1, Embed, nn::Repeat<Block>>(g.embed, std::move(first)),
                     epl::Replicate<1, nn::Repeat<Block>, Head>(std::move(second), g.head));
}
/// The same layers with every part split N ways (epl::Split): the embedding by vocabulary, the
/// blocks by heads and Mlp columns/rows, the head's output layer by vocabulary (so the loss runs
/// vocabulary-parallel). Numbered like Gpt, so it starts from the same initialisation.
template <int N>
struct SplitGpt {
  epl::Split<N, Embed> embed;
  epl::Split<N, nn::Repeat<Block>> body;
  epl::Split<N, Head> head;
};
template <int N>
SplitGpt<N> make_split_gpt(const Shape& s) {
  Gpt g = make_gpt(s);
  return {epl::Split<N, Embed>(g.embed), epl::Split<N, nn::Repeat<Block>>(g.body), epl::Split<N, Head>(g.head)};
}
/// The same layers with each block a gradient-checkpointing boundary (epl::Recompute): in
/// training a block keeps only its input and recomputes its activations in backward. Numbered
/// like Gpt.
struct RecomputedGpt {
  Embed embed;
  nn::Repeat<epl::Recompute<Block>> body;
  Head head;
};
inline RecomputedGpt make_recomputed_gpt(const Shape& s) {
  Gpt g = make_gpt(s);
  RecomputedGpt c{g.embed, {}, g.head};
  for (auto& b : g.body.layers) c.body.layers.emplace_back(b);
  return c;
}
/// Training FLOPs per token: 6 per parameter-use (forward 2, backward 4) plus attention's
/// q k^T and p v (forward 4 t d per layer, backward twice that; t = context).
inline double flops_per_token(const Shape& s, std::int64_t params) {
  return 6.0 * static_cast<double>(params) + 12.0 * static_cast<double>(s.layers * s.context * s.dim);
}
/// The least GEMM work a token's training step needs (forward 2 FLOP a multiply-add, backward 4):
/// a block's 12 dim^2 multiply-adds (q, k, v and out 4 dim^2, the MLP 8 dim^2), the head's
/// vocab x dim, and causal attention's q k^T and p v over the (t + 1) / 2 keys a query sees on
/// average. At a core's peak rate it gives the physical limit of tokens/s (bench/run_gpt_mini.sh):
/// the embeddings, norms, softmax, loss and update are counted as free.
inline double gemm_flops_per_token(const Shape& s) {
  const double l = static_cast<double>(s.layers), d = static_cast<double>(s.dim);
  return 6.0 * (12.0 * l * d * d + static_cast<double>(s.vocab) * d) + 6.0 * l * static_cast<double>(s.context + 1) * d;
}
}  // namespace gpt
