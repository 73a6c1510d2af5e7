#pragma once
/// \file
/// \brief The bodies of the datasets' readers, the files' slicing and the window loader (the
/// header declares them): included by that header in a header-only program, or compiled once into
/// epl::precompiled (core/linked.hpp).
#include <algorithm>

#include "epl/data/data.hpp"

namespace epl {
inline namespace v0 {
namespace data {

EPL_LINKED TokenDataset TokenDataset::from_text(const std::vector<std::filesystem::path>& files) {
  EPL_CHECK(!files.empty(), "TokenDataset::from_text: no files given");
  TokenDataset ds;
  ds.vocab_ = 256;
  for (const auto& f : files) {
    ds.append_bytes(read(f));
    ds.source_ += (ds.source_.empty() ? "" : ", ") + f.string();
  }
  EPL_CHECK(!ds.tokens_.empty(), "data file", files.size() == 1 ? " " : "s ", ds.source_, files.size() == 1 ? " is" : " are all",
            " empty; name a file of text");
  ds.seal();
  return ds;
}

EPL_LINKED TokenDataset TokenDataset::from_text_bytes(std::span<const char> bytes) {
  EPL_CHECK(!bytes.empty(), "TokenDataset::from_text_bytes: the text is empty; give it the text to train on");  // as from_text's empty file
  TokenDataset ds;
  ds.vocab_ = 256;
  ds.append_bytes(bytes);
  ds.source_ = "text in memory";
  ds.seal();
  return ds;
}

EPL_LINKED TokenDataset TokenDataset::from_binary_bytes(std::span<const char> bytes, const std::filesystem::path& file) {
  EPL_CHECK(bytes.size() % 4 == 0, "token file ", file, " is corrupt: ", bytes.size(), " bytes is not a whole number of int32 ids");
  EPL_CHECK(!bytes.empty(), "token file ", file, " is empty; name a file of int32 token ids");
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

EPL_LINKED TokenDataset TokenDataset::from_tokens(std::vector<std::int32_t> ids, std::int64_t vocab) {
  EPL_CHECK(vocab >= 1, "TokenDataset::from_tokens: a vocabulary of ", vocab, " ids; give its size, 1 or more");
  EPL_CHECK(!ids.empty(), "TokenDataset::from_tokens: no token ids; give the ids to train on");
  for (std::size_t i = 0; i < ids.size(); ++i)
    EPL_CHECK(ids[i] >= 0 && ids[i] < vocab, "TokenDataset::from_tokens: id ", ids[i], " at position ", i,
              " is not in the vocabulary of ", vocab, " ids [0, ", vocab, "); give ids from 0 to ", vocab - 1, " or a larger vocabulary");
  TokenDataset ds;
  ds.tokens_ = std::move(ids);
  ds.vocab_ = vocab;
  ds.source_ = "token ids in memory";
  ds.seal();
  return ds;
}

EPL_LINKED void TokenDataset::seal() {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int32_t id : tokens_) h = (h ^ static_cast<std::uint32_t>(id)) * 1099511628211ull;
  fingerprint_ = (h ^ static_cast<std::uint64_t>(tokens_.size())) * 1099511628211ull;
}

EPL_LINKED std::vector<char> TokenDataset::read(const std::filesystem::path& f) {
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

EPL_LINKED void TokenDataset::append_bytes(std::span<const char> bytes) {
  // through unsigned char: a plain char is signed here, and byte 0xC3 would become id -61
  for (char b : bytes) tokens_.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(b)));
}

EPL_LINKED std::vector<std::filesystem::path> slice_files(const std::vector<std::filesystem::path>& files, Shard shard, const Config& cfg) {
  // every io key is read, so one a program sets for a count that happens to divide is not refused as unread
  const bool slicing = cfg.get<bool>("io.slicing"), drop = cfg.get<bool>("io.drop_last_files"),
             unbalanced = cfg.get<bool>("io.unbalanced_io_slicing");
  if (!slicing) return files;
  EPL_CHECK(!(drop && unbalanced), "io.drop_last_files and io.unbalanced_io_slicing are both set: a file count that does not divide "
            "among the ranks is either dropped from or shared unevenly; set one of them");
  const auto n = static_cast<std::int64_t>(files.size()), ranks = static_cast<std::int64_t>(shard.ranks);
  EPL_CHECK(n >= ranks, "io.slicing: ", n, n == 1 ? " file for " : " files for ", ranks,
            " data-parallel ranks; give at least one file per rank or set io.slicing=false");
  std::int64_t used = n;
  if (n % ranks != 0) {
    if (drop) used = n - n % ranks;
    else EPL_CHECK(unbalanced, "io.slicing: ", n, " files do not divide among ", ranks,
                   " data-parallel ranks; set io.drop_last_files=true to drop the last ", n % ranks,
                   ", or io.unbalanced_io_slicing=true to allow uneven shares");
  }
  // by name: each rank may have listed a directory in its own order (a stranger's ranks read
  // overlapping files, and others never, when one listed them reversed)
  std::vector<std::filesystem::path> sorted;
  for (const auto& f : files) sorted.push_back(f.lexically_normal());
  std::sort(sorted.begin(), sorted.end());
  // a file listed twice would be read by two ranks (or twice by one), each as its own share
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  EPL_CHECK(twice == sorted.end(), "io.slicing: ", *twice, " is listed twice; each rank reads its own files, each file once: "
            "list every file once");
  std::vector<std::filesystem::path> mine;
  for (std::int64_t i = shard.rank; i < used; i += ranks) mine.push_back(sorted[static_cast<std::size_t>(i)]);
  return mine;
}

EPL_LINKED WindowLoader::WindowLoader(const TokenDataset& ds, std::int64_t seq_len, std::int64_t batch, std::uint64_t seed, Shard shard)
    : ds_(&ds), seq_(seq_len), batch_(batch), seed_(seed), shard_(shard) {
  EPL_CHECK(seq_len > 0 && batch > 0, "WindowLoader: seq_len ", seq_len, " and batch ", batch, " must be positive");
  EPL_CHECK(shard.ranks >= 1 && shard.rank >= 0 && shard.rank < shard.ranks, "WindowLoader: rank ", shard.rank, " of ", shard.ranks,
            " ranks is not valid");
  EPL_CHECK(batch % shard.ranks == 0 || !shard.weights.empty(), "global batch of ", batch, " windows does not divide among ",
            shard.ranks, " data-parallel ranks; make the batch a multiple of ", shard.ranks);
  const std::int64_t rows = shard.rows_of(batch);  // uneven shares: one row each at least
  windows_ = (ds.size() - 1) / seq_len;
  const std::int64_t needed = shard.own_data ? rows : batch;  // data of its own: this rank's share of a batch
  EPL_CHECK(windows_ >= needed, "dataset of ", ds.size(), " tokens (", ds.source(), ") holds ", windows_,
            windows_ == 1 ? " window of " : " windows of ", seq_len, " tokens, fewer than ",
            shard.own_data ? "this rank's share of a batch, " : "one batch of ", needed, "; use more data or a smaller batch");
  shuffle();
}

EPL_LINKED void WindowLoader::seek(const Position& p, bool other_data) {
  const bool same_data = p.data == 0 || (p.data == ds_->fingerprint() && p.tokens == ds_->size());
  EPL_CHECK(other_data || same_data, "the saved loader position (a checkpoint's, or the one given to seek) is in ",
            p.source.empty() ? std::string("(unnamed)") : p.source, " (",
            p.tokens, " tokens, checksum ", p.data, "), but this loader reads ", ds_->source(), " (", ds_->size(),
            " tokens, checksum ", ds_->fingerprint(), "): other data would resume at a position that means nothing in it; "
            "resume on the same data, or set checkpoint.resume_other_data=true to go on with other data on purpose");
  EPL_CHECK((p.windows == windows_ || !same_data) && p.seq_len == seq_ && p.batch == batch_ && p.seed == seed_, "a saved loader "
            "position is for ", p.windows, " windows of ", p.seq_len, " tokens in global batches of ", p.batch, " with seed ", p.seed,
            ", but this loader has ", windows_, " windows of ", seq_, " tokens, batches of ", batch_, " and seed ", seed_,
            "; resume with the same context, batch and loader seed", same_data ? " and data" : "");
  EPL_CHECK(p.epoch >= 0 && p.cursor >= 0 && p.cursor <= p.windows, "a saved loader position (epoch ", p.epoch, ", window ", p.cursor,
            ") lies outside its ", p.windows, " windows");
  // other data, on purpose: the saved place means nothing in it, so it starts the next epoch's order
  epoch_ = same_data ? p.epoch : p.epoch + 1;
  cursor_ = same_data ? p.cursor : 0;
  shuffle();
}

EPL_LINKED std::int64_t WindowLoader::next_rows(std::vector<std::int32_t>& in, std::vector<std::int32_t>& out) {
  // of data its own, a rank reads its rows from its own order; else its rows of the global batch
  const std::int64_t rows = shard_.rows_of(batch_), step = shard_.own_data ? rows : batch_;
  if (cursor_ + step > windows_) {
    ++epoch_;
    cursor_ = 0;
    shuffle();
  }
  const std::int64_t first = cursor_ + (shard_.own_data ? 0 : shard_.first_of(batch_));
  in.resize(static_cast<std::size_t>(rows * seq_));
  out.resize(in.size());
  const auto& t = ds_->tokens();
  for (std::int64_t b = 0; b < rows; ++b) {
    auto start = order_[static_cast<std::size_t>(first + b)] * seq_;
    std::copy_n(t.begin() + start, seq_, in.begin() + b * seq_);
    std::copy_n(t.begin() + start + 1, seq_, out.begin() + b * seq_);
  }
  cursor_ += step;
  return rows;
}

EPL_LINKED void WindowLoader::shuffle() {
  order_.resize(static_cast<std::size_t>(windows_));
  for (std::int64_t i = 0; i < windows_; ++i) order_[i] = i;
  auto key = stream_key(seed_, static_cast<std::uint64_t>(epoch_));
  for (std::int64_t i = windows_ - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(uniform01(key, static_cast<std::uint64_t>(i)) * static_cast<double>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

}  // namespace data
}  // namespace v0
}  // namespace epl
