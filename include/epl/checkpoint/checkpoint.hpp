#pragma once
/// \file
/// \brief Training checkpoints on disk: a directory per saved step with one shard file per rank
/// that holds tensors and a manifest that says where every piece of every tensor lies.
///
///   DIR/step-00000010/manifest.txt     text: the step's scalars, the configuration, each tensor's
///                                      global shape, each piece (which tensor, which part of it,
///                                      which file, which offset, a CRC-32C), each file's size; its
///                                      last line is the CRC-32C of everything above it
///   DIR/step-00000010/rank-00003.bin   the pieces world rank 3 wrote, back to back
///
/// A save writes into a directory of its own with a name no one can guess
/// (DIR/.step-00000010.<pid>-<n>-<clock>.partial, its files created with O_EXCL | O_NOFOLLOW)
/// and renames it to step-N when the manifest is written, so a directory named step-* is always
/// complete; a crash mid-save leaves only the .partial, which the next save removes. Nothing is
/// written through a link or over anything but what a save wrote (epl/core/files.hpp). A piece is a range [begin, end) of the elements of one
/// rank's part of a tensor (nn::Shard: a Split's slice; the range: a ZeRO shard's slice of it),
/// so any layout reads back into any other: the reader rebuilds the whole tensor from the
/// pieces and each rank keeps its part. The Trainer writes and reads these (Trainer::save,
/// Trainer::resume); this file knows nothing of models or ranks.
#include <boost/crc.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/core/files.hpp"
#include "epl/core/shape.hpp"
#include "epl/nn/parameter.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

/// The manifest's format: 2 adds where a given configuration key came from (a fourth word on its
/// `config` line); a version-1 manifest is read as well.
inline constexpr int kVersion = 2;
inline constexpr const char* kManifest = "manifest.txt";
/// The tensor a policy's state (policy::SavedState, the average of the weights) is saved as:
/// `<parameter>@<suffix>`.
inline std::string kept_name(std::string_view parameter, std::string_view suffix) {
  return std::string(parameter).append("@").append(suffix);
}
/// The tensor the optimizer's state slot k of a parameter is saved as: `<parameter>@state<k>`
/// (AdamW's two moments are slots 0 and 1).
inline std::string state_name(std::string_view parameter, std::size_t slot) { return kept_name(parameter, "state" + std::to_string(slot)); }
/// Whether what follows a tensor name's '@' is an optimizer's slot (state_name's), not a policy's state.
inline bool optimizer_slot(std::string_view suffix) {
  return suffix.size() > 5 && suffix.starts_with("state") &&
         suffix.find_first_not_of("0123456789", 5) == std::string_view::npos;
}
/// The largest rank and element count a manifest may describe: beyond them it is corrupt.
inline constexpr int kMaxRank = Shape::kMaxRank;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

/// \brief CRC-32C (Castagnoli's polynomial, as iSCSI and ext4 use): the SSE4.2 instruction, 8
/// bytes a step, where the target has it (some 8 GB/s, so a save is bound by the disk), else
/// Boost.CRC's table (the same values, some 0.4 GB/s).
inline std::uint32_t crc32c(const void* data, std::size_t n) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t c = 0xffffffffu;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32 ^ 0xffffffffu;
#else
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> c;
  c.process_bytes(data, n);
  return c.checksum();
#endif
}

/// \brief A tensor as the single-device model has it.
struct TensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
};

/// \brief Part of a tensor in a shard file: elements [begin, end) of the part `shard` of the
/// tensor (its shape `local`), stored row-major at `offset` in `file`.
struct Piece {
  std::string tensor, file;
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;
  nn::Shard shard;
  Shape local;
  std::int64_t begin = 0, end = 0;
};

/// \brief Named text values, in order (a manifest's scalars and configuration).
using TextValues = std::vector<std::pair<std::string, std::string>>;
/// \brief The value named `name` in `values`, or null.
[[nodiscard]] inline const std::string* value_of(const TextValues& values, std::string_view name) {
  for (const auto& [k, v] : values)
    if (k == name) return &v;
  return nullptr;
}

/// \brief What a checkpoint holds: named scalars (the step, the optimizer's step count, the loss
/// scale, the loaders' positions, ...), the configuration as text, the tensors, their pieces and
/// the files that hold them.
struct Manifest {
  std::int64_t step = 0;
  TextValues scalars;  // name (no whitespace), value (escaped on disk)
  TextValues config;   // key, value (escaped on disk)
  /// The configuration keys the run was given, and where ("environment", "command line", "code"
  /// as Config::name_of says); a key not here had its default (or the manifest is of version 1).
  std::map<std::string, std::string, std::less<>> given;
  std::map<std::string, TensorInfo> tensors;
  std::vector<Piece> pieces;
  std::map<std::string, std::uint64_t> files;                // name, bytes

  /// The scalar `name`, or null.
  [[nodiscard]] const std::string* scalar(std::string_view name) const { return value_of(scalars, name); }
};

/// \brief The name of the checkpoint directory of a step: step-00000010 (at least 8 digits).
inline std::string step_name(std::int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}
/// \brief The step a checkpoint directory's name says (step_name's inverse), or nullopt.
inline std::optional<std::int64_t> step_of(std::string_view name) {
  if (!name.starts_with("step-") || name.size() < 13 || name.size() > 5 + 18) return std::nullopt;
  std::int64_t step = -1;
  const auto r = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  if (r.ec != std::errc() || r.ptr != name.data() + name.size() || step < 0 || step_name(step) != name) return std::nullopt;
  return step;
}

/// \brief Whether `name` in `folder` is a step directory a save completed: a directory that holds
/// its manifest (a save writes it last, then renames the directory into place).
inline bool is_saved_step(const files::Folder& folder, const std::string& name) {
  return folder.kind(name) == files::Kind::kDirectory && folder.sub(name, "checkpoint").kind(kManifest) == files::Kind::kRegular;
}

namespace detail {
// The first element of a tensor's bytes (f32 or f64; other dtypes hold no such value a load must
// refuse) that is NaN or infinite, or negative where `nonnegative`: its index and value.
inline std::optional<std::pair<std::size_t, double>> first_out_of_domain(const std::vector<unsigned char>& bytes, DType dtype,
                                                                         bool nonnegative = false) {
  auto scan = [&](auto zero) -> std::optional<std::pair<std::size_t, double>> {  // not [&]<class T>(T): nvcc's host pass mangles it
    using T = decltype(zero);
    for (std::size_t i = 0; i + sizeof(T) <= bytes.size(); i += sizeof(T)) {
      T v;
      std::memcpy(&v, bytes.data() + i, sizeof(T));
      if (!std::isfinite(v) || (nonnegative && v < 0)) return std::pair{i / sizeof(T), static_cast<double>(v)};
    }
    return std::nullopt;
  };
  if (dtype == DType::kF32) return scan(0.0f);
  if (dtype == DType::kF64) return scan(0.0);
  return std::nullopt;
}
// Names the first NaN or infinity in a tensor's bytes, or negative value where `nonnegative`:
// "<source> holds <v> at element <i> of <tensor>: <fix>". A NaN in a weight would otherwise
// surface steps later, as a NaN loss blamed on the learning rate or the inputs.
inline void check_finite(const std::vector<unsigned char>& bytes, DType dtype, const std::string& source, const std::string& tensor,
                         const char* fix, bool nonnegative = false) {
  const auto bad = first_out_of_domain(bytes, dtype, nonnegative);
  if (!bad) return;
  EPL_CHECK(std::isfinite(bad->second), source, " holds ", bad->second, " at element ", bad->first, " of ", tensor, ": ", fix);
  EPL_FAIL(source, " holds ", bad->second, " at element ", bad->first, " of ", tensor, ", a slot of the optimizer's state that is never "
           "negative (its kNonNegativeSlots: AdamW's second moment, a mean of squares): the file was written by hand or damaged before "
           "its checksums; resume from an earlier step's checkpoint (move this one aside)");
}
// What a user does about a checkpoint that cannot be read.
inline std::string set_aside(const std::filesystem::path& checkpoint) {
  return "; use an earlier checkpoint (move " + checkpoint.string() + " aside and a resume takes the newest one left)";
}
// A name or value written as one token: no whitespace or control characters, not empty.
inline bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}
// Configuration values may hold anything: %XX for '%', whitespace and control bytes; "%" alone
// for the empty string.
inline std::string escape(std::string_view s) {
  if (s.empty()) return "%";
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == 0x7f || c == '%') {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}
inline std::optional<std::string> unescape(std::string_view s) {
  if (s == "%") return std::string();
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;  // a '%' needs two hex digits after it
    unsigned v = 0;
    const auto r = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    if (r.ec != std::errc() || r.ptr != s.data() + i + 3) return std::nullopt;
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}
inline std::string dtype_token(DType t) { return std::string(name_of(t)); }
inline std::optional<DType> dtype_of(std::string_view s) {
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64})
    if (s == name_of(t)) return t;
  return std::nullopt;
}

// The words of one manifest line, parsed with the line's number for errors.
class Line {
 public:
  Line(std::string_view text, std::size_t number, const std::string& where) : number_(number), where_(&where) {
    std::size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && text[i] == ' ') ++i;
      const std::size_t b = i;
      while (i < text.size() && text[i] != ' ') ++i;
      if (i > b) words_.push_back(text.substr(b, i - b));
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return words_.size(); }
  [[nodiscard]] std::string_view word(std::size_t i) const {
    if (i >= words_.size()) fail("has ", words_.size(), " words where at least ", i + 1, " are needed");
    return words_[i];
  }
  template <class T>
  [[nodiscard]] T number(std::size_t i, T lo, T hi, const char* what, int base = 10) const {
    const std::string_view w = word(i);
    T v{};
    const auto r = std::from_chars(w.data(), w.data() + w.size(), v, base);
    if (r.ec != std::errc() || r.ptr != w.data() + w.size() || v < lo || v > hi)
      fail("has ", what, " \"", w, "\", which is not a whole number from ", lo, " to ", hi);
    return v;
  }
  [[nodiscard]] std::string token(std::size_t i, const char* what) const {
    const std::string_view w = word(i);
    if (!is_token(w)) fail("has a bad ", what);
    return std::string(w);
  }
  void expect_words(std::size_t n) const {
    if (words_.size() != n) fail("has ", words_.size(), " words; a \"", words_.empty() ? "" : words_[0], "\" line has ", n);
  }
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    EPL_FAIL("checkpoint manifest ", *where_, " is corrupt: line ", number_, " ", parts..., set_aside(std::filesystem::path(*where_).parent_path()));
  }

 private:
  std::vector<std::string_view> words_;
  std::size_t number_;
  const std::string* where_;
};

// A shape as "rank d0 d1 ..." from word i; returns the next word's index.
inline std::size_t read_shape(const Line& l, std::size_t i, Shape& s) {
  const int rank = l.number<int>(i, 0, kMaxRank, "a tensor rank");
  s = Shape();
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    const auto e = l.number<std::int64_t>(i + 1 + static_cast<std::size_t>(d), 0, kMaxElements, "a dimension");
    if (e != 0 && n > kMaxElements / e) l.fail("describes a tensor of more than 2^40 elements");
    n *= e;
    s.push_back(e);
  }
  return i + 1 + static_cast<std::size_t>(rank);
}
inline void write_shape(std::string& out, const Shape& s) {
  out += std::to_string(s.rank());
  for (int d = 0; d < s.rank(); ++d) out += " " + std::to_string(s[d]);
}
}  // namespace detail

/// \brief The manifest as text, its last line the CRC-32C of the lines above it.
inline std::string format(const Manifest& m) {
  std::string out = "epl-checkpoint " + std::to_string(kVersion) + "\nstep " + std::to_string(m.step) + "\n";
  for (const auto& [k, v] : m.scalars) {
    EPL_CHECK(detail::is_token(k), "a checkpoint scalar named \"", k, "\" cannot be saved: its name holds whitespace");
    out += "scalar " + k + " " + detail::escape(v) + "\n";
  }
  for (const auto& [k, v] : m.config) {
    const auto from = m.given.find(k);
    out += "config " + detail::escape(k) + " " + detail::escape(v) + (from == m.given.end() ? "" : " " + detail::escape(from->second)) + "\n";
  }
  for (const auto& [name, t] : m.tensors) {
    EPL_CHECK(detail::is_token(name), "a tensor named \"", name, "\" cannot be saved: its name holds whitespace");
    out += "tensor " + name + " " + detail::dtype_token(t.dtype) + " ";
    detail::write_shape(out, t.shape);
    out += "\n";
  }
  for (const auto& [name, bytes] : m.files) out += "file " + name + " " + std::to_string(bytes) + "\n";
  for (const auto& p : m.pieces) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", p.crc);
    out += "piece " + p.tensor + " " + p.file + " " + std::to_string(p.offset) + " " + std::to_string(p.bytes) + " " + crc + " " +
           std::to_string(p.shard.axis) + " " + std::to_string(p.shard.index) + " " + std::to_string(p.shard.parts) + " " +
           std::to_string(p.shard.blocks) + " ";
    detail::write_shape(out, p.local);
    out += " " + std::to_string(p.begin) + " " + std::to_string(p.end) + "\n";
  }
  char end[32];
  std::snprintf(end, sizeof end, "end %08x\n", crc32c(out.data(), out.size()));
  return out + end;
}

/// \brief Reads a manifest's text; `where` names it in errors. Every inconsistency is an
/// epl::Error naming the line: a truncated or edited manifest fails its checksum (unless
/// verify_checksum is false, which reads what the lines say), a piece outside its tensor, a
/// file it names but does not list.
inline Manifest parse(std::string_view text, const std::string& where, bool verify_checksum = true) {
  // the checksum line: the last, over everything before it
  const std::size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string_view::npos;
  const std::string_view end_line = last == std::string_view::npos ? text : text.substr(last + 1);
  const auto checkpoint = std::filesystem::path(where).parent_path();
  EPL_CHECK(end_line.starts_with("end "), "checkpoint manifest ", where, " is truncated or corrupt: its last line is not the \"end\" "
            "line with the checksum (a damaged file)", detail::set_aside(checkpoint));
  if (verify_checksum) {
    const std::string_view body = text.substr(0, last + 1);
    char want[16];
    std::snprintf(want, sizeof want, "%08x", crc32c(body.data(), body.size()));
    const std::string_view got = end_line.substr(4, end_line.size() >= 5 && end_line.back() == '\n' ? end_line.size() - 5 : std::string_view::npos);
    EPL_CHECK(got == want, "checkpoint manifest ", where, " is corrupt: its checksum is ", got, " but its lines sum to ", want,
              " (the file was changed or damaged)", detail::set_aside(checkpoint));
  }
  Manifest m;
  bool header = false, step = false;
  int version = kVersion;
  std::size_t number = 0, pos = 0;
  const std::size_t body_end = last == std::string_view::npos ? 0 : last + 1;
  while (pos < body_end) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view raw = text.substr(pos, (nl == std::string_view::npos ? body_end : nl) - pos);
    pos = nl == std::string_view::npos ? body_end : nl + 1;
    ++number;
    const detail::Line l(raw, number, where);
    if (l.size() == 0) continue;
    const std::string_view kind = l.word(0);
    if (!header) {
      if (kind != "epl-checkpoint") l.fail("is \"", raw.substr(0, 40), "\" where the first line says \"epl-checkpoint ", kVersion, "\"");
      const int v = l.number<int>(1, 0, 1 << 30, "a version");
      if (v < 1 || v > kVersion) l.fail("says version ", v, "; this epl reads versions 1 to ", kVersion, v > kVersion ? " (a newer epl wrote it)" : "");
      version = v;
      header = true;
    } else if (kind == "step") {
      l.expect_words(2);
      m.step = l.number<std::int64_t>(1, 0, std::int64_t{1} << 62, "a step");
      step = true;
    } else if (kind == "scalar") {
      l.expect_words(3);
      auto v = detail::unescape(l.word(2));
      if (!v) l.fail("has a scalar value that is not escaped text");
      m.scalars.emplace_back(l.token(1, "scalar name"), std::move(*v));
    } else if (kind == "config") {
      if (version < 2 || l.size() != 4) l.expect_words(3);  // version 2: where a given key came from, a fourth word
      auto k = detail::unescape(l.word(1)), v = detail::unescape(l.word(2));
      if (!k || !v) l.fail("has a configuration entry that is not escaped text");
      if (l.size() == 4) {
        auto from = detail::unescape(l.word(3));
        if (!from) l.fail("has a configuration entry that is not escaped text");
        m.given.emplace(*k, std::move(*from));
      }
      m.config.emplace_back(std::move(*k), std::move(*v));
    } else if (kind == "tensor") {
      const std::string name = l.token(1, "tensor name");
      const auto dt = detail::dtype_of(l.word(2));
      if (!dt) l.fail("names dtype \"", l.word(2), "\", not one of f32, f64, f16, bf16, i32, i64");
      TensorInfo t{*dt, {}};
      l.expect_words(detail::read_shape(l, 3, t.shape));
      if (!m.tensors.emplace(name, t).second) l.fail("describes tensor ", name, " a second time");
    } else if (kind == "file") {
      l.expect_words(3);
      const std::string name = l.token(1, "file name");
      if (name.find('/') != std::string::npos || name == "." || name == ".." || name == kManifest)
        l.fail("names file \"", name, "\", which is not a shard file's name");
      if (!m.files.emplace(name, l.number<std::uint64_t>(2, 0, std::uint64_t{1} << 50, "a file size")).second)
        l.fail("lists file ", name, " a second time");
    } else if (kind == "piece") {
      Piece p;
      p.tensor = l.token(1, "tensor name");
      p.file = l.token(2, "file name");
      p.offset = l.number<std::uint64_t>(3, 0, std::uint64_t{1} << 50, "an offset");
      p.bytes = l.number<std::uint64_t>(4, 0, std::uint64_t{1} << 50, "a byte count");
      p.crc = l.number<std::uint32_t>(5, 0, 0xffffffffu, "a checksum", 16);
      p.shard.axis = l.number<int>(6, -1, kMaxRank - 1, "a split axis");
      p.shard.index = l.number<std::int64_t>(7, 0, kMaxElements, "a part index");
      p.shard.parts = l.number<std::int64_t>(8, 1, kMaxElements, "a part count");
      p.shard.blocks = l.number<std::int64_t>(9, 1, kMaxElements, "a block count");
      const std::size_t next = detail::read_shape(l, 10, p.local);
      p.begin = l.number<std::int64_t>(next, 0, kMaxElements, "a first element");
      p.end = l.number<std::int64_t>(next + 1, 0, kMaxElements, "an end element");
      l.expect_words(next + 2);
      const auto t = m.tensors.find(p.tensor);
      if (t == m.tensors.end()) l.fail("has a piece of tensor ", p.tensor, ", which no tensor line describes");
      const auto f = m.files.find(p.file);
      if (f == m.files.end()) l.fail("has a piece in file ", p.file, ", which no file line lists");
      const Shape& g = t->second.shape;
      if (p.local.rank() != g.rank()) l.fail("has a piece of rank ", p.local.rank(), " of tensor ", p.tensor, " of rank ", g.rank());
      if (p.shard.axis >= g.rank() || p.shard.index >= p.shard.parts) l.fail("has a piece that is no part of tensor ", p.tensor);
      for (int d = 0; d < g.rank(); ++d) {
        const bool cut = d == p.shard.axis && p.shard.parts > 1;
        if (cut ? (g[d] % (p.shard.parts * p.shard.blocks) != 0 || p.local[d] * p.shard.parts != g[d]) : p.local[d] != g[d])
          l.fail("has a piece of shape ", p.local, " that is not part ", p.shard.index, " of ", p.shard.parts, " of tensor ", p.tensor,
                 " ", g);
      }
      if (p.begin > p.end || p.end > p.local.numel()) l.fail("has elements [", p.begin, ", ", p.end, ") of a part of ", p.local.numel());
      if (p.bytes != static_cast<std::uint64_t>(p.end - p.begin) * size_of(t->second.dtype))
        l.fail("has ", p.bytes, " bytes for ", p.end - p.begin, " ", name_of(t->second.dtype), " elements");
      if (p.offset + p.bytes > f->second) l.fail("has a piece past the end of file ", p.file, " (", f->second, " bytes)");
      m.pieces.push_back(std::move(p));
    } else {
      l.fail("starts with \"", kind.substr(0, 40), "\", which is not a manifest line");
    }
  }
  EPL_CHECK(header && step, "checkpoint manifest ", where, " is corrupt: it lacks its \"epl-checkpoint\" or \"step\" line");
  return m;
}

/// \brief Where a checkpoint's bytes come from: a file's size (nullopt: it does not exist) and a
/// read of a range. The default reads the directory's files; a fuzzer or a test serves memory.
struct Source {
  std::function<std::optional<std::uint64_t>(const std::string& file)> size;
  std::function<void(const std::string& file, std::uint64_t offset, void* out, std::uint64_t bytes)> read;
};

/// \brief The files of a checkpoint directory, each read without following a link or waiting on
/// a FIFO: a shard file that is not a regular file is an error naming it.
inline Source directory_source(const std::filesystem::path& dir) {
  auto folder = std::make_shared<files::Folder>(dir, "checkpoint");
  auto open = std::make_shared<std::map<std::string, int>>();
  auto closer = std::shared_ptr<void>(nullptr, [open](void*) {
    for (const auto& [name, fd] : *open) ::close(fd);
  });
  Source s;
  s.size = [folder](const std::string& file) -> std::optional<std::uint64_t> {
    struct stat st {};
    if (::fstatat(folder->fd(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
    EPL_CHECK(S_ISREG(st.st_mode), "checkpoint shard file ", *folder / file, " is ", files::describe(files::detail::kind_of(st)),
              " where a save writes a regular file", detail::set_aside(folder->path()));
    return static_cast<std::uint64_t>(st.st_size);
  };
  s.read = [folder, open, closer](const std::string& file, std::uint64_t offset, void* out, std::uint64_t bytes) {
    auto& fd = open->try_emplace(file, -1).first->second;
    if (fd < 0) {
      const int opened = ::openat(folder->fd(), file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      EPL_CHECK(opened >= 0, "cannot open checkpoint shard file ", *folder / file, ": ", files::detail::error_text(errno),
                errno == ELOOP ? " (it is a symbolic link where a save writes a regular file)" : "");
      struct stat st {};
      if (::fstat(opened, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(opened);
        EPL_FAIL("checkpoint shard file ", *folder / file, " is not a regular file", detail::set_aside(folder->path()));
      }
      fd = opened;
    }
    auto* b = static_cast<char*>(out);
    for (std::uint64_t done = 0; done < bytes;) {
      const ssize_t n = ::pread(fd, b + done, bytes - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      EPL_CHECK(n > 0, "reading ", bytes, " bytes at offset ", offset, " of checkpoint shard file ", *folder / file, " failed",
                n < 0 ? std::string(": ") + files::detail::error_text(errno) : std::string(" (it is shorter than that)"));
      done += static_cast<std::uint64_t>(n);
    }
  };
  return s;
}

inline std::optional<std::filesystem::path> newest(const std::filesystem::path& dir);

/// \brief Reads a checkpoint: its manifest, checked against the files it lists (each present and
/// of the size it says), and whole tensors rebuilt from their pieces (each piece's checksum
/// checked, every element covered).
class Reader {
 public:
  /// \brief The checkpoint in directory dir (a step-* directory).
  explicit Reader(const std::filesystem::path& dir) : Reader(open_manifest(dir), dir) {
    // every reader of a directory alike: epl-checkpoint show and export too (a stranger's finding)
    const auto named = step_of(dir.filename().string());
    EPL_CHECK(!named || *named == manifest().step, "checkpoint ", dir, " is named for step ", *named, " but its manifest says step ",
              manifest().step, ": a step directory renamed or copied over another; rename it step-",
              step_name(manifest().step).substr(5), " or move it aside");
  }
  /// \brief A manifest's text and the source of its files; `where` names the checkpoint in errors.
  /// verify_checksums false skips the manifest's and the pieces' checksums (what a fuzzer reads).
  Reader(const std::string& manifest_text, std::string where, Source source, bool verify_checksums = true)
      : where_(std::move(where)), source_(std::move(source)),
        manifest_(parse(manifest_text, where_ + "/" + kManifest, verify_checksums)), verify_(verify_checksums) {
    for (const auto& [name, bytes] : manifest_.files) {
      const auto have = source_.size(name);
      EPL_CHECK(have.has_value(), "checkpoint shard file ", where_, "/", name, " is missing: the manifest lists it with ", bytes,
                " bytes; copy the whole checkpoint directory", detail::set_aside(where_));
      EPL_CHECK(*have == bytes, "checkpoint shard file ", where_, "/", name, " is ", *have < bytes ? "truncated" : "longer than saved",
                ": it has ", *have, " bytes and the manifest says ", bytes, detail::set_aside(where_));
    }
  }
  [[nodiscard]] const Manifest& manifest() const noexcept { return manifest_; }
  [[nodiscard]] bool has(const std::string& tensor) const { return manifest_.tensors.count(tensor) > 0; }

  /// \brief The whole tensor's bytes, row-major, rebuilt from every piece of it.
  [[nodiscard]] std::vector<unsigned char> whole(const std::string& tensor) const {
    const auto it = manifest_.tensors.find(tensor);
    EPL_CHECK(it != manifest_.tensors.end(), "checkpoint ", where_, " holds no tensor ", tensor);
    const TensorInfo& t = it->second;
    const std::size_t elem = size_of(t.dtype);
    const auto n = static_cast<std::size_t>(t.shape.numel());
    // the pieces must hold at least n elements before n are allocated: a manifest cannot ask for
    // more memory than its files hold
    std::uint64_t held = 0;
    for (const auto& p : manifest_.pieces)
      if (p.tensor == tensor) held += static_cast<std::uint64_t>(p.end - p.begin);
    EPL_CHECK(held >= n, "checkpoint ", where_, " holds ", held, " of the ", n, " elements of tensor ", tensor,
              ": a shard of it is missing from the manifest", detail::set_aside(where_));
    std::vector<unsigned char> out(n * elem), covered(n, 0), bytes;
    for (const auto& p : manifest_.pieces) {
      if (p.tensor != tensor) continue;
      bytes.resize(static_cast<std::size_t>(p.bytes));
      source_.read(p.file, p.offset, bytes.data(), p.bytes);
      EPL_CHECK(!verify_ || crc32c(bytes.data(), bytes.size()) == p.crc, "checkpoint shard file ", where_, "/", p.file, " is corrupt: bytes [",
                p.offset, ", ", p.offset + p.bytes, ") of tensor ", tensor, " fail their checksum", detail::set_aside(where_));
      nn::Parameter part(p.local, {});
      part.shard = p.shard;
      // each element in one piece: a save never writes one twice, so a second is a forged or
      // damaged manifest (the later piece would win silently)
      auto cover = [&](std::uint64_t g) {
        EPL_CHECK(!covered[g], "checkpoint ", where_, " holds element ", g, " of tensor ", tensor,
                  " in two pieces (they overlap): the manifest is not one a save writes", detail::set_aside(where_));
        covered[g] = 1;
      };
      if (part.shard.whole()) {  // a range of the whole tensor: one copy
        for (std::int64_t i = p.begin; i < p.end; ++i) cover(static_cast<std::uint64_t>(i));
        std::memcpy(out.data() + static_cast<std::size_t>(p.begin) * elem, bytes.data(), bytes.size());
        continue;
      }
      for (std::int64_t i = p.begin; i < p.end; ++i) {
        const std::uint64_t g = part.global_index(i);
        cover(g);
        std::memcpy(out.data() + g * elem, bytes.data() + static_cast<std::size_t>(i - p.begin) * elem, elem);
      }
    }
    const auto gap = std::find(covered.begin(), covered.end(), 0);
    EPL_CHECK(gap == covered.end(), "checkpoint ", where_, " lacks element ", gap - covered.begin(), " of tensor ", tensor,
              " (its pieces leave a gap): the manifest is not one a save writes", detail::set_aside(where_));
    return out;
  }

 private:
  // The manifest read first, then the files' source opened (a delegated constructor's arguments
  // have no order): a path that is no checkpoint is named as such, not as a folder that failed to open.
  Reader(std::string manifest_text, const std::filesystem::path& dir) : Reader(manifest_text, dir.string(), directory_source(dir)) {}
  static std::string open_manifest(const std::filesystem::path& dir) {
    std::error_code ec;
    EPL_CHECK(std::filesystem::is_directory(dir, ec), "checkpoint ", dir, " is not a directory; name a step-* directory that a "
              "save wrote (or give checkpoint.dir, whose newest complete checkpoint is resumed)");
    const files::Folder folder(dir, "checkpoint");
    if (folder.kind(kManifest) == files::Kind::kMissing) {
      std::optional<std::filesystem::path> inside;
      try {
        inside = newest(dir);
      } catch (const Error&) {  // a folder of odd entries: the message below still holds
      }
      EPL_CHECK(!inside, "checkpoint ", dir, " is a directory of checkpoints, not one checkpoint; load one of its steps (the newest "
                "is ", *inside, "), or resume from the newest with trainer.resume(", dir, ") or checkpoint.dir");
      EPL_FAIL("checkpoint ", dir, " has no ", kManifest, ": it is not a checkpoint a save wrote (a save renames its directory into "
               "place only when complete)", detail::set_aside(dir));
    }
    return files::read_file(folder, kManifest, "checkpoint manifest");
  }
  std::string where_;
  Source source_;
  Manifest manifest_;
  bool verify_ = true;
};

/// \brief The newest complete checkpoint in dir (the step-* directory of the highest step), or
/// nullopt when it holds none (or does not exist). A .partial directory never counts. A folder
/// that cannot be listed is an error, never "no checkpoint" (a run would start again from step 0
/// and save over the steps it could not see), and so is a step-* entry that is not a directory
/// of its own (a symbolic link, a file).
inline std::optional<std::filesystem::path> newest(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(dir, ec);
  if (st.type() == std::filesystem::file_type::not_found) return std::nullopt;
  EPL_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "cannot inspect checkpoint directory ", dir, ": ", ec.message(),
            "; give checkpoint.dir a directory this process can read");
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;  // check_dir names a file where a directory belongs
  const files::Folder folder(dir, "checkpoint directory");
  std::optional<std::filesystem::path> best;
  std::int64_t best_step = -1;
  for (const auto& name : folder.list()) {
    const auto step = step_of(name);
    if (!step) continue;
    const files::Kind k = folder.kind(name);
    EPL_CHECK(k == files::Kind::kDirectory, "checkpoint directory entry ", dir / name, " is ", files::describe(k),
              " where a save writes a directory of its own; move it aside (to resume from a checkpoint elsewhere, load it with "
              "trainer.load, or copy it here)");
    if (*step > best_step) best_step = *step, best = dir / name;
  }
  return best;
}

/// \brief An exclusive lock on a checkpoint directory for as long as it lives (flock on
/// DIR/.epl-checkpoint.lock, released when the process ends, however it ends): two runs that save
/// into one directory would overwrite each other's steps. The lock file holds the owner's pid. It
/// is opened without following a link and must be a regular file with no other name (a hard
/// link): a link or a FIFO planted there is an error naming it, never a file written through. A
/// regular file there that epl did not write (not this user's, or holding more than a pid) is
/// locked but keeps its bytes.
class DirectoryLock {
 public:
  explicit DirectoryLock(const files::Folder& dir) : path_(dir / kLockName) {
    // made now (ours: it will hold our pid), or there already: an earlier run's lock, whose bytes
    // are rewritten only if they are a pid such a run wrote, and by this user
    fd_ = ::openat(dir.fd(), kLockName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    const bool made = fd_ >= 0;
    if (!made && errno == EEXIST) {  // read-write where allowed: an exclusive lock over NFS needs it
      fd_ = ::openat(dir.fd(), kLockName, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd_ < 0 && errno == EACCES) fd_ = ::openat(dir.fd(), kLockName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    }
    if (fd_ < 0) {
      const int err = errno;
      const files::Kind k = dir.kind(kLockName);
      EPL_CHECK(k == files::Kind::kRegular || k == files::Kind::kMissing, "the lock file ", path_, " of checkpoint directory ",
                dir.path(), " is ", files::describe(k), ": epl's lock is a regular file it creates; remove it (nothing is written through it)");
      EPL_FAIL("cannot create the lock file ", path_, " of checkpoint directory ", dir.path(), ": ", std::strerror(err),
               "; give checkpoint.dir a directory this process can write");
    }
    struct stat st {};
    const bool own = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1;
    if (!own) {
      ::close(fd_);
      fd_ = -1;
      EPL_FAIL("the lock file ", path_, " of checkpoint directory ", dir.path(), " is ",
               S_ISREG(st.st_mode) ? "a file with another name too (a hard link)" : files::describe(files::detail::kind_of(st)),
               ": epl's lock is a regular file of its own; remove it (nothing is written through it)");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      ::close(fd_);
      fd_ = -1;
      const std::string holder(pid, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      EPL_CHECK(holder != std::to_string(::getpid()), "checkpoint directory ", dir.path(), " is in use by another Trainer of this "
                "process, which holds its lock ", path_, "; give each Trainer a checkpoint.dir of its own, or destroy the first "
                "before building the next on the same directory");
      EPL_FAIL("checkpoint directory ", dir.path(), " is in use by another run", n > 0 ? " (process " + holder + ")" : "",
               ", which holds its lock ", path_, "; give each run a directory of its own, or wait for that run to end");
    }
    if (made || holds_a_pid(st)) write_pid(dir);
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  /// \brief The lock file's name in its directory.
  static constexpr const char* kLockName = ".epl-checkpoint.lock";

 private:
  // An earlier run's lock: this user's, and nothing in it but a pid.
  bool holds_a_pid(const struct stat& st) const {
    if (st.st_uid != ::geteuid() || st.st_size > 20) return false;
    char text[24] = {};
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    if (n < 0) return false;
    for (ssize_t i = 0; i < n; ++i)
      if (text[i] < '0' || text[i] > '9') return false;
    return true;
  }
  // The pid into the lock, through a descriptor of its own opened for writing (the lock's may be
  // read-only); the file is still the one locked, checked by its inode.
  void write_pid(const files::Folder& dir) const {
    const int w = ::openat(dir.fd(), kLockName, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (w < 0) return;
    struct stat a {}, b {};
    const std::string mine = std::to_string(::getpid());
    if (::fstat(w, &a) == 0 && ::fstat(fd_, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev &&
        ::pwrite(w, mine.data(), mine.size(), 0) == static_cast<ssize_t>(mine.size()))
      (void)!::ftruncate(w, static_cast<off_t>(mine.size()));
    ::close(w);
  }
  std::filesystem::path path_;
  int fd_ = -1;
};

/// \brief Writes one rank's shard file, a files::NewFile: pieces appended, each with its checksum;
/// `sync` makes it durable. Every failure is an epl::Error naming the file.
class ShardWriter {
 public:
  /// \param file a file this run created (in a save's fresh directory, or a temporary file)
  explicit ShardWriter(files::NewFile& file) : file_(&file) {}
  /// \brief Appends elements [begin, end) of a part of `tensor` (their bytes at data).
  Piece add(std::string tensor, const nn::Shard& shard, const Shape& local, std::int64_t begin, std::int64_t end, const void* data,
            std::uint64_t bytes) {
    Piece p{std::move(tensor), file_->name(), file_->size(), bytes, crc32c(data, bytes), shard, local, begin, end};
    file_->write(data, bytes);
    return p;
  }

 private:
  files::NewFile* file_;
};

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
