#pragma once
/// \file
/// \brief Automatic stage partition: a model's sequential units cut into contiguous pipeline
/// stages of balanced cost — at compile time when every unit's cost is in its type
/// (static_cost), at run time otherwise — and the cost model: multiply-adds per token,
/// estimated from a layer's parameters (a weight of n elements is n multiply-adds a token,
/// forward; an embedding table is one row a token, a lookup), or a constant a layer type declares.
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/nn/nn.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

namespace detail {
// Cuts c[0..n) into k non-empty contiguous pieces whose largest time is as small as it can be (to
// within a millionth), piece p taking its sum over speed[p] (null: every speed 1): bisection on
// that time, each candidate checked greedily. Writes the k + 1 boundaries into out. constexpr, so
// a cut of static costs is a compile-time constant.
constexpr void balanced_cut(const double* c, std::size_t n, std::size_t k, std::size_t* out, const double* speed = nullptr) {
  auto cap = [&](std::size_t p) { return speed ? speed[p] : 1.0; };
  double lo = 0, hi = 0, slowest = cap(0);
  for (std::size_t p = 1; p < k; ++p) slowest = std::min(slowest, cap(p));
  for (std::size_t i = 0; i < n; ++i) hi += c[i];
  hi /= slowest;  // everything on the slowest piece
  // pieces needed when no piece may take longer than limit (greedy from the front, piece p
  // holding up to limit x its speed; the pieces past k all at the slowest speed)
  auto pieces = [&](double limit) {
    std::size_t count = 1;
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double room = limit * (count <= k ? cap(count - 1) : slowest);
      if (sum + c[i] > room && sum > 0) {
        ++count;
        sum = 0;
      }
      if (c[i] > limit * (count <= k ? cap(count - 1) : slowest)) return n + k + 1;  // one unit alone is too slow here
      sum += c[i];
    }
    return count;
  };
  for (int iter = 0; iter < 200 && hi - lo > 1e-6 * (hi > 0 ? hi : 1); ++iter) {
    const double mid = (lo + hi) / 2;
    if (pieces(mid) <= k) hi = mid;
    else lo = mid;
  }
  // Cut greedily under that time: each piece takes units while they fit and while one unit is
  // left for each piece still to come; the last piece takes the rest. Greedy filling under the
  // smallest feasible time keeps every piece within it.
  std::size_t i = 0;
  for (std::size_t p = 0; p < k; ++p) {
    out[p] = i;
    const std::size_t later = k - p - 1;
    double sum = 0;
    do {
      sum += c[i];
      ++i;
    } while (i < n - later && (later == 0 || sum + c[i] <= hi * cap(p)));
  }
  out[k] = n;
}
}  // namespace detail

/// \brief The boundaries of a balanced cut of costs into K stages: stage s holds units
/// [cut[s], cut[s + 1]). Usable in a static_assert when the costs are constants.
template <std::size_t K, std::size_t N>
constexpr std::array<std::size_t, K + 1> balanced_partition(const std::array<double, N>& costs) {
  static_assert(K >= 1 && K <= N, "epl: a model of N units cannot be cut into more than N stages (or none)");
  std::array<std::size_t, K + 1> cut{};
  detail::balanced_cut(costs.data(), N, K, cut.data());
  return cut;
}

/// \brief The same at run time: an error names both numbers when there are fewer units than
/// stages. With `speeds` (one per stage: cluster.rank_speeds), stage s takes its cost over
/// speeds[s], so a faster stage takes more of the model.
inline std::vector<std::size_t> balanced_partition(const std::vector<double>& costs, std::size_t stages,
                                                   const std::vector<double>& speeds = {}) {
  EPL_CHECK(stages >= 1 && stages <= costs.size(), "a model of ", costs.size(), " sequential units cannot be cut into ", stages,
            " pipeline stages; use at most ", costs.size(), " stages (pipeline.num_stages, times pipeline.num_virtual_stages under "
            "pipeline.strategy=Interleaved), or split the model into more "
            "layers (a struct of layers, nn::Seq or nn::Repeat)");
  EPL_CHECK(speeds.empty() || speeds.size() == stages, "balanced_partition: ", speeds.size(), " stage speeds for ", stages, " stages");
  std::vector<std::size_t> cut(stages + 1);
  detail::balanced_cut(costs.data(), costs.size(), stages, cut.data(), speeds.empty() ? nullptr : speeds.data());
  return cut;
}

/// \brief The largest stage cost of a cut over its mean: 1 is perfect balance.
inline double imbalance(const std::vector<double>& costs, const std::vector<std::size_t>& cut) {
  double total = 0, most = 0;
  for (std::size_t s = 0; s + 1 < cut.size(); ++s) {
    double sum = 0;
    for (std::size_t i = cut[s]; i < cut[s + 1]; ++i) sum += costs[i];
    total += sum;
    most = std::max(most, sum);
  }
  return total > 0 ? most / (total / static_cast<double>(cut.size() - 1)) : 1.0;
}

/// \brief What a layer type states of its costs at compile time (static_cost<L>::value): the
/// partitioner's multiply-adds per token and, for the planner's compile-time check
/// (plan::fits), its parameter elements and the activation bytes it keeps per row (sample)
/// from forward to backward.
struct Cost {
  double macs_per_token = 0;
  std::int64_t parameters = 0;
  std::int64_t activation_bytes = 0;
  /// Its output's bytes per row: what a pipeline stage that ends with it sends on (the
  /// compile-time search's pipeline traffic; 0: not stated, none counted).
  std::int64_t output_bytes = 0;
  /// Bytes per row its tensor-parallel collectives all-reduce, forward and backward together,
  /// when it runs inside an epl::Split (Megatron's MLP: its output forward, its input backward).
  std::int64_t tensor_bytes = 0;
  /// How many all-reduces those are per pass (each pays the link's latency).
  int tensor_collectives = 0;
  /// Bytes per row its backward allocates for a while over what its forward kept (the gradient of
  /// its input, for the sized layers here): a rank's compile-time activation peak is what its
  /// stage keeps plus the largest of these (0: not stated).
  std::int64_t backward_bytes = 0;
  /// Bytes per row its backward's first half (B) leaves for its weight half (W) under a schedule
  /// that splits them (ZeroBubble): the saved input and the output's gradient its weight gradient
  /// is made from (0: not stated, or no weights).
  std::int64_t weight_bytes = 0;
};

/// \brief Specialise with `static constexpr double value` (multiply-adds per token) or
/// `static constexpr epl::strategy::Cost value` for a layer type whose cost is known from its
/// type alone; then models made of such layers partition, and are planned, at compile time.
template <class L>
struct static_cost;

/// nn::SizedLinear's costs from its sizes: In x Out multiply-adds a token, its weight and bias,
/// the output it keeps a row (f32; its input is the layer before's), that output's bytes sent on,
/// its input's gradient, which its backward allocates, and its input and its output's gradient,
/// which a split backward's B pass leaves for W.
template <std::int64_t In, std::int64_t Out, bool Bias, std::int64_t T>
struct static_cost<nn::SizedLinear<In, Out, Bias, T>> {
  static constexpr Cost value{.macs_per_token = static_cast<double>(In) * static_cast<double>(Out),
                              .parameters = In * Out + (Bias ? Out : 0),
                              .activation_bytes = 4 * Out * T,
                              .output_bytes = 4 * Out * T,
                              .backward_bytes = 4 * In * T,
                              .weight_bytes = 4 * (In + Out) * T};
};

/// A sized pointwise layer's: no parameters, a multiply-add an element, the output it keeps, its
/// input's gradient in backward.
template <class K, std::int64_t Width>
struct static_cost<nn::SizedPointwise<K, Width>> {
  static constexpr Cost value{.macs_per_token = static_cast<double>(Width), .parameters = 0, .activation_bytes = 4 * Width,
                              .output_bytes = 4 * Width, .backward_bytes = 4 * Width};
};

namespace detail {
constexpr Cost as_cost(double macs) { return {macs, 0, 0}; }
constexpr Cost as_cost(const Cost& c) { return c; }
}  // namespace detail

template <class L>
concept has_own_static_cost = requires { detail::as_cost(static_cost<L>::value); };

namespace detail {
template <class L>
constexpr bool costed_part();
template <class... C>
constexpr bool all_costed(nn::type_list<C...>) {
  return (costed_part<C>() && ...);
}
// A Residual or a Recompute boundary is one unit (as strategy::flatten cuts it): its cost is its
// body's, when every part of the body (sequences of parts included) states one.
template <class L>
constexpr bool summable() {
  using N = nn::node_traits<L>;
  if constexpr (N::kind == nn::NodeKind::kResidual || N::kind == nn::NodeKind::kRecompute) return all_costed(typename N::children{});
  else return false;
}
template <class L>
constexpr bool costed_part() {
  if constexpr (has_own_static_cost<L> || summable<L>()) return true;
  else if constexpr (nn::node_traits<L>::kind == nn::NodeKind::kSequence) return all_costed(typename nn::node_traits<L>::children{});
  else return false;
}
}  // namespace detail

/// \brief L states its costs at compile time: static_cost<L>, or a Residual or Recompute whose parts do.
template <class L>
concept has_static_cost = has_own_static_cost<L> || detail::summable<L>();

/// \brief L's static cost as a Cost (a plain number is its multiply-adds); a Residual's or a
/// Recompute's, its parts' summed (its output the last part's, its backward's allocation the
/// largest part's).
template <class L>
  requires has_static_cost<L>
constexpr Cost static_cost_of();
namespace detail {
template <class L>
constexpr Cost part_cost();
template <class... C>
constexpr Cost summed(nn::type_list<C...>) {
  Cost total;
  ((total.macs_per_token += part_cost<C>().macs_per_token, total.parameters += part_cost<C>().parameters,
    total.activation_bytes += part_cost<C>().activation_bytes, total.output_bytes = part_cost<C>().output_bytes,
    total.tensor_bytes += part_cost<C>().tensor_bytes, total.tensor_collectives += part_cost<C>().tensor_collectives,
    total.backward_bytes = part_cost<C>().backward_bytes > total.backward_bytes ? part_cost<C>().backward_bytes : total.backward_bytes,
    total.weight_bytes += part_cost<C>().weight_bytes),
   ...);
  return total;
}
template <class L>
constexpr Cost part_cost() {
  if constexpr (has_own_static_cost<L>) return as_cost(static_cost<L>::value);
  else return summed(typename nn::node_traits<L>::children{});
}
}  // namespace detail
template <class L>
  requires has_static_cost<L>
constexpr Cost static_cost_of() {
  return detail::part_cost<L>();
}

/// \brief The cost of layer l (its static_cost if it has one, else the estimate from parameters).
template <class L>
double unit_cost(L& l) {
  if constexpr (has_static_cost<L>) {
    return static_cost_of<L>().macs_per_token;
  } else {
    double cost = 0;
    nn::visit_nodes(l, [&](std::string_view, auto& node) {
      using N = std::remove_cvref_t<decltype(node)>;
      if constexpr (std::is_same_v<N, nn::Embedding> || std::is_same_v<N, nn::PositionEmbedding>) {
        cost -= static_cast<double>(node.weight.global_shape().numel());  // counted below as a parameter: undo
        cost += static_cast<double>(node.weight.shape[1]);                // one row per token
      } else if constexpr (std::is_same_v<N, nn::Parameter>) {
        cost += static_cast<double>(node.global_shape().numel());
      }
    });
    return cost > 0 ? cost : 1.0;  // a layer without parameters still takes some time
  }
}

/// \brief What a layer's tensor-parallel collectives all-reduce per token over its split group in
/// one forward and backward, once it is sharded (epl::Split): a row-parallel Linear its output
/// forward, a column-parallel Linear its input's gradient backward (once for those that share an
/// input, the split's entry reducing it) and, when it gathers its output, that all-gather (counted
/// as half an all-reduce of it), a vocabulary-parallel Embedding its output forward.
/// Elements, not bytes; none for a layer that is not split.
struct TensorTraffic {
  std::int64_t elements = 0;  ///< per token
  int collectives = 0;        ///< all-reduces per forward and backward
};
template <class L>
TensorTraffic tensor_traffic(L& l) {
  TensorTraffic t;
  bool deferred = false;  // column-parallel Linears that leave their input gradient to the split's entry
  nn::visit_nodes(l, [&](std::string_view, auto& node) {
    using N = std::remove_cvref_t<decltype(node)>;
    if constexpr (std::is_base_of_v<nn::Linear, N>) {  // nn::SizedLinear too
      const auto& shape = node.weight.global_shape();  // [out, in]
      if (node.parallel() == nn::Linear::Parallel::kRow) {
        t.elements += shape[0];
        ++t.collectives;
      } else if (node.parallel() == nn::Linear::Parallel::kColumn && (!node.input_grad_deferred() || !deferred)) {
        deferred = deferred || node.input_grad_deferred();
        t.elements += shape[1];
        ++t.collectives;
      }
      if (node.gathers_output()) {  // an all-gather of its output: half an all-reduce's traffic
        t.elements += shape[0] / 2;
        ++t.collectives;
      }
    } else if constexpr (std::is_same_v<N, nn::Embedding>) {
      if (node.weight.shape[0] != node.weight.global_shape()[0]) {
        t.elements += node.weight.shape[1];
        ++t.collectives;
      }
    }
  });
  return t;
}

namespace detail {
// A fixed sequence (an aggregate, a Seq) is its parts; any other node one unit with a static cost.
template <class L>
constexpr bool is_fixed_sequence = nn::kind_of_v<L> == nn::NodeKind::kSequence;
template <class L>
constexpr std::size_t static_unit_count();
template <class... P>
constexpr std::size_t static_unit_count_of(nn::type_list<P...>) {
  return (static_unit_count<P>() + ... + 0);
}
template <class L>
constexpr std::size_t static_unit_count() {
  if constexpr (is_fixed_sequence<L>) {
    return static_unit_count_of(typename nn::node_traits<L>::children{});
  } else {
    static_assert(has_static_cost<L>, "epl: a compile-time partition needs every unit's cost in its type: specialise "
                                      "epl::strategy::static_cost<Layer> (the offending type is L here)");
    return 1;
  }
}
template <class L, std::size_t N>
constexpr void static_unit_costs(std::array<double, N>& out, std::size_t& at);
template <std::size_t N, class... P>
constexpr void static_unit_costs_of(nn::type_list<P...>, std::array<double, N>& out, std::size_t& at) {
  (static_unit_costs<P>(out, at), ...);
}
template <class L, std::size_t N>
constexpr void static_unit_costs(std::array<double, N>& out, std::size_t& at) {
  if constexpr (is_fixed_sequence<L>) static_unit_costs_of(typename nn::node_traits<L>::children{}, out, at);
  else out[at++] = static_cost_of<L>().macs_per_token;
}
}  // namespace detail

/// \brief The costs of Model's sequential units, from its type alone.
template <class Model>
consteval auto static_costs() {
  std::array<double, detail::static_unit_count<Model>()> costs{};
  std::size_t at = 0;
  detail::static_unit_costs<Model>(costs, at);
  return costs;
}
/// \brief Model cut into K balanced stages at compile time: stage s holds units [cut[s], cut[s+1]).
/// `static_assert(epl::strategy::static_partition<MyModel, 2>()[1] == 3);`
template <class Model, std::size_t K>
consteval auto static_partition() {
  return balanced_partition<K>(static_costs<Model>());
}

}  // namespace strategy
}  // namespace v0
}  // namespace epl
