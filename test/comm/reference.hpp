#pragma once
// The values every backend's collective tests reduce, and the expected results, computed here
// independently of the library.
#include <algorithm>
#include <cstdint>

#include "epl/comm/communicator.hpp"

namespace epl::test {

/// What rank r contributes at element i (small integers: exact in every float type).
inline double value(int r, std::int64_t i) { return static_cast<double>((r + 1) * (i % 7) - r); }

/// op over ranks 0..n-1 of value(r, i).
inline double expected(comm::ReduceOp op, int n, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = value(r, i);
    acc = op == comm::ReduceOp::kMax ? std::max(acc, v) : op == comm::ReduceOp::kMin ? std::min(acc, v) : acc + v;
  }
  return op == comm::ReduceOp::kMean ? acc / n : acc;
}

}  // namespace epl::test
