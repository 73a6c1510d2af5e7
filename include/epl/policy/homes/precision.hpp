#pragma once
/// \file
/// \brief The parameters' dtype (TrainerOptions::dtype): f32, or f64 on a device that computes it.
/// No tag and no key: half precision is mixed precision's (homes/amp.hpp), whose master weights
/// stay f32. Decided first: the others may read it.
#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {
namespace policy::home {
struct Precision {
  struct Keys {
    DType dtype = DType::kF32;  ///< TrainerOptions::dtype
  };
  struct Compiled {
    bool f64 = false;  ///< the device computes in f64
  };
  struct Decision {
    DType dtype = DType::kF32;  ///< parameters, gradients and optimizer state
  };
  template <class K, class C, class S>
  static void decide(const K& k, const C& c, const Facts&, S& s) {
    s.dtype = k.dtype;
    EPL_CHECK(k.dtype != DType::kBF16 && k.dtype != DType::kF16, "TrainerOptions::dtype = ", name_of(k.dtype), ": parameters, "
              "gradients and optimizer state stay f32; for ", name_of(k.dtype), " GEMMs use mixed precision: amp.level = \"O1\" with "
              "epl::Policies<epl::Amp<epl::amp::", k.dtype == DType::kBF16 ? "BF16" : "FP16", ">> (leave dtype at f32)");
    EPL_CHECK(k.dtype == DType::kF32 || (k.dtype == DType::kF64 && c.f64), "TrainerOptions::dtype = ", name_of(k.dtype),
              k.dtype == DType::kF64 ? " but the device computes in f32 only; train in f64 on device::CpuF64, or leave dtype at f32"
                                     : " is not a floating type; use f32");
  }
};
}  // namespace policy::home
}  // namespace v0
}  // namespace epl
