// safetensors in: Trainer::load_safetensors sets every parameter from a file named as the model
// names its parameters (an export of any layout, or PyTorch's save_file), strictly; every damaged
// or foreign file is refused naming the file and the problem. (PyTorch itself reads and writes
// them in checkpoint.torch_round_trip.)
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/checkpoint/safetensors.hpp"
#include "epl/comm/threads/run_threads.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace epl;
namespace fs = std::filesystem;

namespace test_runtime_safetensors {

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
using T = Trainer<gpt::Gpt, optim::AdamW, Policies<Zero<3>>>;

struct TempDir {
  fs::path path;
  explicit TempDir(const char* name) : path(fs::temp_directory_path() / ("epl-safetensors-test-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<float> values_of(T& t) {
  std::vector<float> v;
  t.gather_parameters();
  nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
    if (p.materialized())
      for (float x : p.value.span<float>()) v.push_back(x);
  });
  return v;
}

// A safetensors file as PyTorch's save_file writes one: tensors (name, dtype, shape, bytes).
struct Entry {
  std::string name, dtype = "F32";
  std::vector<std::int64_t> shape;
  std::string bytes;
};
void write_file(const fs::path& f, const std::vector<Entry>& entries, std::string header = "") {
  std::string data;
  if (header.empty()) {
    header = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (const auto& e : entries) {
      header += ",\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[";
      for (std::size_t d = 0; d < e.shape.size(); ++d) header += (d ? "," : "") + std::to_string(e.shape[d]);
      header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + e.bytes.size()) + "]}";
      data += e.bytes;
    }
    header += "}";
  }
  std::ofstream out(f, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}
// This model's parameters as entries, each element set to `fill`.
std::vector<Entry> entries_of(T& t, float fill) {
  std::vector<Entry> out;
  nn::visit_parameters(t.model(), [&](std::string_view name, nn::Parameter& p) {
    Entry e{std::string(name), "F32", {}, {}};
    for (int d = 0; d < p.global_shape().rank(); ++d) e.shape.push_back(p.global_shape()[d]);
    std::vector<float> v(static_cast<std::size_t>(p.global_shape().numel()), fill);
    e.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    out.push_back(std::move(e));
  });
  return out;
}
// A layer whose visit(v) names its two parameters as told.
struct Named {
  nn::Parameter a{Shape{4}, nn::Init::zeros()}, b{Shape{4}, nn::Init::zeros()};
  std::string first = "a", second = "b";
  template <class V> void visit(V&& v) {
    v(first, a);
    v(second, b);
  }
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct NamedNet {
  nn::Linear in;
  Named named;
  nn::Linear out;
};
std::string error_of(T& t, const fs::path& f) {
  try {
    t.load_safetensors(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("safetensors: an export loads into a fresh trainer of any layout, equal bit for bit") {
  TempDir dir("export");
  std::vector<float> trained;
  fs::path step;
  {
    T a(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({.lr = 1e-2}), {.seed = 1});
    auto ds = test::token_corpus(2000);
    data::WindowLoader loader(ds, 8, 4, 3);
    for (int s = 0; s < 2; ++s) (void)a.step(loader.next(test::cpu()));
    step = a.save(dir.path / "ckpt");
    trained = values_of(a);
  }
  REQUIRE(checkpoint::export_safetensors(step, dir.path / "m.safetensors") == 30);
  const checkpoint::SafetensorsFile f(dir.path / "m.safetensors");
  CHECK(f.tensors().count("body.1.attn.1.qkv.weight") == 1);
  CHECK(f.metadata().at("format") == "pt");
  T b(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 2});
  CHECK(values_of(b) != trained);
  b.load_safetensors(dir.path / "m.safetensors");
  CHECK(values_of(b) == trained);
  CHECK(b.steps() == 0);  // weights only
  // (values_of gathered b's ZeRO stage 3 parameters for reading before the load: they are not
  // copied back over the loaded ones; the same holds for a checkpoint)
  T c(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
  CHECK(values_of(c) != trained);
  c.load(step);
  CHECK(values_of(c) == trained);
  // 2 ranks under ZeRO stage 3, each holding slices
  std::vector<float> sliced;
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 300 + c.rank());
    Config cfg;
    cfg.set("zero.level", "v2");
    T z(ctx, cfg, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 3});
    z.load_safetensors(dir.path / "m.safetensors");
    auto v = values_of(z);
    if (c.rank() == 0) sliced = v;
  });
  CHECK(sliced == trained);
}

TEST_CASE("safetensors: ranks that read different weights are refused before any loads them, in every layout") {
  // each rank kept its own shards of its own file: a Split or pipeline trained a mix of two models (a stranger's finding)
  TempDir dir("two_files");
  {
    T t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
    auto other = entries_of(t, 0.5f);
    write_file(dir.path / "a.safetensors", other);
    const float quarter = 0.25f;  // one value of one tensor differs: the same names, shapes and size
    std::memcpy(other[7].bytes.data(), &quarter, sizeof quarter);
    write_file(dir.path / "b.safetensors", other);
  }
  for (const char* zero : {"", "v2"}) {
    CAPTURE(zero);
    std::vector<std::string> messages(2);
    std::vector<float> before(2), after(2);
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 400 + c.rank());
      Config cfg;
      cfg.set("zero.level", zero);
      T t(ctx, cfg, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 3});
      before[c.rank()] = values_of(t).front();
      try {
        t.load_safetensors(dir.path / (c.rank() == 0 ? "a.safetensors" : "b.safetensors"));
      } catch (const Error& e) {
        messages[c.rank()] = e.what();
      }
      after[c.rank()] = values_of(t).front();
    });
    for (int r = 0; r < 2; ++r) {
      CHECK_MESSAGE(messages[r].find("load_safetensors: ranks 0 and 1 disagree on the weights they read (this rank's: from ") !=
                        std::string::npos, messages[r]);
      CHECK(messages[r].find(r == 0 ? "a.safetensors)" : "b.safetensors)") != std::string::npos);
      CHECK(messages[r].find("every rank loads the same weights") != std::string::npos);
      CHECK(after[r] == before[r]);  // no rank loaded
    }
  }
  // copies of one file agree
  fs::copy_file(dir.path / "a.safetensors", dir.path / "copy.safetensors");
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 400 + c.rank());
    T t(ctx, Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 3});
    t.load_safetensors(dir.path / (c.rank() == 0 ? "a.safetensors" : "copy.safetensors"));
    CHECK(values_of(t).front() == 0.5f);
  });
}

TEST_CASE("safetensors: a file of another model is refused, naming the tensors") {
  TempDir dir("foreign");
  T t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
  const fs::path f = dir.path / "w.safetensors";
  auto good = entries_of(t, 0.5f);
  write_file(f, good);
  t.load_safetensors(f);  // the helper writes what loads
  CHECK(values_of(t).front() == 0.5f);
  SUBCASE("a parameter missing, another extra") {
    auto e = good;
    e[3].name = "body.0.attn.0.gamma";
    write_file(f, e);
    const auto msg = error_of(t, f);
    CHECK(msg.find("does not hold this model's parameters by name: it lacks body.0.attn.0.bias; it holds body.0.attn.0.gamma, "
                   "which this model lacks") != std::string::npos);
    CHECK(msg.find("name the tensors as the model names its parameters") != std::string::npos);
  }
  SUBCASE("another shape") {
    auto e = good;
    e[0].shape = {16, 32};
    write_file(f, e);
    CHECK(error_of(t, f).find("holds embed.tok.weight as f32 [16, 32] but this model's is f32 [32, 16]") != std::string::npos);
  }
  SUBCASE("another dtype") {
    auto e = good;
    e[2].dtype = "F64";
    e[2].bytes += e[2].bytes;
    write_file(f, e);
    CHECK(error_of(t, f).find("holds body.0.attn.0.weight as f64 and this model's parameters are f32; save them as f32 (in PyTorch: "
                              "model.float() before save_file)") != std::string::npos);
  }
  SUBCASE("a dtype epl does not read") {
    auto e = good;
    e[2].dtype = "F8_E4M3";
    write_file(f, e);
    const auto msg = error_of(t, f);
    CHECK(msg.find("holds tensor body.0.attn.0.weight as F8_E4M3, which epl does not read") != std::string::npos);
    CHECK(msg.find("save the model in its parameters' dtype: F32 for a trainer's") != std::string::npos);
  }
  // nothing was loaded by a refused file
  CHECK(values_of(t).front() == 0.5f);
}

// Each rank reads the file it is given: one rank's bad file fails the load on every rank, and no
// rank has loaded anything (a rank whose file was good once kept its new weights).
TEST_CASE("safetensors: a file refused on one rank leaves every rank's weights as they were") {
  TempDir dir("one_rank");
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 300 + c.rank());
    T t(ctx, Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
    const fs::path f = dir.path / ("w" + std::to_string(c.rank()) + ".safetensors");
    auto e = entries_of(t, 0.5f);
    const float inf = std::numeric_limits<float>::infinity();
    if (c.rank() == 1) std::memcpy(e[2].bytes.data(), &inf, sizeof(float));
    write_file(f, e);
    const auto before = values_of(t);
    const auto msg = error_of(t, f);
    CHECK(msg.find("holds inf at element 0 of body.0.attn.0.weight") != std::string::npos);
    if (c.rank() == 0) CHECK(msg.find("failed on rank 1") != std::string::npos);
    CHECK(values_of(t) == before);
  });
}

TEST_CASE("safetensors: a damaged file is an error naming it, never a crash") {
  TempDir dir("damaged");
  T t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
  const fs::path f = dir.path / "w.safetensors";
  const auto good = entries_of(t, 0.25f);
  write_file(f, good);
  const auto size = fs::file_size(f);
  SUBCASE("no file") { CHECK(error_of(t, dir.path / "none.safetensors").find("does not exist") != std::string::npos); }
  SUBCASE("shorter than the header's length") {
    fs::resize_file(f, 5);
    CHECK(error_of(t, f).find("is truncated: it has 5 bytes") != std::string::npos);
  }
  SUBCASE("cut inside the data") {
    fs::resize_file(f, size - 10);
    CHECK(error_of(t, f).find("is corrupt or truncated: tensor head.lm.bias f32 [32] has data bytes") != std::string::npos);
  }
  SUBCASE("cut inside the header") {
    fs::resize_file(f, 100);
    CHECK(error_of(t, f).find("is corrupt or truncated: its header says") != std::string::npos);
  }
  SUBCASE("a file torch.save wrote is named as one, with the call that writes safetensors (a stranger's finding)") {
    for (const std::string& start : {std::string("PK\x03\x04\x00\x00\x08\x08", 8), std::string("\x80\x02\x8a\x0alZ\xfc\x9c", 8)}) {
      {
        std::ofstream out(f, std::ios::binary | std::ios::trunc);
        out << start << std::string(200, 'x');
      }
      const auto msg = error_of(t, f);
      CHECK(msg.find("is not a safetensors file: it begins as a") != std::string::npos);
      CHECK(msg.find("safetensors.torch.save_file(model.state_dict(), path)") != std::string::npos);
    }
  }
  SUBCASE("a header that is not JSON") {
    for (const char* header : {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "[]", "{\"a\":{\"dtype\":F32}}",
                               "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                               "{} x", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}"}) {
      CAPTURE(header);
      write_file(f, {}, header);
      const auto msg = error_of(t, f);
      CHECK(msg.find("safetensors file") != std::string::npos);
      CHECK((msg.find("is corrupt") != std::string::npos || msg.find("dimensions") != std::string::npos));
    }
  }
  SUBCASE("a shape past what epl holds names the file and the tensor (a stranger's finding)") {
    write_file(f, {}, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}");
    const auto msg = error_of(t, f);
    CHECK(msg.find("gives tensor a a shape epl cannot hold (shape [4294967296, 4294967296] has more than 2^56 elements") !=
          std::string::npos);
    CHECK(msg.find(f.string()) != std::string::npos);
  }
  SUBCASE("a byte range past the data or of the wrong size") {
    write_file(f, {}, "{\"embed.tok.weight\":{\"dtype\":\"F32\",\"shape\":[32,16],\"data_offsets\":[0,2048]}}");
    CHECK(error_of(t, f).find("has data bytes [0, 2048) of the file's 0") != std::string::npos);
    write_file(f, {}, "{\"embed.tok.weight\":{\"dtype\":\"F32\",\"shape\":[32,15],\"data_offsets\":[0,0]}}");
    CHECK(error_of(t, f).find("is corrupt or truncated: tensor embed.tok.weight f32 [32, 15]") != std::string::npos);
  }
  SUBCASE("bytes no tensor holds, or two tensors' bytes in one place") {
    std::ofstream(f, std::ios::app) << "junkjunk";
    CHECK(error_of(t, f).find("is corrupt: its tensors end at byte") != std::string::npos);
    write_file(f, {}, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    std::ofstream(f, std::ios::app) << "abcd";
    CHECK(error_of(t, f).find("where another tensor's bytes end") != std::string::npos);
  }
  SUBCASE("a NaN weight") {
    auto e = good;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(e[5].bytes.data() + 4, &nan, 4);
    write_file(f, e);
    CHECK(error_of(t, f).find("holds nan at element 1 of body.0.attn.1.qkv.bias: a NaN or infinite weight") != std::string::npos);
  }
  SUBCASE("a name with a NUL or another control character, which would print like another name") {
    for (const char* escape : {"\\u0000", "\\u001b", "\\n", "\\u0085", "\\u007f"}) {
      CAPTURE(escape);
      write_file(f, {}, std::string("{\"head.lm.bias") + escape + "x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}");
      std::ofstream(f, std::ios::app) << "abcd";
      CHECK(error_of(t, f).find("names a tensor \"head.lm.bias\" followed by the control character") != std::string::npos);
    }
    for (const char* raw : {"\xc0\xae", "\xed\xa0\x80", "\xe2\x82", "\xff"}) {  // overlong, a surrogate, cut short, never UTF-8
      CAPTURE(raw);
      write_file(f, {}, std::string("{\"head.lm.bias") + raw + "x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}");
      std::ofstream(f, std::ios::app) << "abcd";
      CHECK(error_of(t, f).find("which is not UTF-8") != std::string::npos);
    }
  }
  SUBCASE("names that differ in a non-ASCII escape stay two names") {
    write_file(f, {}, "{\"caf\\u00e9\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                      "\"caf\\u00e8\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}");
    std::ofstream(f, std::ios::app) << "abcdefgh";
    const checkpoint::SafetensorsFile file(f);
    CHECK(file.tensors().count("caf\xc3\xa9") == 1);  // UTF-8 of U+00E9
    CHECK(file.tensors().count("caf\xc3\xa8") == 1);
  }
  SUBCASE("a name twice") {
    write_file(f, {}, "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}");
    std::ofstream(f, std::ios::app) << "abcd";
    CHECK(error_of(t, f).find("names tensor a twice") != std::string::npos);
  }
  CHECK(values_of(t).front() != 0.25f);
}

TEST_CASE("safetensors: export names what it cannot write, and a directory of checkpoints") {
  TempDir dir("export-errors");
  T a(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::AdamW({}), {.seed = 1});
  const auto step = a.save(dir.path / "ckpt");
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(dir.path / "ckpt", dir.path / "m.safetensors"),
                       doctest::Contains("is a directory of checkpoints, not one checkpoint; name one of its steps, the newest is"), Error);
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(step, ""), doctest::Contains("no file to write is named"), Error);
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(step, dir.path / "no" / "m.safetensors"), doctest::Contains("does not exist; create it"),
                       Error);
  // a folder that is no checkpoint at all, with the file to write inside it or elsewhere: said so first
  std::filesystem::create_directories(dir.path / "plain");
  for (const auto& out : {dir.path / "plain" / "m.safetensors", dir.path / "m.safetensors"})
    CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(dir.path / "plain", out), doctest::Contains("is not a checkpoint (it has no manifest.txt)"),
                         Error);
  // a source that is missing or a file, and a "folder" to write in that is a file: each said as it is
  std::ofstream(dir.path / "file.txt") << "x";
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(dir.path / "none", dir.path / "m.safetensors"),
                       doctest::Contains(("the checkpoint \"" + (dir.path / "none").string() + "\" does not exist").c_str()), Error);
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(dir.path / "file.txt", dir.path / "m.safetensors"),
                       doctest::Contains("is a file, not a directory"), Error);
  CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(step, dir.path / "file.txt" / "m.safetensors"),
                       doctest::Contains(("\"" + (dir.path / "file.txt").string() + "\", is not a directory; name a file in an existing folder").c_str()),
                       Error);
}

TEST_CASE("names: a model whose parameters a checkpoint cannot tell apart is refused when the trainer is built") {
  auto build = [](const char* first, const char* second) {
    NamedNet net{nn::Linear(4, 4), Named{}, nn::Linear(4, 3)};
    net.named.first = first;
    net.named.second = second;
    Trainer<NamedNet, optim::SGD> t(test::cpu(), Config{}, std::move(net), optim::SGD({}));
    return t.parameter_names();
  };
  CHECK(build("a", "b") == std::vector<std::string>{"in.weight", "in.bias", "named.a", "named.b", "out.weight", "out.bias"});
  CHECK_THROWS_WITH_AS(build("w", "w"), doctest::Contains("the model names two parameters named.w ([4] and [4]): a layer's visit(v) gives "
                                                          "two members one name"), Error);
  CHECK_THROWS_WITH_AS(build("w", "w@state0"), doctest::Contains("the model names a parameter \"named.w@state0\" [4], which holds "
                                                                 "whitespace or an '@'"), Error);
  CHECK_THROWS_WITH_AS(build("w", "x y"), doctest::Contains("which holds whitespace or an '@'"), Error);
}
}
}  // namespace test_runtime_safetensors
