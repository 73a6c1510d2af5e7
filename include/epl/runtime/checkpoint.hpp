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
/// A save writes DIR/.step-00000010.partial and renames it when the manifest is written, so a
/// directory named step-* is always complete; a crash mid-save leaves only the .partial, which
/// the next save of that step replaces. A piece is a range [begin, end) of the elements of one
/// rank's part of a tensor (nn::Shard: a Split's slice; the range: a ZeRO shard's slice of it),
/// so any layout reads back into any other: the reader rebuilds the whole tensor from the
/// pieces and each rank keeps its part. The Trainer writes and reads these (Trainer::save,
/// Trainer::resume); this file knows nothing of models or ranks.
#include <boost/crc.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/core/shape.hpp"
#include "epl/nn/parameter.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

inline constexpr int kVersion = 1;
inline constexpr const char* kManifest = "manifest.txt";
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

/// \brief What a checkpoint holds: named scalars (the step, the optimizer's step count, the loss
/// scale, the loaders' positions, ...), the configuration as text, the tensors, their pieces and
/// the files that hold them.
struct Manifest {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, std::string>> scalars;  // name (no whitespace), value (escaped on disk)
  std::vector<std::pair<std::string, std::string>> config;   // key, value (escaped on disk)
  std::map<std::string, TensorInfo> tensors;
  std::vector<Piece> pieces;
  std::map<std::string, std::uint64_t> files;                // name, bytes

  /// The scalar `name`, or null.
  [[nodiscard]] const std::string* scalar(std::string_view name) const {
    for (const auto& [k, v] : scalars)
      if (k == name) return &v;
    return nullptr;
  }
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

namespace detail {
// What a user does about a checkpoint that cannot be read.
inline std::string set_aside(const std::filesystem::path& checkpoint) {
  return "; move " + checkpoint.string() + " aside (a resume then takes the newest checkpoint left) or load an earlier one";
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
  for (const auto& [k, v] : m.config) out += "config " + detail::escape(k) + " " + detail::escape(v) + "\n";
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
  EPL_CHECK(end_line.starts_with("end "), "checkpoint manifest ", where, " is truncated: its last line is not the \"end\" line "
            "with the checksum (a damaged file)", detail::set_aside(checkpoint));
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
      if (v != kVersion) l.fail("says version ", v, "; this epl reads version ", kVersion);
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
      l.expect_words(3);
      auto k = detail::unescape(l.word(1)), v = detail::unescape(l.word(2));
      if (!k || !v) l.fail("has a configuration entry that is not escaped text");
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

namespace detail {
inline std::string read_text_file(const std::filesystem::path& f) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(f.c_str(), "rb"), &std::fclose);
  EPL_CHECK(in != nullptr, "cannot open ", f, ": ", std::strerror(errno));
  std::string text;
  char block[1 << 16];
  for (std::size_t n; (n = std::fread(block, 1, sizeof block, in.get())) > 0;) text.append(block, n);
  EPL_CHECK(!std::ferror(in.get()), "reading ", f, " failed: ", std::strerror(errno));
  return text;
}
}  // namespace detail

/// \brief The files of a checkpoint directory.
inline Source directory_source(const std::filesystem::path& dir) {
  auto files = std::make_shared<std::map<std::string, std::shared_ptr<std::FILE>>>();
  Source s;
  s.size = [dir](const std::string& file) -> std::optional<std::uint64_t> {
    std::error_code ec;
    const auto st = std::filesystem::status(dir / file, ec);
    if (st.type() != std::filesystem::file_type::regular) return std::nullopt;
    return std::filesystem::file_size(dir / file, ec);
  };
  s.read = [dir, files](const std::string& file, std::uint64_t offset, void* out, std::uint64_t bytes) {
    auto& f = (*files)[file];
    if (!f) {
      f.reset(std::fopen((dir / file).c_str(), "rb"), [](std::FILE* p) { if (p) std::fclose(p); });
      EPL_CHECK(f != nullptr, "cannot open checkpoint shard file ", dir / file, ": ", std::strerror(errno));
    }
    EPL_CHECK(std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) == 0 && std::fread(out, 1, bytes, f.get()) == bytes,
              "reading ", bytes, " bytes at offset ", offset, " of checkpoint shard file ", dir / file, " failed",
              errno ? std::string(": ") + std::strerror(errno) : std::string(" (it is shorter than that)"));
  };
  return s;
}

/// \brief Reads a checkpoint: its manifest, checked against the files it lists (each present and
/// of the size it says), and whole tensors rebuilt from their pieces (each piece's checksum
/// checked, every element covered).
class Reader {
 public:
  /// \brief The checkpoint in directory dir (a step-* directory).
  explicit Reader(const std::filesystem::path& dir) : Reader(open_manifest(dir), dir.string(), directory_source(dir)) {}
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
      if (part.shard.whole()) {  // a range of the whole tensor: one copy
        std::memcpy(out.data() + static_cast<std::size_t>(p.begin) * elem, bytes.data(), bytes.size());
        std::fill(covered.begin() + p.begin, covered.begin() + p.end, 1);
        continue;
      }
      for (std::int64_t i = p.begin; i < p.end; ++i) {
        const std::uint64_t g = part.global_index(i);
        std::memcpy(out.data() + g * elem, bytes.data() + static_cast<std::size_t>(i - p.begin) * elem, elem);
        covered[g] = 1;
      }
    }
    const auto gap = std::find(covered.begin(), covered.end(), 0);
    EPL_CHECK(gap == covered.end(), "checkpoint ", where_, " lacks element ", gap - covered.begin(), " of tensor ", tensor,
              " (its pieces overlap and leave a gap): the manifest is not one a save writes", detail::set_aside(where_));
    return out;
  }

 private:
  static std::string open_manifest(const std::filesystem::path& dir) {
    std::error_code ec;
    EPL_CHECK(std::filesystem::is_directory(dir, ec), "checkpoint ", dir, " is not a directory; name a step-* directory that a "
              "save wrote (or give checkpoint.dir, whose newest complete checkpoint is resumed)");
    EPL_CHECK(std::filesystem::is_regular_file(dir / kManifest, ec), "checkpoint ", dir, " has no ", kManifest,
              ": it is not a checkpoint a save wrote (a save renames its directory into place only when complete)",
              detail::set_aside(dir));
    return detail::read_text_file(dir / kManifest);
  }
  std::string where_;
  Source source_;
  Manifest manifest_;
  bool verify_ = true;
};

/// \brief The newest complete checkpoint in dir (the step-* directory of the highest step), or
/// nullopt when it holds none (or does not exist). A .partial directory never counts.
inline std::optional<std::filesystem::path> newest(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  std::optional<std::filesystem::path> best;
  std::int64_t best_step = -1;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto step = step_of(name);
    if (!step || !e.is_directory(ec)) continue;
    if (*step > best_step) best_step = *step, best = e.path();
  }
  return best;
}

/// \brief An exclusive lock on a checkpoint directory for as long as it lives (flock on
/// DIR/.epl-checkpoint.lock, released when the process ends, however it ends): two runs that save
/// into one directory would overwrite each other's steps. The lock file holds the owner's pid.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::filesystem::path& dir) : path_(dir / ".epl-checkpoint.lock") {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EPL_CHECK(fd_ >= 0, "cannot create the lock file ", path_, " of checkpoint directory ", dir, ": ", std::strerror(errno),
              "; give checkpoint.dir a directory this process can write");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      ::close(fd_);
      fd_ = -1;
      EPL_FAIL("checkpoint directory ", dir, " is in use by another run", n > 0 ? " (process " + std::string(pid, static_cast<std::size_t>(n)) + ")" : "",
               ", which holds its lock ", path_, "; give each run a directory of its own, or wait for that run to end");
    }
    const std::string mine = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, mine.data(), mine.size(), 0);
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

/// \brief Writes one rank's shard file: pieces appended, each with its checksum; `sync` makes it
/// durable. Every failure is an epl::Error naming the file.
class ShardWriter {
 public:
  /// \param what names the file in errors ("checkpoint shard file", "safetensors file")
  ShardWriter(std::filesystem::path path, std::string name, std::string what = "checkpoint shard file")
      : path_(std::move(path)), name_(std::move(name)), what_(std::move(what)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EPL_CHECK(fd_ >= 0, "cannot create ", what_, " ", path_, ": ", std::strerror(errno));
  }
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// \brief Appends elements [begin, end) of a part of `tensor` (their bytes at data).
  Piece add(std::string tensor, const nn::Shard& shard, const Shape& local, std::int64_t begin, std::int64_t end, const void* data,
            std::uint64_t bytes) {
    Piece p{std::move(tensor), name_, offset_, bytes, crc32c(data, bytes), shard, local, begin, end};
    const auto* b = static_cast<const char*>(data);
    for (std::uint64_t done = 0; done < bytes;) {
      const ssize_t w = ::write(fd_, b + done, bytes - done);
      EPL_CHECK(w > 0 || errno == EINTR, "writing ", what_, " ", path_, " failed: ", std::strerror(errno));
      if (w > 0) done += static_cast<std::uint64_t>(w);
    }
    offset_ += bytes;
    return p;
  }
  /// \brief Flushes the file to the disk and closes it; returns its size.
  std::uint64_t sync() {
    EPL_CHECK(::fsync(fd_) == 0, "flushing ", what_, " ", path_, " failed: ", std::strerror(errno));
    EPL_CHECK(::close(fd_) == 0, "closing ", what_, " ", path_, " failed: ", std::strerror(errno));
    fd_ = -1;
    return offset_;
  }

 private:
  std::filesystem::path path_;
  std::string name_, what_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
};

/// \brief Writes text to path durably (written, flushed to the disk, closed).
inline void write_durably(const std::filesystem::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EPL_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  bool ok = true;
  for (std::size_t done = 0; ok && done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w > 0) done += static_cast<std::size_t>(w);
    else ok = errno == EINTR;
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  EPL_CHECK(ok, "writing ", path, " failed: ", std::strerror(err));
}

/// \brief Makes a directory's entries (a rename into it) durable.
inline void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // not every filesystem opens directories; the rename itself is atomic
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
