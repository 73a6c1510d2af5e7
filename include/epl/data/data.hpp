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
#include "epl/core/linked.hpp"
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
  EPL_LINKED static TokenDataset from_text(const std::vector<std::filesystem::path>& files);
  /// \brief Byte-level tokens of text already in memory, as from_text reads each file.
  EPL_LINKED static TokenDataset from_text_bytes(std::span<const char> bytes);
  /// \brief The text of a string literal (a char array): its terminating NUL is not a token, as it
  /// is not a byte of the text a file of it would hold.
  template <std::size_t N>
  static TokenDataset from_text_bytes(const char (&text)[N]) {
    return from_text_bytes(std::span<const char>(text, N > 0 && text[N - 1] == '\0' ? N - 1 : N));
  }
  /// \brief int32 token ids; a size that is not a multiple of 4 or a negative id is a corrupt file.
  /// The vocabulary is the largest id + 1.
  static TokenDataset from_binary(const std::filesystem::path& file) { return from_binary_bytes(read(file), file); }
  /// \brief int32 token ids already in memory, as from_binary reads a file; `file` names them in
  /// the errors.
  EPL_LINKED static TokenDataset from_binary_bytes(std::span<const char> bytes, const std::filesystem::path& file);
  /// \brief From ids already in memory, each in [0, vocab).
  EPL_LINKED static TokenDataset from_tokens(std::vector<std::int32_t> ids, std::int64_t vocab);

  [[nodiscard]] std::int64_t size() const noexcept { return static_cast<std::int64_t>(tokens_.size()); }
  [[nodiscard]] std::int64_t vocab_size() const noexcept { return vocab_; }
  [[nodiscard]] const std::vector<std::int32_t>& tokens() const noexcept { return tokens_; }
  /// \brief A checksum of the tokens and their count (64-bit FNV-1a over the ids, computed once):
  /// what a saved loader position checks a resumed run's data against.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  /// \brief Where the tokens came from, for messages: the files' names, or "token ids in memory".
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

 private:
  EPL_LINKED void seal();
  // Reads a whole regular file. Every failure is an epl::Error naming the file: a missing
  // path, a directory, a device, or a read error (no std::ios_base::failure escapes).
  EPL_LINKED static std::vector<char> read(const std::filesystem::path& f);
  EPL_LINKED void append_bytes(std::span<const char> bytes);
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
  /// This rank's dataset is its own (io.slicing gave it its files, trainer.data_shard() says so):
  /// a loader reads its rows of each global batch from its own data's order, not its share of an
  /// order every rank walks.
  bool own_data = false;
  /// \brief This rank's rows of a global batch of `batch`, and the first of them.
  [[nodiscard]] std::int64_t rows_of(std::int64_t batch) const { return strategy::RowShare{rank, ranks, weights, quantum}.rows_of(batch); }
  [[nodiscard]] std::int64_t first_of(std::int64_t batch) const {
    return strategy::RowShare{rank, ranks, weights, quantum}.first_of(batch);
  }
};

/// \brief The files this data-parallel rank reads (EPL's io.slicing). Without io.slicing every
/// rank reads every file (and WindowLoader's Shard divides the samples). With it, rank r of R
/// reads files r, r + R, ... of the files sorted by name (so ranks that list a directory in
/// different orders still read each file once); a count that does not divide is an error unless
/// io.drop_last_files (drop the remainder, every rank the same count) or io.unbalanced_io_slicing
/// (uneven shares) says otherwise, one of them. Build the loader over them with
/// trainer.data_shard(), which says each rank's data is its own.
EPL_LINKED std::vector<std::filesystem::path> slice_files(const std::vector<std::filesystem::path>& files, Shard shard, const Config& cfg);

/// \brief Cuts a dataset into non-overlapping windows of seq_len + 1 tokens (inputs and the
/// targets shifted by one) and serves them in an order shuffled per epoch from the seed, the
/// same order for the same (seed, epoch), in whole global batches: an epoch reads every window
/// once but the windows % batch left at its end (another set each epoch). With a Shard, every
/// rank walks the same global order and serves only its rows of each global batch, so R ranks
/// together read exactly what one device reads; with a Shard of its own data (io.slicing), each
/// rank walks its own data's order, its rows of each global batch at a time.
class WindowLoader {
 public:
  EPL_LINKED WindowLoader(const TokenDataset& ds, std::int64_t seq_len, std::int64_t batch, std::uint64_t seed, Shard shard = {});
  [[nodiscard]] std::int64_t windows() const noexcept { return windows_; }
  [[nodiscard]] std::int64_t epoch() const noexcept { return epoch_; }

  /// \brief Where the loader is, with what a saved position must match to mean the same place:
  /// the same windows (dataset size and seq_len), the same global batch and seed. The position
  /// is the global batch's, the same on every data-parallel rank and for any number of them
  /// (of data its own, each rank's).
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
  EPL_LINKED void seek(const Position& p, bool other_data = false);

  /// \brief This rank's rows of the next global batch on device d: inputs and targets
  /// [its share of batch (batch / ranks when even), seq_len] as int32. An epoch ends when fewer than `batch` windows remain
  /// (those are dropped for that epoch, on every rank alike; of data its own, fewer than its share).
  template <class D>
  Batch next(const D& d) {
    std::vector<std::int32_t> in, out;
    const std::int64_t rows = next_rows(in, out);
    Batch batch{d.empty({rows, seq_}, DType::kI32), d.empty({rows, seq_}, DType::kI32)};
    d.upload(in.data(), batch.inputs);
    d.upload(out.data(), batch.targets);
    return batch;
  }

 private:
  // next's rows in host memory (in, out: rows x seq_len ids), the loader moved on; their count
  EPL_LINKED std::int64_t next_rows(std::vector<std::int32_t>& in, std::vector<std::int32_t>& out);
  EPL_LINKED void shuffle();
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

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/data/data.ipp"
#endif
