// The model tree: every node type has one kind (nn::node_traits) and its children's types, and
// nn::for_each_member is the one step down a model that every walk takes.
#include "../helpers.hpp"

using namespace epl;

namespace test_nn_tree {
using nn::NodeKind;

namespace {
struct Block {
  nn::LayerNorm ln{8};
  nn::Linear fc{8, 8};
};
struct Model {
  nn::Embedding tok{16, 8};
  nn::Repeat<Block> blocks;
  epl::Recompute<nn::Linear, nn::GELU> mid{nn::Linear(8, 8), nn::GELU{}};
  nn::Residual<nn::LayerNorm, nn::Linear> res{nn::LayerNorm(8), nn::Linear(8, 8)};
};
template <class T>
struct is_linear : std::is_same<T, nn::Linear> {};
// a field name of any length is read whole
struct Long {
  int a_field_name_longer_than_sixty_four_characters_with_digits_123_and_underscores_xyz;
  int b;
};
static_assert(reflect::field_name_v<Long, 0> == "a_field_name_longer_than_sixty_four_characters_with_digits_123_and_underscores_xyz");
static_assert(reflect::field_name_v<Long, 1> == "b");
// a UTF-8 identifier is a name too (it once fell back to the index), and a struct of one field
// (read through a structured binding, as nvcc needs) names it like any other
struct Unicode {
  int λ;
  int b;
};
struct OneField {
  Long λ2;
};
static_assert(reflect::field_name_v<Unicode, 0> == "λ");
static_assert(reflect::field_count_v<OneField> == 1 && reflect::field_name_v<OneField, 0> == "λ2");
}  // namespace

// every kind, from the type alone
static_assert(nn::kind_of_v<nn::Linear> == NodeKind::kLeaf);
static_assert(nn::kind_of_v<Block> == NodeKind::kSequence);
static_assert(std::is_same_v<nn::node_traits<Block>::children, nn::type_list<nn::LayerNorm, nn::Linear>>);
static_assert(nn::kind_of_v<nn::Seq<nn::Linear, nn::GELU>> == NodeKind::kSequence);
static_assert(nn::kind_of_v<nn::Repeat<Block>> == NodeKind::kRepeat);
static_assert(nn::kind_of_v<nn::Residual<nn::Linear>> == NodeKind::kResidual);
static_assert(nn::kind_of_v<epl::Recompute<nn::Linear>> == NodeKind::kRecompute);
static_assert(nn::kind_of_v<Replicate<2, nn::Linear>> == NodeKind::kReplicate && nn::node_traits<Replicate<2, nn::Linear>>::degree == 2);
static_assert(nn::kind_of_v<Split<4, nn::Linear>> == NodeKind::kSplit && nn::node_traits<Split<4, nn::Linear>>::degree == 4);
static_assert(nn::kind_of_v<Pipeline<Replicate<1, nn::Linear>>> == NodeKind::kPipeline);
// searches over the type
static_assert(nn::has_recompute_v<Model>);
static_assert(!nn::has_recompute_v<Block>);
static_assert(nn::contains_node_v<Model, is_linear>);
static_assert(!nn::contains_below_v<nn::Linear, is_linear>);  // the node itself is not below itself
// the strategy degrees walk the kinds
static_assert(plan::tensor_degree_v<Model> == 1);
static_assert(plan::tensor_degree_v<Pipeline<Replicate<1, Model>, Split<2, nn::Linear>>> == 2);
static_assert(plan::replicate_degree_v<Replicate<3, Model>> == 3);

TEST_SUITE("cpu") {
TEST_CASE("tree: the members of each node, in visiting order, with their names") {
  Model m;
  m.blocks = nn::Repeat<Block>(2, [](std::int64_t) { return Block{}; });
  std::vector<std::string> names;
  nn::for_each_member(m, [&](std::string_view name, auto&) { names.emplace_back(name); });
  CHECK(names == std::vector<std::string>{"tok", "blocks", "mid", "res"});  // an aggregate's fields by their declared names
  names.clear();
  nn::for_each_member(m.mid, [&](std::string_view name, auto&) { names.emplace_back(name); });
  CHECK(names == std::vector<std::string>{""});  // a wrapper's body: nothing added to the path
  names.clear();
  nn::for_each_member(m.tok, [&](std::string_view name, auto&) { names.emplace_back(name); });
  CHECK(names == std::vector<std::string>{"weight"});
  int children = 0;
  nn::for_each_child(m.tok, [&](auto&) { ++children; });  // a leaf's members are not children
  CHECK(children == 0);
  nn::for_each_child(m.blocks, [&](auto&) { ++children; });
  CHECK(children == 2);
  std::vector<std::string> paths;
  nn::visit_parameters(m, [&](std::string_view path, nn::Parameter&) { paths.emplace_back(path); });
  CHECK(paths == std::vector<std::string>{"tok.weight", "blocks.0.ln.weight", "blocks.0.ln.bias", "blocks.0.fc.weight", "blocks.0.fc.bias",
                                          "blocks.1.ln.weight", "blocks.1.ln.bias", "blocks.1.fc.weight", "blocks.1.fc.bias", "mid.0.weight",
                                          "mid.0.bias", "res.0.weight", "res.0.bias", "res.1.weight", "res.1.bias"});
  // the names checkpoints had before (checkpoint::index_names, which loads them): fields by index,
  // wrappers by kind
  const auto old = checkpoint::index_names(m);
  std::vector<std::string> old_paths;
  nn::for_each_parameter(m, [&](nn::Parameter& p) { old_paths.push_back(old.at(&p)); });
  CHECK(old_paths == std::vector<std::string>{"0.weight", "1.0.0.weight", "1.0.0.bias", "1.0.1.weight", "1.0.1.bias", "1.1.0.weight",
                                              "1.1.0.bias", "1.1.1.weight", "1.1.1.bias", "2.recomputed.0.weight", "2.recomputed.0.bias",
                                              "3.0.weight", "3.0.bias", "3.1.weight", "3.1.bias"});
  // wrapped in strategies, a model keeps its names
  Replicate<2, Split<2, nn::Linear>> wrapped{Split<2, nn::Linear>(nn::Linear(4, 4))};
  paths.clear();
  nn::visit_parameters(wrapped, [&](std::string_view path, nn::Parameter&) { paths.emplace_back(path); });
  CHECK(paths == std::vector<std::string>{"weight", "bias"});
  CHECK(checkpoint::index_names(wrapped).at(&std::get<1>(wrapped.body().body().layers).weight) == "replica.split.1.weight");
}

TEST_CASE("tree: an aggregate of parameters walks as const; a model of layers does not compile so (compile_fail.const_model_walk)") {
  struct Pair {
    nn::Parameter a{Shape{3, 2}, nn::Init::zeros()};
    nn::Parameter b{Shape{5}, nn::Init::ones()};
  };
  const Pair pair;
  std::vector<std::string> paths;
  nn::visit_parameters(pair, [&](std::string_view path, const nn::Parameter&) { paths.emplace_back(path); });
  CHECK(paths == std::vector<std::string>{"a", "b"});
  int n = 0;
  nn::for_each_parameter(pair, [&](const nn::Parameter&) { ++n; });
  CHECK(n == 2);
  CHECK(nn::parameter_count(pair) == 11);
}

TEST_CASE("tree: a leaf's own parameters are those outside its sub-layers") {
  nn::CausalSelfAttention attention(8, 2);
  int own = 0, all = 0;
  nn::for_each_own_parameter(attention, [&](nn::Parameter&) { ++own; });
  nn::for_each_parameter(attention, [&](nn::Parameter&) { ++all; });
  CHECK(own == 0);  // its projections are its Linears'
  CHECK(all == 4);
  nn::Linear fc(8, 8);
  own = 0;
  nn::for_each_own_parameter(fc, [&](nn::Parameter&) { ++own; });
  CHECK(own == 2);
}
}
}  // namespace test_nn_tree
