#pragma once
/// \file
/// \brief Shape: up to kMaxRank extents, row-major, held inline (no allocation per tensor).
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
    EPL_CHECK(d >= 0, "negative extent ", d, " in a shape");
    dims_[rank_++] = d;
    check_size();
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
  [[nodiscard]] std::int64_t rows() const noexcept { return rank_ == 0 ? 1 : numel() / (back() ? back() : 1); }
  [[nodiscard]] std::int64_t back() const noexcept { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  /// \brief The same shape with its last extent replaced.
  [[nodiscard]] Shape with_back(std::int64_t d) const {
    Shape s = *this;
    if (s.rank_ == 0) return s.push_back(d), s;
    EPL_CHECK(d >= 0, "negative extent ", d, " in a shape");
    s.dims_[s.rank_ - 1] = d;
    s.check_size();
    return s;
  }
  /// \brief The same shape with its first extent replaced.
  [[nodiscard]] Shape with_front(std::int64_t d) const {
    Shape s = *this;
    EPL_CHECK(d >= 0, "negative extent ", d, " in a shape");
    s[0] = d;
    s.check_size();
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
  void check_size() const {
    std::int64_t n = 1;
    bool over = false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != 0) over = over || __builtin_mul_overflow(n, dims_[i], &n) || n > kMaxElements;
    EPL_CHECK(!over, "shape ", *this, " has more than 2^56 elements: an extent computed from a size that overflowed, or a size in "
              "the wrong unit; give sizes whose product fits");
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
