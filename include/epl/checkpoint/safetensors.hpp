#pragma once
/// \file
/// \brief safetensors, the weights format PyTorch reads and writes (Hugging Face's): an 8-byte
/// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
/// then the data. export_safetensors writes a checkpoint's weights as one; SafetensorsFile reads
/// one (Trainer::load_safetensors starts training from it). Every problem with a file read is an
/// epl::Error naming the file and what is wrong with it, never a crash: the header is parsed
/// strictly and every range checked against the file before anything is allocated or read.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epl/checkpoint/checkpoint.hpp"
#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/core/shape.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

namespace detail {
inline const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "F32";
}
inline std::optional<DType> dtype_of_safetensors(std::string_view s) {
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64})
    if (s == safetensors_dtype(t)) return t;
  return std::nullopt;
}
inline std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

// Where a name stops being printable text, and what is there: a control character (C0, DEL or
// C1) or bytes that are not UTF-8 (overlong, a surrogate, past U+10FFFF, cut short); nullopt when
// it is all printable.
inline std::optional<std::pair<std::size_t, std::string>> unprintable(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int extra = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    char what[48];
    std::snprintf(what, sizeof what, "the byte 0x%02x, which is not UTF-8", b);
    if (extra < 0 || i + static_cast<std::size_t>(extra) >= s.size() + (extra == 0 ? 1 : 0)) return std::pair{i, std::string(what)};
    unsigned v = extra == 0 ? b : b & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((c & 0xC0) != 0x80) return std::pair{i, std::string(what)};
      v = v << 6 | (c & 0x3F);
    }
    const unsigned least[] = {0, 0x80, 0x800, 0x10000};
    if (v < least[extra] || (v >= 0xD800 && v < 0xE000) || v > 0x10FFFF) return std::pair{i, std::string(what)};
    if (v < 0x20 || (v >= 0x7F && v < 0xA0)) {
      std::snprintf(what, sizeof what, "the control character \\u%04x", v);
      return std::pair{i, std::string(what)};
    }
    i += static_cast<std::size_t>(extra) + 1;
  }
  return std::nullopt;
}

// The subset of JSON a safetensors header is: objects, arrays, strings, integers (other values
// are read and skipped). Strict: anything else fails with the byte offset.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string where) : s_(text), where_(std::move(where)) {}

  template <class... A>
  [[noreturn]] void fail(const A&... what) const {
    EPL_FAIL("safetensors file ", where_, " is corrupt: its header ", what..., " at byte ", i_ + 8,
             "; write it again (safetensors.torch.save_file) or check the copy");
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail("lacks '", std::string(1, c), "'");
  }
  [[nodiscard]] bool done() {
    space();
    return i_ == s_.size();
  }
  std::string string() {
    space();
    if (i_ >= s_.size() || s_[i_] != '"') fail("lacks a string");
    std::string out;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      char c = s_[i_];
      if (static_cast<unsigned char>(c) < 0x20) fail("holds a control character in a string");
      if (c == '\\') {
        if (++i_ >= s_.size()) break;
        c = s_[i_];
        if (c == 'u') {  // \uXXXX, a pair of them for a code point past U+FFFF: written as UTF-8
          unsigned v = hex4();
          if (v >= 0xD800 && v < 0xDC00) {  // a high surrogate: its low half follows
            if (i_ + 2 >= s_.size() || s_[i_ + 1] != '\\' || s_[i_ + 2] != 'u') fail("holds half of a \\u surrogate pair");
            i_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("holds half of a \\u surrogate pair");
            v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
          } else if (v >= 0xDC00 && v < 0xE000) {
            fail("holds half of a \\u surrogate pair");
          }
          utf8(out, v);
          continue;
        }
        const char* from = "\"\\/bfnrt";
        const char* to = "\"\\/\b\f\n\r\t";
        const char* at = std::strchr(from, c);
        if (at == nullptr || c == '\0') fail("holds a bad escape");
        c = to[at - from];
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("ends inside a string");
    ++i_;
    return out;
  }
  // The four hex digits after a \u at i_ (which is left on the last of them).
  unsigned hex4() {
    if (i_ + 4 >= s_.size()) fail("ends inside an escape");
    unsigned v = 0;
    for (int k = 1; k <= 4; ++k) {
      const char h = s_[i_ + k];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail("holds a bad \\u escape");
      v = v * 16 + static_cast<unsigned>(d);
    }
    i_ += 4;
    return v;
  }
  static void utf8(std::string& out, unsigned v) {
    if (v < 0x80) {
      out += static_cast<char>(v);
    } else if (v < 0x800) {
      out += static_cast<char>(0xC0 | (v >> 6));
      out += static_cast<char>(0x80 | (v & 0x3F));
    } else if (v < 0x10000) {
      out += static_cast<char>(0xE0 | (v >> 12));
      out += static_cast<char>(0x80 | ((v >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (v & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (v >> 18));
      out += static_cast<char>(0x80 | ((v >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((v >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (v & 0x3F));
    }
  }
  std::uint64_t integer() {
    space();
    const std::size_t from = i_;
    std::uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (v > (std::uint64_t{1} << 50)) fail("holds a number too large");
      v = v * 10 + static_cast<std::uint64_t>(s_[i_++] - '0');
    }
    if (i_ == from) fail("lacks a non-negative integer");
    return v;
  }
  // any value, read and dropped
  void skip(int depth = 0) {
    if (depth > 64) fail("nests too deeply");
    space();
    if (i_ >= s_.size()) fail("ends early");
    const char c = s_[i_];
    if (c == '"') {
      (void)string();
    } else if (c == '{' || c == '[') {
      ++i_;
      const char close = c == '{' ? '}' : ']';
      if (eat(close)) return;
      do {
        if (c == '{') {
          (void)string();
          expect(':');
        }
        skip(depth + 1);
      } while (eat(','));
      expect(close);
    } else {
      const std::size_t from = i_;
      while (i_ < s_.size() && std::strchr("+-.0123456789eEtruefalsn", s_[i_]) != nullptr && s_[i_] != '\0') ++i_;
      if (i_ == from) fail("holds an unexpected '", std::string(1, c), "'");
    }
  }

 private:
  std::string_view s_;
  std::string where_;
  std::size_t i_ = 0;
};
}  // namespace detail

/// \brief A safetensors file's header: its tensors (dtype, shape, byte range in the data) and its
/// metadata; `read` gives one tensor's bytes. Opening checks the whole header against the file.
class SafetensorsFile {
 public:
  struct Tensor {
    DType dtype = DType::kF32;
    Shape shape;
    std::uint64_t begin = 0, end = 0;  ///< byte range in the data (after the header)
  };

  explicit SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
    const std::string where = path_.string();
    std::error_code ec;
    EPL_CHECK(std::filesystem::is_regular_file(path_, ec), "safetensors file ", path_, " does not exist or is not a file");
    const std::uint64_t size = std::filesystem::file_size(path_, ec);
    EPL_CHECK(!ec && size >= 8, "safetensors file ", path_, " is truncated: it has ", size, " bytes, fewer than its 8-byte header length");
    std::ifstream in(path_, std::ios::binary);
    EPL_CHECK(in.good(), "cannot open safetensors file ", path_);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    // a PyTorch file given for a safetensors one read as a 500-TB header "corrupt or truncated"
    const bool zip = len[0] == 'P' && len[1] == 'K' && len[2] == 3 && len[3] == 4, pickle = len[0] == 0x80 && len[1] >= 2 && len[1] <= 5;
    EPL_CHECK(!zip && !pickle, "safetensors file ", path_, " is not a safetensors file: it begins as ",
              zip ? "a zip archive (torch.save's format)" : "a Python pickle (torch.save's legacy format)",
              "; in PyTorch, write the tensors with safetensors.torch.save_file(model.state_dict(), path) (pip install safetensors)");
    EPL_CHECK(n <= size - 8 && n <= (std::uint64_t{1} << 30), "safetensors file ", path_, " is corrupt or truncated: its header says ", n,
              " bytes of header but the file has ", size, " bytes; write it again or check the copy");
    std::string header(static_cast<std::size_t>(n), '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    EPL_CHECK(in.good(), "reading safetensors file ", path_, " failed");
    data_at_ = 8 + n;
    const std::uint64_t data_bytes = size - data_at_;
    detail::HeaderParser p(header, where);
    p.expect('{');
    if (!p.eat('}')) {
      do {
        const std::string name = p.string();
        p.expect(':');
        if (name == "__metadata__") {
          p.expect('{');
          if (!p.eat('}')) {
            do {
              std::string key = p.string();
              p.expect(':');
              metadata_[std::move(key)] = p.string();
            } while (p.eat(','));
            p.expect('}');
          }
          continue;
        }
        // a name with a control character (\u0000, \u0085) or bytes that are not UTF-8 prints like
        // another name: refused
        if (const auto bad = detail::unprintable(name))
          p.fail("names a tensor \"", name.substr(0, bad->first), "\" followed by ", bad->second,
                 ", which no parameter name holds (and which would print like another name)");
        Tensor t;
        bool has_dtype = false, has_shape = false, has_offsets = false;
        p.expect('{');
        do {
          const std::string key = p.string();
          p.expect(':');
          if (key == "dtype") {
            const std::string d = p.string();
            const auto dt = detail::dtype_of_safetensors(d);
            EPL_CHECK(dt.has_value(), "safetensors file ", path_, " holds tensor ", name, " as ", d, ", which epl does not read (it "
                      "reads F32, F64, F16, BF16, I32 and I64); save the model in its parameters' dtype: F32 for a trainer's "
                      "(in PyTorch: model.float() before save_file)");
            t.dtype = *dt;
            has_dtype = true;
          } else if (key == "shape") {
            p.expect('[');
            if (!p.eat(']')) {
              do {
                const auto d = static_cast<std::int64_t>(p.integer());
                EPL_CHECK(t.shape.rank() < Shape::kMaxRank, "safetensors file ", path_, " gives tensor ", name, " more than ",
                          Shape::kMaxRank, " dimensions, which epl does not hold");
                try {
                  t.shape.push_back(d);
                } catch (const Error& e) {  // past what a shape holds: say whose
                  EPL_FAIL("safetensors file ", path_, " gives tensor ", name, " a shape epl cannot hold (", e.detail(),
                           "); the file is corrupt or not a safetensors file");
                }
              } while (p.eat(','));
              p.expect(']');
            }
            has_shape = true;
          } else if (key == "data_offsets") {
            p.expect('[');
            t.begin = p.integer();
            p.expect(',');
            t.end = p.integer();
            p.expect(']');
            has_offsets = true;
          } else {
            p.skip();
          }
        } while (p.eat(','));
        p.expect('}');
        if (!has_dtype || !has_shape || !has_offsets) p.fail("gives tensor ", name, " no ", !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets");
        double elements = 1;
        for (int d = 0; d < t.shape.rank(); ++d) elements *= static_cast<double>(t.shape[d]);
        EPL_CHECK(t.begin <= t.end && t.end <= data_bytes && elements * static_cast<double>(size_of(t.dtype)) ==
                  static_cast<double>(t.end - t.begin), "safetensors file ", path_, " is corrupt or truncated: tensor ", name, " ",
                  name_of(t.dtype), " ", t.shape, " has data bytes [", t.begin, ", ", t.end, ") of the file's ", data_bytes,
                  "; write it again or check the copy");
        EPL_CHECK(tensors_.emplace(name, t).second, "safetensors file ", path_, " names tensor ", name, " twice");
      } while (p.eat(','));
      p.expect('}');
    }
    if (!p.done()) p.fail("goes on after its closing '}'");
    // the tensors' byte ranges tile the data, as the format requires: no gap, no overlap, no tail
    std::vector<std::pair<std::uint64_t, const std::string*>> starts;
    for (const auto& [name, t] : tensors_) starts.push_back({t.begin, &name});
    std::sort(starts.begin(), starts.end());
    std::uint64_t at = 0;
    for (const auto& [begin, name] : starts) {
      const Tensor& t = tensors_.at(*name);
      EPL_CHECK(begin == at || t.begin == t.end, "safetensors file ", path_, " is corrupt: tensor ", *name, "'s bytes start at ", begin,
                " where ", at < begin ? "a gap" : "another tensor's bytes", " ", at < begin ? "begins" : "end", " (", at,
                "); write it again (safetensors.torch.save_file)");
      at = std::max(at, t.end);
    }
    EPL_CHECK(at == data_bytes, "safetensors file ", path_, " is corrupt: its tensors end at byte ", at, " of ", data_bytes,
              " bytes of data (", data_bytes - at, " bytes no tensor holds); write it again or check the copy");
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] const std::map<std::string, Tensor>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// \brief The bytes of tensor `name`, row-major.
  [[nodiscard]] std::vector<unsigned char> read(const std::string& name) const {
    const auto it = tensors_.find(name);
    EPL_CHECK(it != tensors_.end(), "safetensors file ", path_, " holds no tensor ", name);
    std::vector<unsigned char> out(static_cast<std::size_t>(it->second.end - it->second.begin));
    std::ifstream in(path_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(data_at_ + it->second.begin));
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    EPL_CHECK(in.good() || out.empty(), "reading tensor ", name, " of safetensors file ", path_, " failed: the file changed while read");
    return out;
  }

 private:
  std::filesystem::path path_;
  std::uint64_t data_at_ = 0;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl

// export_safetensors, declared in checkpoint/export.hpp (which <epl/epl.hpp> includes) and defined
// in checkpoint/export.ipp over this header, is reached through this one too.
#include "epl/checkpoint/export.hpp"
