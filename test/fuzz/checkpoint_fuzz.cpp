// libFuzzer target: the checkpoint manifest and shard readers (epl/checkpoint/checkpoint.hpp) over
// untrusted bytes. The input is a mode byte, a manifest's text, a NUL, and the bytes every shard
// file the manifest lists holds. Mode bit 0 skips the checksums, the manifest's and the pieces' (so
// the fuzzer reaches the line parser and the rebuilding without forging CRCs); every tensor is
// then rebuilt from its pieces. Bad input
// must end in an epl::Error; a crash, sanitizer report, leak, hang or out-of-memory is a finding,
// and so is a manifest that parses but does not format and parse back to the same.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "epl/checkpoint/checkpoint.hpp"

namespace {
void must(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "checkpoint fuzz: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size == 0) return 0;
  const bool verify = (bytes[0] & 1) == 0;
  const std::string_view rest(reinterpret_cast<const char*>(bytes + 1), size - 1);
  const std::size_t nul = rest.find('\0');
  const std::string manifest(rest.substr(0, nul));
  const std::string_view shard = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  epl::checkpoint::Source src;
  src.size = [&](const std::string&) -> std::optional<std::uint64_t> { return shard.size(); };
  src.read = [&](const std::string& file, std::uint64_t offset, void* out, std::uint64_t n) {
    EPL_CHECK(offset <= shard.size() && n <= shard.size() - offset, "reading past the end of ", file);
    std::memcpy(out, shard.data() + offset, n);
  };
  try {
    const epl::checkpoint::Reader r(manifest, "fuzz", src, verify);
    // what parsed formats and parses back to the same manifest
    const auto again = epl::checkpoint::parse(epl::checkpoint::format(r.manifest()), "fuzz (formatted)");
    must(again.step == r.manifest().step && again.scalars == r.manifest().scalars && again.config == r.manifest().config &&
             again.pieces.size() == r.manifest().pieces.size() && again.tensors.size() == r.manifest().tensors.size() &&
             again.files == r.manifest().files,
         "a parsed manifest formats into another");
    for (const auto& [name, t] : r.manifest().tensors) {
      const auto whole = r.whole(name);
      must(whole.size() == static_cast<std::size_t>(t.shape.numel()) * epl::size_of(t.dtype), "a rebuilt tensor has the wrong size");
    }
  } catch (const std::exception&) {
  }
  return 0;
}
