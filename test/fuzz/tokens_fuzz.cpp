// libFuzzer target: the token readers and the window loader over untrusted bytes. The first 8
// bytes choose the loader's shape, the rest is a token file read both as int32 ids and as text:
//   [0] flags (bit 0: the loader reads the binary ids, else the text)   [1..2] seq_len, int16 LE
//   [3] batch, int8   [4] ranks, int8   [5] rank, int8   [6] seed   [7] next() calls, 0..7
// Bad input must end in an exception; a crash, sanitizer report, leak or hang is a finding, and
// so is a dataset or batch that breaks what the readers promise (ids in [0, vocab), targets the
// inputs shifted by one).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <span>

#include "epl/data/data.hpp"
#include "epl/device/cpu/cpu.hpp"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "broken promise: %s\n", what);
    std::abort();
  }
}

void check_ids(const epl::data::TokenDataset& ds) {
  for (auto id : ds.tokens()) require(id >= 0 && id < ds.vocab_size(), "a token id outside [0, vocab)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size < 8) return -1;  // not in the corpus: too short to say what to do
  const auto flags = bytes[0];
  const auto seq_len = static_cast<std::int16_t>(bytes[1] | (bytes[2] << 8));
  const auto batch = static_cast<std::int8_t>(bytes[3]);
  const epl::data::Shard shard{static_cast<std::int8_t>(bytes[5]), static_cast<std::int8_t>(bytes[4])};
  const std::uint64_t seed = bytes[6];
  const int calls = bytes[7] & 7;
  const std::span<const char> payload(reinterpret_cast<const char*>(bytes) + 8, size - 8);

  std::optional<epl::data::TokenDataset> binary, text;
  try {
    binary = epl::data::TokenDataset::from_binary_bytes(payload, "fuzz.bin");
    require(binary->size() * 4 == static_cast<std::int64_t>(payload.size()), "binary: not one id per 4 bytes");
    check_ids(*binary);
  } catch (const std::exception&) {
  }
  if (payload.empty()) {  // no text is an error, as an empty file is (and the one way text is refused)
    try {
      (void)epl::data::TokenDataset::from_text_bytes(payload);
      require(false, "text: no bytes made a dataset");
    } catch (const epl::Error&) {
    }
    return 0;
  }
  text = epl::data::TokenDataset::from_text_bytes(payload);  // every other byte string is text
  require(text->size() == static_cast<std::int64_t>(payload.size()) && text->vocab_size() == 256, "text: not one id per byte");
  check_ids(*text);

  const auto& ds = (flags & 1) && binary ? *binary : *text;
  try {
    static const epl::device::Cpu cpu;
    epl::data::WindowLoader loader(ds, seq_len, batch, seed, shard);
    require(loader.windows() >= batch && loader.windows() * seq_len < ds.size(), "windows do not fit the dataset");
    const std::int64_t rows = batch / shard.ranks;
    for (int i = 0; i < calls; ++i) {
      auto b = loader.next(cpu);
      require(b.inputs.shape() == epl::Shape{rows, seq_len} && b.targets.shape() == b.inputs.shape(), "batch shape");
      auto in = b.inputs.span<std::int32_t>(), out = b.targets.span<std::int32_t>();
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < seq_len; ++j) {
          const auto at = static_cast<std::size_t>(r * seq_len + j);
          require(in[at] >= 0 && in[at] < ds.vocab_size() && out[at] >= 0 && out[at] < ds.vocab_size(), "batch id outside the vocab");
          if (j + 1 < seq_len) require(out[at] == in[at + 1], "targets are not the inputs shifted by one");
        }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
