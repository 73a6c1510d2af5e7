#pragma once
/// \file
/// \brief plan::twin — a Megatron GPT stated by its sizes alone, for planning at compile time a
/// model too large to build here (MT-NLG 530B, Megatron-LM's 1T): leaf types with static costs
/// (strategy::static_cost) and no forward, so plan::fits, plan::static_search and
/// plan::static_price read them like any layer that states its costs:
///
///     using MtNlg = epl::plan::twin::Gpt<8, 105, 20480, 128, 2048, 50272>;  // tensor 8, 105 layers, ...
///     const epl::plan::Budget budget{.rows = 1920, .tokens_per_row = 2048};  // tokens_per_row: the twin's Seq
///     const auto best = epl::plan::static_search<MtNlg, epl::Policies<epl::Zero<1>>>(epl::plan::dgx_a100(280), budget);
///
/// A row is one sequence of Seq tokens; activations are bf16 (2 bytes), the state f32 (the
/// planner's 4 bytes an element, 16 with AdamW). A layer states what one rank of its tensor group
/// keeps (Korthikanti et al. 2022, without sequence parallelism): its activations therefore
/// depend on the split degree, which its type carries.
#include <cstdint>
#include <utility>

#include "epl/core/error.hpp"
#include "epl/strategy/partition.hpp"
#include "epl/strategy/split.hpp"

namespace epl {
inline namespace v0 {
namespace plan {
namespace twin {

/// \brief The token and position embeddings, vocabulary-parallel over `Tensor` ranks.
template <std::int64_t Vocab, std::int64_t Hidden, std::int64_t Seq, int Tensor>
struct Embedding {
  static constexpr std::int64_t kSeq = Seq;
};
/// \brief One transformer layer (attention of Heads heads, an MLP of 4 Hidden), Megatron's
/// column- then row-parallel split over `Tensor` ranks.
template <std::int64_t Hidden, std::int64_t Heads, std::int64_t Seq, int Tensor>
struct TransformerLayer {};
/// \brief The output layer (its weight a copy of the embedding's, as Megatron ties them on the last
/// stage) and the cross-entropy over f32 logits, vocabulary-parallel.
template <std::int64_t Vocab, std::int64_t Hidden, std::int64_t Seq, int Tensor>
struct LmHead {};

namespace detail {
template <class Layer, std::size_t>
using layer_at = Layer;
template <int Tensor, class First, class Layer, class Last, std::size_t... I>
auto gpt(std::index_sequence<I...>) -> Split<Tensor, First, layer_at<Layer, I>..., Last>;
// The sizes checked, each with what to give instead, before any layer is made.
template <int Tensor, int Layers, std::int64_t Hidden, std::int64_t Heads, std::int64_t Seq, std::int64_t Vocab>
struct GptOf {
  static_assert(Layers >= 1 && Layers <= 512, "epl: plan::twin::Gpt: Layers must be 1 to 512 (a compile-time model of more is too "
                                              "deep a type; state a block of several layers as one twin layer)");
  static_assert(Tensor >= 1 && Tensor <= 64, "epl: plan::twin::Gpt: Tensor, the split degree, must be 1 to 64");
  static_assert(Hidden >= 1 && Hidden <= (1 << 20) && Seq >= 1 && Seq <= (1 << 17) && Vocab >= 1 && Vocab <= (1 << 24),
                "epl: plan::twin::Gpt: Hidden must be 1 to 2^20, Seq 1 to 2^17, Vocab 1 to 2^24 (the costs count in 64 bits)");
  static_assert(Heads >= 1 && Hidden % Heads == 0, "epl: plan::twin::Gpt: Heads must be 1 or more and divide Hidden");
  static_assert(Heads % Tensor == 0 && Hidden % Tensor == 0 && Vocab % Tensor == 0,
                "epl: plan::twin::Gpt: the split degree (Tensor) must divide Heads, Hidden and Vocab, as Megatron splits them (pad the "
                "vocabulary to a multiple of it)");
  static constexpr bool kValid = Layers >= 1 && Layers <= 512;
  using type = decltype(gpt<Tensor, Embedding<Vocab, Hidden, Seq, Tensor>, TransformerLayer<Hidden, Heads, Seq, Tensor>,
                            LmHead<Vocab, Hidden, Seq, Tensor>>(std::make_index_sequence<kValid ? static_cast<std::size_t>(Layers) : 1>{}));
};
}  // namespace detail

/// \brief A GPT of `Layers` layers, wholly inside an epl::Split of `Tensor` ranks (Megatron's
/// tensor parallelism, the embedding and output vocabulary-parallel). Its costs are per token and
/// its activations per row of Seq tokens: plan it with Budget::tokens_per_row = Seq
/// (plan::twin::kTokensPerRow<Model>).
template <int Tensor, int Layers, std::int64_t Hidden, std::int64_t Heads, std::int64_t Seq, std::int64_t Vocab>
using Gpt = typename detail::GptOf<Tensor, Layers, Hidden, Heads, Seq, Vocab>::type;

/// \brief The tokens a row of a twin GPT holds (its Seq): what Budget::tokens_per_row must be.
template <class Model>
inline constexpr std::int64_t kTokensPerRow = 0;
template <int T, class E, class... L>
  requires requires { E::kSeq; }
inline constexpr std::int64_t kTokensPerRow<Split<T, E, L...>> = E::kSeq;

/// \brief The model FLOPs of one training step of such a GPT on `batch` rows, as Narayanan et al.
/// (2021, eq. 3) count them: 72 B s l h^2 (1 + s / 6h + V / 12lh) — forward and backward — or, with
/// full recompute (a second forward), 96 B s l h^2 (1 + s / 6h + V / 16lh). The published TFLOP/s
/// a GPU are these over the step time and the GPUs.
constexpr double gpt_step_flops(double batch, double seq, double layers, double hidden, double vocab, bool recompute) {
  if (!(batch >= 1 && seq >= 1 && layers >= 1 && hidden >= 1 && vocab >= 1 && batch * seq * layers * hidden * hidden < 1e40))
    EPL_FAIL("plan::twin::gpt_step_flops: the batch, sequence, layers, hidden size and vocabulary must be 1 or more (and finite)");
  const double h2 = hidden * hidden;
  return recompute ? 96.0 * batch * seq * layers * h2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
                   : 72.0 * batch * seq * layers * h2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden));
}

}  // namespace twin
}  // namespace plan

namespace strategy {
/// plan::twin::Embedding: V h + s h parameters, a lookup (no multiply-adds), its bf16 output kept
/// and sent on, one all-reduce of it forward (vocabulary-parallel).
template <std::int64_t V, std::int64_t H, std::int64_t S, int T>
struct static_cost<plan::twin::Embedding<V, H, S, T>> {
  static constexpr Cost value{.macs_per_token = 0, .parameters = V * H + S * H, .activation_bytes = 2 * S * H, .output_bytes = 2 * S * H,
                              .tensor_bytes = 2 * S * H, .tensor_collectives = 1};
};
/// plan::twin::TransformerLayer: 12 h^2 + 2 s h multiply-adds a token (QKV 3h^2, scores and values
/// 2 s h, projection h^2, MLP 8 h^2), 12 h^2 + 13 h parameters; a rank keeps s h (10 + 24 / t) +
/// 5 a s^2 / t bytes a row, sends its bf16 output on, and all-reduces it twice forward and twice
/// backward.
template <std::int64_t H, std::int64_t A, std::int64_t S, int T>
struct static_cost<plan::twin::TransformerLayer<H, A, S, T>> {
  static constexpr Cost value{.macs_per_token = 12.0 * H * H + 2.0 * S * H,
                              .parameters = 12 * H * H + 13 * H,
                              .activation_bytes = S * H * 10 + S * H * 24 / T + 5 * A * S * S / T,
                              .output_bytes = 2 * S * H,
                              .tensor_bytes = 4 * 2 * S * H,
                              .tensor_collectives = 4};
};
/// plan::twin::LmHead: h V multiply-adds a token, the tied weight's copy (V h parameters), a rank's
/// f32 logits (4 s V / t bytes a row) kept for the loss.
template <std::int64_t V, std::int64_t H, std::int64_t S, int T>
struct static_cost<plan::twin::LmHead<V, H, S, T>> {
  static constexpr Cost value{.macs_per_token = static_cast<double>(H) * static_cast<double>(V), .parameters = V * H,
                              .activation_bytes = 4 * S * V / T, .output_bytes = 0};
};
}  // namespace strategy
}  // namespace v0
}  // namespace epl
