#pragma once
/// \file
/// \brief Shape: up to kMaxRank extents, row-major, held inline (no allocation per tensor).
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {

/// \brief The extents of a row-major tensor, rank 0 (a scalar) to kMaxRank.
class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) {
    EPL_CHECK(static_cast<int>(dims.size()) <= kMaxRank, "shape rank ", dims.size(), " exceeds ", kMaxRank);
    for (auto d : dims) push_back(d);
  }

  /// The most elements a shape may describe (2^56): its bytes then fit in 64 bits for every dtype,
  /// and numel() never overflows.
  static constexpr std::int64_t kMaxElements = std::int64_t{1} << 56;

  /// Appends an extent; the nonzero extents must multiply to at most kMaxElements.
  void push_back(std::int64_t d) {
    EPL_CHECK(rank_ < kMaxRank, "shape rank exceeds ", kMaxRank);
    replace(rank_, d);
    ++rank_;
  }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] std::int64_t operator[](int i) const { return dims_[index(i)]; }
  std::int64_t& operator[](int i) { return dims_[index(i)]; }
  [[nodiscard]] std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  /// \brief The product of all extents but the last: the row count of the 2-D view.
  [[nodiscard]] std::int64_t rows() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i + 1 < rank_; ++i) n *= dims_[i];
    return n;
  }
  [[nodiscard]] std::int64_t back() const noexcept { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  /// \brief The same shape with its last extent replaced.
  [[nodiscard]] Shape with_back(std::int64_t d) const {
    Shape s = *this;
    if (s.rank_ == 0) s.push_back(d); else s.replace(s.rank_ - 1, d);
    return s;
  }
  /// \brief The same shape with its first extent replaced.
  [[nodiscard]] Shape with_front(std::int64_t d) const {
    Shape s = *this;
    s.replace(index(0), d);
    return s;
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i) if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend std::ostream& operator<<(std::ostream& out, const Shape& s) {
    out << '[';
    for (int i = 0; i < s.rank_; ++i) out << (i ? ", " : "") << s.dims_[i];
    return out << ']';
  }
  [[nodiscard]] std::string str() const { return detail::concat(*this); }

 private:
  // A product of extents past kMaxElements (most often a size that overflowed before it became
  // an extent, or {1 << 40, 1 << 40}) would wrap numel() to garbage, 0 included: refused, named.
  // The nonzero extents' product is bounded, so that no partial product in numel() overflows.
  // Extent i (at most rank_: one past the last appends) becomes d, checked as every extent is, and
  // only then: a refused extent leaves the shape as it was. A product of extents past
  // kMaxElements (most often a size that overflowed before it became an extent, or
  // {1 << 40, 1 << 40}) would wrap numel() to garbage, 0 included. The nonzero extents' product is
  // bounded, so that no partial product in numel() overflows.
  void replace(int i, std::int64_t d) {
    EPL_CHECK(d >= 0, "negative extent ", d, " in a shape");
    const int rank = std::max(rank_, i + 1);
    std::int64_t n = 1;
    bool over = false;
    for (int j = 0; j < rank; ++j)
      if (const std::int64_t e = j == i ? d : dims_[j]; e != 0) over = over || __builtin_mul_overflow(n, e, &n) || n > kMaxElements;
    if (over) {
      Shape would = *this;
      would.dims_[i] = d;
      would.rank_ = rank;
      EPL_FAIL("shape ", would, " has more than 2^56 elements: an extent computed from a size that overflowed, or a size in the "
               "wrong unit; give sizes whose product fits");
    }
    dims_[i] = d;
  }
  int index(int i) const {
    if (i < 0) i += rank_;
    EPL_CHECK(i >= 0 && i < rank_, "dimension ", i, " out of range for a rank-", rank_, " shape");
    return i;
  }
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace v0
}  // namespace epl
