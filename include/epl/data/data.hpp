#pragma once
/// \file
/// \brief Token datasets over files, and a deterministic loader of (input, target) windows.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "epl/config/config.hpp"
#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {

/// \brief Inputs and targets of one step; the first dimension is the batch.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

namespace data {

/// \brief A sequence of token ids in memory: bytes of text files (vocabulary 256), or a
/// binary file of little-endian int32 ids.
class TokenDataset {
 public:
  /// \brief Byte-level tokens of the concatenated files: every byte is one id in [0, 256)
  /// (UTF-8 text becomes its bytes, so "é" is the two ids 195 169).
  static TokenDataset from_text(const std::vector<std::filesystem::path>& files) {
    EPL_CHECK(!files.empty(), "TokenDataset::from_text: no files given");
    TokenDataset ds;
    ds.vocab_ = 256;
    for (const auto& f : files) {
      ds.append_bytes(read(f));
      ds.source_ += (ds.source_.empty() ? "" : ", ") + f.string();
    }
    ds.seal();
    return ds;
  }
  /// \brief Byte-level tokens of text already in memory, as from_text reads each file.
  static TokenDataset from_text_bytes(std::span<const char> bytes) {
    TokenDataset ds;
    ds.vocab_ = 256;
    ds.append_bytes(bytes);
    ds.source_ = "text in memory";
    ds.seal();
    return ds;
  }
  /// \brief int32 token ids; a size that is not a multiple of 4 or a negative id is a corrupt file.
  static TokenDataset from_binary(const std::filesystem::path& file) { return from_binary_bytes(read(file), file); }
  /// \brief int32 token ids already in memory, as from_binary reads a file; `file` names them in
  /// the errors.
  static TokenDataset from_binary_bytes(std::span<const char> bytes, const std::filesystem::path& file) {
    EPL_CHECK(bytes.size() % 4 == 0, "token file ", file, " is corrupt: ", bytes.size(),
              " bytes is not a whole number of int32 ids");
    TokenDataset ds;
    ds.tokens_.resize(bytes.size() / 4);
    for (std::size_t i = 0; i < ds.tokens_.size(); ++i) {
      auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
      auto id = static_cast<std::int32_t>(b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t(b[3]) << 24));
      EPL_CHECK(id >= 0, "token file ", file, " is corrupt: negative id ", id, " at position ", i);
      ds.tokens_[i] = id;
      ds.vocab_ = std::max(ds.vocab_, std::int64_t{id} + 1);  // in 64 bits: id 2^31 - 1 is valid, and id + 1 overflowed int32
    }
    ds.source_ = file.string();
    ds.seal();
    return ds;
  }
  /// \brief From ids already in memory.
  static TokenDataset from_tokens(std::vector<std::int32_t> ids, std::int64_t vocab) {
    TokenDataset ds;
    ds.tokens_ = std::move(ids);
    ds.vocab_ = vocab;
    ds.source_ = "token ids in memory";
    ds.seal();
    return ds;
  }

  [[nodiscard]] std::int64_t size() const noexcept { return static_cast<std::int64_t>(tokens_.size()); }
  [[nodiscard]] std::int64_t vocab_size() const noexcept { return vocab_; }
  [[nodiscard]] const std::vector<std::int32_t>& tokens() const noexcept { return tokens_; }
  /// \brief A checksum of the tokens and their count (64-bit FNV-1a over the ids, computed once):
  /// what a saved loader position checks a resumed run's data against.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  /// \brief Where the tokens came from, for messages: the files' names, or "token ids in memory".
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

 private:
  void seal() {
    std::uint64_t h = 1469598103934665603ull;
    for (std::int32_t id : tokens_) h = (h ^ static_cast<std::uint32_t>(id)) * 1099511628211ull;
    fingerprint_ = (h ^ static_cast<std::uint64_t>(tokens_.size())) * 1099511628211ull;
  }
  // Reads a whole regular file. Every failure is an epl::Error naming the file: a missing
  // path, a directory, a device, or a read error (no std::ios_base::failure escapes).
  static std::vector<char> read(const std::filesystem::path& f) {
    std::error_code ec;
    const auto st = std::filesystem::status(f, ec);
    EPL_CHECK(st.type() != std::filesystem::file_type::not_found, "cannot open data file ", f, ": it does not exist; check the path");
    EPL_CHECK(st.type() != std::filesystem::file_type::directory, "data file ", f,
              " is a directory; name the files inside it (for example --data=", (f / "FILE").string(), ")");
    EPL_CHECK(st.type() == std::filesystem::file_type::regular, "data file ", f, " is not a regular file; name a file of text or token ids");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(f.c_str(), "rb"), &std::fclose);
    EPL_CHECK(in != nullptr, "cannot open data file ", f, ": ", std::strerror(errno));
    std::vector<char> bytes;
    char block[1 << 16];
    for (std::size_t n; (n = std::fread(block, 1, sizeof block, in.get())) > 0;) bytes.insert(bytes.end(), block, block + n);
    EPL_CHECK(!std::ferror(in.get()), "reading data file ", f, " failed: ", std::strerror(errno));
    return bytes;
  }
  void append_bytes(std::span<const char> bytes) {
    // through unsigned char: a plain char is signed here, and byte 0xC3 would become id -61
    for (char b : bytes) tokens_.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(b)));
  }
  std::vector<std::int32_t> tokens_;
  std::int64_t vocab_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::string source_;
};

/// \brief Which part of every global batch this rank reads: rank r of `ranks` data-parallel
/// ranks takes rows [r B / ranks, (r + 1) B / ranks) of each global batch of B windows.
struct Shard {
  int rank = 0;
  int ranks = 1;
  /// Uneven devices (cluster.rank_speeds): rank r reads rows in proportion to weights[r]
  /// (strategy::share_rows); empty: equal shares.
  std::vector<double> weights = {};
  std::int64_t quantum = 1;  ///< uneven shares are whole multiples of it (pipeline.num_micro_batch)
  /// \brief This rank's rows of a global batch of `batch`, and the first of them.
  [[nodiscard]] std::int64_t rows_of(std::int64_t batch) const { return strategy::RowShare{rank, ranks, weights, quantum}.rows_of(batch); }
  [[nodiscard]] std::int64_t first_of(std::int64_t batch) const {
    return strategy::RowShare{rank, ranks, weights, quantum}.first_of(batch);
  }
};

/// \brief The files this data-parallel rank reads (EPL's io.slicing). Without io.slicing every
/// rank reads every file (and WindowLoader's Shard divides the samples). With it, rank r of R
/// reads files r, r + R, ...; a count that does not divide is an error unless
/// io.drop_last_files (drop the remainder, every rank the same count) or
/// io.unbalanced_io_slicing (uneven shares) says otherwise.
inline std::vector<std::filesystem::path> slice_files(const std::vector<std::filesystem::path>& files, Shard shard,
                                                      const Config& cfg) {
  if (!cfg.get<bool>("io.slicing")) return files;
  const auto n = static_cast<std::int64_t>(files.size()), ranks = static_cast<std::int64_t>(shard.ranks);
  EPL_CHECK(n >= ranks, "io.slicing: ", n, " files for ", ranks, " data-parallel ranks; give at least one file per rank or set io.slicing=false");
  std::int64_t used = n;
  if (n % ranks != 0) {
    if (cfg.get<bool>("io.drop_last_files")) used = n - n % ranks;
    else EPL_CHECK(cfg.get<bool>("io.unbalanced_io_slicing"), "io.slicing: ", n, " files do not divide among ", ranks,
                   " data-parallel ranks; set io.drop_last_files=true to drop the last ", n % ranks,
                   ", or io.unbalanced_io_slicing=true to allow uneven shares");
  }
  std::vector<std::filesystem::path> mine;
  for (std::int64_t i = shard.rank; i < used; i += ranks) mine.push_back(files[static_cast<std::size_t>(i)]);
  return mine;
}
/// \brief Cuts a dataset into non-overlapping windows of seq_len + 1 tokens (inputs and the
/// targets shifted by one) and serves them in an order shuffled per epoch from the seed:
/// every window exactly once per epoch, the same order for the same (seed, epoch). With a
/// Shard, every rank walks the same global order and serves only its rows of each global
/// batch, so R ranks together read exactly what one device reads.
class WindowLoader {
 public:
  WindowLoader(const TokenDataset& ds, std::int64_t seq_len, std::int64_t batch, std::uint64_t seed, Shard shard = {})
      : ds_(&ds), seq_(seq_len), batch_(batch), seed_(seed), shard_(shard) {
    EPL_CHECK(seq_len > 0 && batch > 0, "WindowLoader: seq_len ", seq_len, " and batch ", batch, " must be positive");
    EPL_CHECK(shard.ranks >= 1 && shard.rank >= 0 && shard.rank < shard.ranks, "WindowLoader: rank ", shard.rank, " of ",
              shard.ranks, " ranks is not valid");
    EPL_CHECK(batch % shard.ranks == 0 || !shard.weights.empty(), "global batch of ", batch, " windows does not divide among ",
              shard.ranks, " data-parallel ranks; make the batch a multiple of ", shard.ranks);
    (void)shard.rows_of(batch);  // uneven shares: one row each at least
    windows_ = (ds.size() - 1) / seq_len;
    EPL_CHECK(windows_ >= batch, "dataset of ", ds.size(), " tokens holds ", windows_, " windows of ", seq_len,
              " tokens, fewer than one batch of ", batch, "; use more data or a smaller batch");
    shuffle();
  }
  [[nodiscard]] std::int64_t windows() const noexcept { return windows_; }
  [[nodiscard]] std::int64_t epoch() const noexcept { return epoch_; }

  /// \brief Where the loader is, with what a saved position must match to mean the same place:
  /// the same windows (dataset size and seq_len), the same global batch and seed. The position
  /// is the global batch's, the same on every data-parallel rank and for any number of them.
  struct Position {
    std::int64_t epoch = 0, cursor = 0;  // the next global batch starts at window `cursor` of `epoch`
    std::int64_t windows = 0, seq_len = 0, batch = 0;
    std::uint64_t seed = 0;
    std::int64_t tokens = 0;   ///< the dataset's size (0: a position saved before epl 0.2 knew it)
    std::uint64_t data = 0;    ///< TokenDataset::fingerprint() (0: not known)
    std::string source;        ///< TokenDataset::source(), for messages
  };
  [[nodiscard]] Position position() const {
    return {epoch_, cursor_, windows_, seq_, batch_, seed_, ds_->size(), ds_->fingerprint(), ds_->source()};
  }
  /// \brief Continues from a saved position (a resumed run), which must describe this loader's
  /// sequence length, batch and seed, and its data: the same tokens (their count and checksum) and
  /// so windows. With `other_data` (checkpoint.resume_other_data) other data is taken on purpose:
  /// the loader then starts the next epoch of its own data (the saved epoch + 1, window 0).
  void seek(const Position& p, bool other_data = false) {
    const bool same_data = p.data == 0 || (p.data == ds_->fingerprint() && p.tokens == ds_->size());
    EPL_CHECK(other_data || same_data, "the checkpoint's data loader read ", p.source.empty() ? std::string("(unnamed)") : p.source, " (",
              p.tokens, " tokens, checksum ", hex(p.data), "), but this loader reads ", ds_->source(), " (", ds_->size(),
              " tokens, checksum ", hex(ds_->fingerprint()), "): other data would resume at a position that means nothing in it; "
              "resume on the same data, or set checkpoint.resume_other_data=true to go on with other data on purpose");
    EPL_CHECK((p.windows == windows_ || !same_data) && p.seq_len == seq_ && p.batch == batch_ && p.seed == seed_, "a saved loader "
              "position is for ", p.windows, " windows of ", p.seq_len, " tokens in global batches of ", p.batch, " with seed ", p.seed,
              ", but this loader has ", windows_, " windows of ", seq_, " tokens, batches of ", batch_, " and seed ", seed_,
              "; resume with the same context, batch and loader seed", same_data ? " and data" : "");
    EPL_CHECK(p.epoch >= 0 && p.cursor >= 0 && p.cursor <= p.windows, "a saved loader position (epoch ", p.epoch, ", window ",
              p.cursor, ") lies outside its ", p.windows, " windows");
    // other data, on purpose: the saved place means nothing in it, so it starts the next epoch's order
    epoch_ = same_data ? p.epoch : p.epoch + 1;
    cursor_ = same_data ? p.cursor : 0;
    shuffle();
  }

  /// \brief This rank's rows of the next global batch on device d: inputs and targets
  /// [its share of batch (batch / ranks when even), seq_len] as int32. An epoch ends when fewer than `batch` windows remain
  /// (those are dropped for that epoch, on every rank alike).
  template <class D>
  Batch next(const D& d) {
    if (cursor_ + batch_ > windows_) {
      ++epoch_;
      cursor_ = 0;
      shuffle();
    }
    const std::int64_t rows = shard_.rows_of(batch_), first = cursor_ + shard_.first_of(batch_);
    std::vector<std::int32_t> in(static_cast<std::size_t>(rows * seq_)), out(in.size());
    const auto& t = ds_->tokens();
    for (std::int64_t b = 0; b < rows; ++b) {
      auto start = order_[static_cast<std::size_t>(first + b)] * seq_;
      std::copy_n(t.begin() + start, seq_, in.begin() + b * seq_);
      std::copy_n(t.begin() + start + 1, seq_, out.begin() + b * seq_);
    }
    cursor_ += batch_;
    Batch batch{d.empty({rows, seq_}, DType::kI32), d.empty({rows, seq_}, DType::kI32)};
    d.upload(in.data(), batch.inputs);
    d.upload(out.data(), batch.targets);
    return batch;
  }

 private:
  static std::string hex(std::uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
  }
  void shuffle() {
    order_.resize(static_cast<std::size_t>(windows_));
    for (std::int64_t i = 0; i < windows_; ++i) order_[i] = i;
    auto key = stream_key(seed_, static_cast<std::uint64_t>(epoch_));
    for (std::int64_t i = windows_ - 1; i > 0; --i) {
      auto j = static_cast<std::int64_t>(uniform01(key, static_cast<std::uint64_t>(i)) * static_cast<double>(i + 1));
      std::swap(order_[i], order_[j]);
    }
  }
  const TokenDataset* ds_;
  std::int64_t seq_, batch_;
  std::uint64_t seed_;
  Shard shard_;
  std::int64_t windows_ = 0, cursor_ = 0, epoch_ = 0;
  std::vector<std::int64_t> order_;
};

}  // namespace data
}  // namespace v0
}  // namespace epl
