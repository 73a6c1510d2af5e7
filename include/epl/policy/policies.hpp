#pragma once
/// \file
/// \brief epl::Policies<...> — the memory and precision policies of a training run, as types:
/// `epl::Policies<epl::Zero<1>, ...>`. Each policy kind has a default; a Trainer reads them with
/// policy_of.
#include <type_traits>

#include "epl/core/dtype.hpp"

namespace epl {
inline namespace v0 {

/// \brief ZeRO stage: 0 (every rank holds everything), 1 (optimizer state sharded over the
/// data-parallel group), 2 (+ gradients), 3 (+ parameters).
template <int Stage>
struct Zero {
  static_assert(Stage >= 0 && Stage <= 3, "epl::Zero<Stage>: the stage is 0, 1, 2 or 3");
  static constexpr int kStage = Stage;
};

namespace offload {
/// \brief Weights stay on the device (the default).
struct None {};
/// \brief EPL's offload.level "v0": weights, gradients and optimizer state live in the host pool
/// and each layer's weights are copied to the device before it runs, the next one prefetched
/// (the per-layer gathers of ZeRO stage 3, so it needs epl::Zero<3>).
struct V0 {};
}  // namespace offload

/// \brief Where the weights live: offload::None (on the device) or offload::V0 (host memory).
template <class Level>
struct Offload {
  static_assert(std::is_same_v<Level, offload::None> || std::is_same_v<Level, offload::V0>,
                "epl::Offload<Level>: the level is epl::offload::None or epl::offload::V0");
  static constexpr bool kHost = std::is_same_v<Level, offload::V0>;
};

namespace amp {
/// \brief No mixed precision (the default): every GEMM multiplies f32 operands.
struct Off {
  static constexpr DType kDType = DType::kF32;
};
/// \brief bfloat16: f32's range with 8 bits of mantissa; overflow is as rare as in f32.
struct BF16 {
  static constexpr DType kDType = DType::kBF16;
};
/// \brief IEEE half: 11 bits of mantissa, largest finite value 65504; the loss scale keeps small
/// gradients above its underflow, and a step that overflows is skipped.
struct FP16 {
  static constexpr DType kDType = DType::kF16;
};
}  // namespace amp

/// \brief Memory-efficient mixed precision (EPL's amp.level "O1"): parameters, gradients and
/// optimizer state stay f32 (the master copy); each GEMM rounds its operands to Precision on use,
/// into copies that live for that GEMM only, and accumulates in f32. The loss is scaled
/// (amp.loss_scale) and the update skipped when a gradient overflows.
template <class Precision>
struct Amp {
  static_assert(std::is_same_v<Precision, amp::Off> || std::is_same_v<Precision, amp::BF16> ||
                    std::is_same_v<Precision, amp::FP16>,
                "epl::Amp<Precision>: the precision is epl::amp::Off, epl::amp::BF16 or epl::amp::FP16");
  static constexpr DType kMatmul = Precision::kDType;
};

namespace detail {
template <class P>
struct is_zero : std::false_type {};
template <int N>
struct is_zero<Zero<N>> : std::true_type {};
template <class P>
struct is_offload : std::false_type {};
template <class L>
struct is_offload<Offload<L>> : std::true_type {};
template <class P>
struct is_amp : std::false_type {};
template <class L>
struct is_amp<Amp<L>> : std::true_type {};

// The first of P... for which Is<P> holds, else Default.
template <template <class> class Is, class Default, class... P>
struct find_policy {
  using type = Default;
};
template <template <class> class Is, class Default, class First, class... Rest>
struct find_policy<Is, Default, First, Rest...> {
  using type = std::conditional_t<Is<First>::value, First, typename find_policy<Is, Default, Rest...>::type>;
};
}  // namespace detail

/// \brief The policies of a run; any kind not given takes its default (Zero<0>,
/// Offload<offload::None>, Amp<amp::Off>).
template <class... P>
struct Policies {
  static_assert(((detail::is_zero<P>::value || detail::is_offload<P>::value || detail::is_amp<P>::value) && ...),
                "epl::Policies<...> takes policy types only: epl::Zero<k>, epl::Offload<level>, epl::Amp<precision> (one of the "
                "types given is not a policy)");
  static_assert((0 + ... + static_cast<int>(detail::is_zero<P>::value)) <= 1,
                "epl::Policies<...> got more than one epl::Zero<k>; give one (it runs every stage up to k)");
  static_assert((0 + ... + static_cast<int>(detail::is_offload<P>::value)) <= 1,
                "epl::Policies<...> got more than one epl::Offload<level>; give one");
  static_assert((0 + ... + static_cast<int>(detail::is_amp<P>::value)) <= 1,
                "epl::Policies<...> got more than one epl::Amp<precision>; give one");
  using zero = typename detail::find_policy<detail::is_zero, Zero<0>, P...>::type;
  using mixed_precision = typename detail::find_policy<detail::is_amp, Amp<amp::Off>, P...>::type;
  using offloading = typename detail::find_policy<detail::is_offload, Offload<offload::None>, P...>::type;
  static_assert(!offloading::kHost || zero::kStage == 3,
                "epl::Offload<epl::offload::V0> streams each layer's weights to the device through ZeRO stage 3's per-layer "
                "gathers: the policies need epl::Zero<3> (add it, or raise the epl::Zero<k> given to 3; it works on one rank too)");
};

/// \brief True for epl::Policies<...>.
template <class T>
struct is_policies : std::false_type {};
template <class... P>
struct is_policies<Policies<P...>> : std::true_type {};

}  // namespace v0
}  // namespace epl
