#pragma once
/// \file
/// \brief The definitions of checkpoint::BasicSerializer's members (an .ipp: included only at the
/// end of checkpoint/serializer.hpp, unless the program links epl::precompiled, which compiles
/// them once in src/precompiled.cpp). They stand on the checkpoint file format, safetensors and
/// the file layer, which the declaration does not need.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>

#include "epl/checkpoint/safetensors.hpp"
#include "epl/comm/outcome.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

/// \brief Fails unless every parameter has a name of its own that a checkpoint can hold: not
/// empty, no whitespace, no '@' (which marks optimizer state), no two alike (a layer's visit(v)
/// that gives two members one name). A trainer checks its model's when it is built.
inline void check_names(const std::map<const nn::Parameter*, std::string>& names) {
  std::map<std::string_view, const nn::Parameter*> seen;
  for (const auto& [p, name] : names) {
    EPL_CHECK(!name.empty() && detail::is_token(name) && name.find('@') == std::string::npos, "the model names a parameter \"", name,
              "\" ", p->global_shape(), name.empty() ? ": an empty name (a visit(v) that names a Parameter \"\")" : ", which holds "
              "whitespace or an '@'", "; checkpoints and safetensors files name parameters by their paths: give it a name of "
              "letters, digits and '_' in its layer's visit(v)");
    const auto [at, fresh] = seen.emplace(name, p);
    EPL_CHECK(fresh, "the model names two parameters ", name, " (", at->second->global_shape(), " and ", p->global_shape(),
              "): a layer's visit(v) gives two members one name; give each its own, as checkpoints and safetensors files "
              "find parameters by name");
  }
}


template <class Unused>
BasicSerializer<Unused>::BasicSerializer() = default;
template <class Unused>
BasicSerializer<Unused>::BasicSerializer(BasicSerializer&&) noexcept = default;
template <class Unused>
BasicSerializer<Unused>& BasicSerializer<Unused>::operator=(BasicSerializer&&) noexcept = default;
template <class Unused>
BasicSerializer<Unused>::~BasicSerializer() = default;

template <class Unused>
template <class Scalar>
void BasicSerializer<Unused>::restore_loaders(const Manifest& m, const std::string& where, Scalar&& scalar, comm::Communicator& world) {
  saved_positions_.clear();
  const std::int64_t loaders = scalar("loaders");
  EPL_CHECK(loaders <= 1024, "checkpoint ", where, " says it holds ", loaders, " loader positions: the manifest is not one a save writes");
  saved_loaders_ = static_cast<std::size_t>(loaders);
  // a run that sliced its files (each rank its own) resumed without io.slicing, or the other way:
  // each rank reads other files than its saved position's, which seek called other data and
  // offered checkpoint.resume_other_data for (a stranger's finding)
  const auto slicing = [](const TextValues& config) {
    const auto* value = value_of(config, "io.slicing");
    return value ? *value : std::string();
  };
  const std::string saved_slicing = slicing(m.config), run_slicing = slicing(config_);
  EPL_CHECK(loaders == 0 || saved_slicing.empty() || run_slicing.empty() || saved_slicing == run_slicing, "checkpoint ", where,
            " was saved by a run with io.slicing = ", saved_slicing, " and this run has io.slicing = ", run_slicing, ": its ranks would "
            "read other files than their saved positions'; resume with io.slicing = ", saved_slicing);
  const std::string own = "rank" + std::to_string(world.rank()) + ".";
  auto key_of = [&](const std::string& key) {
    if (m.scalar(key)) return key;
    EPL_CHECK(scalar("layout.world") == world.size(), "checkpoint ", where, " holds each of its ", scalar("layout.world"),
              " ranks' own data position (their loaders read different data, as under io.slicing), which only a run on ",
              scalar("layout.world"), " ranks can resume; this one has ", world.size());
    return own + key;
  };
  for (std::int64_t i = 0; i < loaders; ++i) {
    const std::string l = "loader." + std::to_string(i) + ".";
    auto word = [&](const char* entry, bool required) -> std::uint64_t {  // any 64-bit value, where the other entries are counts
      std::uint64_t v = 0;
      const std::string* text = m.scalar(key_of(l + entry));
      if (!text && !required) return 0;  // saved before epl 0.2 fingerprinted the data
      const auto r = text ? std::from_chars(text->data(), text->data() + text->size(), v)
                          : std::from_chars_result{nullptr, std::errc::invalid_argument};
      EPL_CHECK(text && r.ec == std::errc() && r.ptr == text->data() + text->size(), "checkpoint ", where, " lacks loader ", i, "'s ",
                entry, " or holds one that is not a number: the manifest is not one a save writes");
      return v;
    };
    const std::string* source = m.scalar(key_of(l + "source"));
    saved_positions_.push_back({scalar(key_of(l + "epoch")), scalar(key_of(l + "cursor")), scalar(key_of(l + "windows")),
                                scalar(key_of(l + "seq_len")), scalar(key_of(l + "batch")), word("seed", true),
                                static_cast<std::int64_t>(word("tokens", false)), word("data", false), source ? *source : std::string()});
  }
  for (std::size_t i = 0; i < loaders_.size() && i < saved_positions_.size(); ++i) loaders_[i]->seek(saved_positions_[i], other_data_);
}

template <class Unused>
void BasicSerializer<Unused>::configure(const Config& cfg, std::function<void(std::string_view)> phase) {
  dir_ = cfg.get(keys::checkpoint_dir);
  every_ = cfg.get(keys::checkpoint_every);
  keep_ = cfg.get(keys::checkpoint_keep);
  EPL_CHECK(keep_ == 0 || !dir_.empty(), "checkpoint.keep = ", keep_, " but checkpoint.dir is not set; give the directory to "
            "save into (--checkpoint.dir=DIR) or drop checkpoint.keep");
  other_data_ = cfg.get(keys::resume_other_data);
  EPL_CHECK(every_ == 0 || !dir_.empty(), "checkpoint.every = ", every_, " but checkpoint.dir is not set; give the directory to "
            "save into (--checkpoint.dir=DIR) or drop checkpoint.every");
  // every EPL key, then the program's own flags (no '.' in their names): "" given (off) and "" by
  // default (the program's policy) print alike, so the manifest says which (a stranger's finding)
  auto keep = [&](std::string_view name) {
    config_.emplace_back(name, cfg.value_text(name));
    if (const auto from = cfg.source(name); from != Config::Source::kDefault) given_.emplace(name, Config::name_of(from));
  };
  for (const auto& k : Config::keys()) keep(k.name);
  for (const auto name : cfg.flags()) keep(name);
  phase_ = std::move(phase);
}

template <class Unused>
void BasicSerializer<Unused>::open(TrainerState& s) {
  check_names(s.names);
  if (dir_.empty()) return;
  epl::detail::on_every_rank(*s.world, "checkpoint.dir = " + dir_, [&] {
    if (s.world->rank() != 0) return;
    if (every_ > 0) take_dir(dir_);
    else check_dir(dir_);
  });
  // said at the first step, once the loaders' positions are checked too: never of a resume that
  // is then refused
  if (auto from = resume(dir_, s); from && s.world->rank() == 0) announce_ = "resumed from checkpoint " + from->string() + " at step " + std::to_string(*s.step);
}

template <class Unused>
std::filesystem::path BasicSerializer<Unused>::save(const std::filesystem::path& dir, const TrainerState& s) {
  const std::string name = step_name(*s.step);
  const auto final_dir = dir / name;
  const std::string what = "saving checkpoint " + final_dir.string();
  const bool root = s.world->rank() == 0;
  std::string partial;  // rank 0 makes the save's directory under a name no one can guess
  epl::detail::on_every_rank(*s.world, what, [&] {
    if (root) {
      take_dir(dir);
      const files::Folder folder(dir, "checkpoint directory");
      remove_unfinished(folder);
      partial = folder.make_unique_dir(name, "partial");
    }
    phase("prepared");
  });
  partial = epl::detail::all_gather_text(*s.world, partial)[0];
  std::string mine;  // this rank's pieces, as a manifest of its own
  epl::detail::on_every_rank(*s.world, what, [&] {
    const files::Folder into = files::Folder(dir, "checkpoint directory").sub(partial, "checkpoint being saved");
    mine = write_shard(into, s);
    phase("shards written");
  });
  const auto parts = epl::detail::all_gather_text(*s.world, mine);
  epl::detail::on_every_rank(*s.world, what, [&] {
    if (!root) return;
    const files::Folder folder(dir, "checkpoint directory");
    {
      const files::Folder into = folder.sub(partial, "checkpoint being saved");
      files::NewFile manifest(into, kManifest, "checkpoint manifest");
      manifest.write(format(merged_manifest(parts, s)));
      manifest.keep();
    }
    phase("manifest written");
    place(folder, partial, name);
    std::error_code ec;  // checkpoint.keep prunes checkpoint.dir, not a folder a program saves into by hand
    if (keep_ > 0 && !dir_.empty() && std::filesystem::equivalent(dir, dir_, ec)) remove_older(folder, name);
  });
  return final_dir;
}

template <class Unused>
void BasicSerializer<Unused>::place(const files::Folder& folder, const std::string& partial, const std::string& name) {
  const files::Kind k = folder.kind(name);
  if (k == files::Kind::kMissing) {
    folder.rename(partial, name);
    folder.sync();
    return;
  }
  // saved again (a rerun from an older step): only over a step directory a save wrote
  EPL_CHECK(is_saved_step(folder, name), "checkpoint ",
            folder / name, " is ", k == files::Kind::kDirectory ? "a directory that holds no " + std::string(kManifest) : files::describe(k),
            ", which a save did not write and will not replace; move it aside");
  const std::string aside = folder.make_unique_dir(name, "replaced");  // empty: the rename below replaces it
  folder.rename(name, aside);
  folder.rename(partial, name);
  folder.sync();
  folder.remove_tree(aside);
}

template <class Unused>
void BasicSerializer<Unused>::remove_older(const files::Folder& folder, const std::string& saved) {
  // checkpoint.keep: the one just saved, and the newest others up to keep_ in all; only step
  // directories a save completed and holding nothing else a save does not write (a program's
  // notes beside it) are counted and removed
  const auto saves_only = [](const files::Folder& step) {
    for (const auto& e : step.list()) {
      const std::string_view n(e);
      const bool rank_file = n.starts_with("rank-") && n.ends_with(".bin");
      if ((n != kManifest && !rank_file) || step.kind(n) != files::Kind::kRegular) return false;
    }
    return true;
  };
  std::vector<std::pair<std::int64_t, std::string>> others;
  for (const auto& entry : folder.list()) {
    const auto step = step_of(entry);
    if (!step || entry == saved || !is_saved_step(folder, entry)) continue;
    if (saves_only(folder.sub(entry, "checkpoint"))) others.emplace_back(*step, entry);
  }
  std::sort(others.begin(), others.end(), std::greater<>());
  for (std::size_t i = static_cast<std::size_t>(keep_ - 1); i < others.size(); ++i) folder.remove_tree(others[i].second);
  if (others.size() >= static_cast<std::size_t>(keep_)) folder.sync();
}

template <class Unused>
void BasicSerializer<Unused>::remove_unfinished(const files::Folder& folder) {
  // what a save that did not finish left: .step-N[...].partial and .step-N[...].replaced directories
  for (const auto& entry : folder.list()) {
    const std::string_view e(entry);
    if (!e.starts_with(".step-") || !(e.ends_with(".partial") || e.ends_with(".replaced"))) continue;
    if (folder.kind(e) == files::Kind::kDirectory) folder.remove_tree(e);
  }
}

template <class Unused>
std::optional<std::filesystem::path> BasicSerializer<Unused>::resume(const std::filesystem::path& dir, TrainerState& s) {
  std::int64_t step = -1;  // rank 0 chooses, so every rank loads the same one
  epl::detail::on_every_rank(*s.world, "resuming from " + dir.string(), [&] {
    if (s.world->rank() != 0) return;
    check_dir(dir);
    if (auto found = newest(dir)) step = *step_of(found->filename().string());
  });
  s.world->broadcast(comm::Buffer(&step, 1, DType::kI64), 0);
  if (step < 0) return std::nullopt;
  const auto chosen = dir / step_name(step);
  load(chosen, s);
  return chosen;
}

template <class Unused>
void BasicSerializer<Unused>::load(const std::filesystem::path& checkpoint, TrainerState& s) {
  const std::string what = "loading checkpoint " + checkpoint.string();
  std::optional<Reader> reader;
  epl::detail::on_every_rank(*s.world, what, [&] {
    reader.emplace(checkpoint);  // a step directory's name and its manifest's step agree (Reader checks)
    verify(*reader, checkpoint.string(), s);
  });
  // every rank has read what it needs: only now does any of them change its state
  epl::detail::on_every_rank(*s.world, what, [&] { restore(*reader, checkpoint.string(), s); });
  resumed_from_ = checkpoint;
}

template <class Unused>
void BasicSerializer<Unused>::load_safetensors(const std::filesystem::path& file, TrainerState& s,
                                               const std::function<void(std::uint64_t)>& agree) {
  const std::string what = "loading weights from " + file.string();
  std::optional<SafetensorsFile> f;
  std::uint64_t weights = 0;  // each tensor's name and bytes, in any order (s.names is by address)
  epl::detail::on_every_rank(*s.world, what, [&] {
    f.emplace(file);
    const auto& held = f->tensors();
    adopt_index_names(s, [&](const std::string& name) { return held.count(name) > 0; });  // an older checkpoint's export
    std::set<std::string> ours;
    std::string missing, extra;
    int listed = 0;
    auto list = [&](std::string& into, const std::string& name) {
      if (++listed <= 6) into += (into.empty() ? "" : ", ") + name;
    };
    for (const auto& [p, name] : s.names) {
      ours.insert(name);
      const auto t = held.find(name);
      if (t == held.end()) {
        list(missing, name);
        continue;
      }
      EPL_CHECK(t->second.shape == p->global_shape(), "safetensors file ", file, " holds ", name, " as ", name_of(t->second.dtype), " ",
                t->second.shape, " but this model's is ", name_of(s.arena->dtype()), " ", p->global_shape(),
                ": it holds another model's weights; load a file of this model's");
      EPL_CHECK(t->second.dtype == s.arena->dtype(), "safetensors file ", file, " holds ", name, " as ", name_of(t->second.dtype),
                " and this model's parameters are ", name_of(s.arena->dtype()), "; save them as ", name_of(s.arena->dtype()),
                s.arena->dtype() == DType::kF32 ? " (in PyTorch: model.float() before save_file)" : "");
    }
    for (const auto& [name, t] : held)
      if (!ours.count(name)) list(extra, name);
    EPL_CHECK(missing.empty() && extra.empty(), "safetensors file ", file, " does not hold this model's parameters by name",
              missing.empty() ? "" : ": it lacks " + missing, extra.empty() ? "" : (missing.empty() ? ": " : "; ") + std::string("it holds ") +
              extra + ", which this model lacks", listed > 6 ? " (and more)" : "", "; name the tensors as the model names its parameters "
              "(Trainer::parameter_names(), `epl-checkpoint show` of a checkpoint), as PyTorch does its modules' attributes");
    // every value finite before any is loaded: a NaN would otherwise surface steps later
    for (const auto& entry : s.names) {
      const std::string& name = entry.second;  // not a structured binding: clang 14's lambdas cannot capture one
      const auto bytes = f->read(name);
      detail::check_finite(bytes, s.arena->dtype(), "safetensors file " + file.string(), name,
                           "a NaN or infinite weight; train from finite weights");
      const std::uint64_t tensor = (std::uint64_t{crc32c(name.data(), name.size())} << 32) | crc32c(bytes.data(), bytes.size());
      weights ^= tensor * 0x9e3779b97f4a7c15ull;
    }
  });
  // ranks that read different files would each keep their own shards of them (a stranger's finding)
  if (agree) agree(weights);
  // every rank's file holds finite weights of this model: only now does any rank load them
  epl::detail::on_every_rank(*s.world, what, [&] {
    std::vector<unsigned char> host;
    for_each_piece(s, [&](const nn::Parameter& p, std::int64_t b, std::int64_t e, const Region& r, std::int64_t at) {
      upload_piece(s, p, b, e, f->read(s.names.at(&p)), r.values.slice(at, at + e - b), host);
    });
  });
}

template <class Unused>
void BasicSerializer<Unused>::watch(data::WindowLoader& loader) {
  if (std::find(loaders_.begin(), loaders_.end(), &loader) != loaders_.end()) return;
  EPL_CHECK(!resumed_from_ || loaders_.size() < saved_loaders_, "this run resumed from ", resumed_from_->string(), ", which holds "
            "the position of ", saved_loaders_, " data loader", saved_loaders_ == 1 ? "" : "s", ", and now watches loader ",
            loaders_.size() + 1, ", which would start from the beginning; watch the loaders the saving run watched");
  loaders_.push_back(&loader);
  if (loaders_.size() <= saved_positions_.size()) loader.seek(saved_positions_[loaders_.size() - 1], other_data_);
}

template <class Unused>
void BasicSerializer<Unused>::before_step() {
  if (!resumed_from_) return;
  EPL_CHECK(loaders_.size() >= saved_positions_.size(), "this run resumed from ", resumed_from_->string(), ", which holds the "
            "position of ", saved_positions_.size(), " data loader", saved_positions_.size() == 1 ? "" : "s", " but the program "
            "watches ", loaders_.size(), "; call trainer.watch(loader) for each loader before the first step, or the run reads "
            "its data from the start again");
  saved_positions_.clear();
  if (announce_.empty()) return;
  std::printf("%s\n", announce_.c_str());
  std::fflush(stdout);
  announce_.clear();
}

template <class Unused>
void BasicSerializer<Unused>::phase(std::string_view p) const {
  if (phase_) phase_(p);
}

template <class Unused>
void BasicSerializer<Unused>::check_dir(const std::filesystem::path& dir) {
  EPL_CHECK(!dir.empty(), "no checkpoint directory given; name the directory that holds (or will hold) the step-N directories");
  std::error_code ec;
  const auto whole = dir.lexically_normal(), named = whole.has_filename() ? whole : whole.parent_path();  // "ckpt/step-2/" is step-2
  EPL_CHECK(!std::filesystem::exists(dir / kManifest, ec), "checkpoint directory ", dir, " is itself a checkpoint (it holds ",
            kManifest, "); give the directory that holds the step-N directories, ", named.has_parent_path() ? named.parent_path() : ".",
            ", or load this one with trainer.load");
  EPL_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec), "checkpoint directory ", dir,
            " is not a directory; give a directory (checkpoint.dir, or the path given to save), which is created when missing");
}

template <class Unused>
void BasicSerializer<Unused>::take_dir(const std::filesystem::path& dir) {
  check_dir(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  EPL_CHECK(!ec, "cannot create checkpoint directory ", dir, ": ", ec.message(), "; give a writable directory (checkpoint.dir, or the path given to save)");
  // the directory is known by its identity (device, inode), not its path: a path later made to
  // point elsewhere (the folder moved, a link put in its place) is refused, not locked anew
  const files::Folder folder(dir, "checkpoint directory");
  struct stat st {};
  EPL_CHECK(::fstat(folder.fd(), &st) == 0, "cannot inspect checkpoint directory ", dir, ": ", std::strerror(errno));
  const std::pair<std::uint64_t, std::uint64_t> id{st.st_dev, st.st_ino};
  const auto path = dir.lexically_normal();
  if (lock_ && id == locked_id_) return;
  EPL_CHECK(!lock_ || path != locked_path_, "checkpoint directory ", dir, " is no longer the directory this run locked and saved into "
            "(it was moved, or another folder or a link was put in its place); restore it, or give the run a new checkpoint.dir");
  lock_.reset();
  lock_ = std::make_unique<DirectoryLock>(folder);
  locked_path_ = path;
  locked_id_ = id;
}

template <class Unused>
std::string BasicSerializer<Unused>::write_shard(const files::Folder& dir, const TrainerState& s) const {
  Manifest m;
  m.step = *s.step;
  const std::size_t elem = size_of(s.arena->dtype());
  char file[32];
  std::snprintf(file, sizeof file, "rank-%05d.bin", s.world->rank());
  std::optional<files::NewFile> shard;
  std::optional<ShardWriter> out;
  std::vector<unsigned char> host;
  auto add = [&](const std::string& tensor, const nn::Parameter& p, std::int64_t b, std::int64_t e, const Tensor& from) {
    if (!out) out.emplace(shard.emplace(dir, file, "checkpoint shard file"));
    host.resize(static_cast<std::size_t>(e - b) * elem);
    s.download(from, host.data());
    m.tensors[tensor] = {s.arena->dtype(), p.global_shape()};
    m.pieces.push_back(out->add(tensor, p.shard, p.shape, b, e, host.data(), host.size()));
  };
  const auto& state = *s.optimizer_state;
  for_each_piece(s, [&](const nn::Parameter& p, std::int64_t b, std::int64_t e, const Region& r, std::int64_t at) {
    if (!s.writes(p)) return;
    add(s.names.at(&p), p, b, e, r.values.slice(at, at + e - b));
    for (std::size_t k = 0; k < state.size(); ++k)
      add(state_name(s.names.at(&p), k), p, b, e, state[k].slice(r.state_at + at, r.state_at + at + e - b));
    for (const auto& kept : s.policy_state)
      add(kept_name(s.names.at(&p), kept.suffix), p, b, e, kept.buffer.slice(r.state_at + at, r.state_at + at + e - b));
  });
  if (shard) {
    m.files[file] = shard->sync();
    shard->keep();
  }
  m.scalars.emplace_back("loaders", std::to_string(loaders_.size()));
  for (std::size_t i = 0; i < loaders_.size(); ++i) {
    const auto q = loaders_[i]->position();
    const std::string l = "loader." + std::to_string(i) + ".";
    for (const auto& [k, v] : {std::pair{"epoch", q.epoch}, {"cursor", q.cursor}, {"windows", q.windows}, {"seq_len", q.seq_len},
                               {"batch", q.batch}})
      m.scalars.emplace_back(l + k, std::to_string(v));
    m.scalars.emplace_back(l + "seed", std::to_string(q.seed));
    m.scalars.emplace_back(l + "tokens", std::to_string(q.tokens));  // which data: a resume on other data is refused
    m.scalars.emplace_back(l + "data", std::to_string(q.data));
    m.scalars.emplace_back(l + "source", q.source);
  }
  return format(m);
}

template <class Unused>
Manifest BasicSerializer<Unused>::merged_manifest(const std::vector<std::string>& parts, const TrainerState& s) const {
  Manifest m;
  m.step = *s.step;
  std::vector<std::vector<std::pair<std::string, std::string>>> loader_scalars;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    auto part = parse(parts[r], "(the pieces of rank " + std::to_string(r) + ")");
    loader_scalars.push_back(std::move(part.scalars));
    m.tensors.insert(part.tensors.begin(), part.tensors.end());
    m.files.insert(part.files.begin(), part.files.end());
    for (auto& p : part.pieces) m.pieces.push_back(std::move(p));
  }
  auto scalar = [&](std::string name, std::string value) { m.scalars.emplace_back(std::move(name), std::move(value)); };
  scalar("seed", std::to_string(s.seed));
  scalar("optimizer", s.optimizer);
  scalar("optimizer.steps", std::to_string(s.optimizer_steps));
  for (const auto& [path, options] : s.layer_options) scalar(layer_options_name(path), options);
  if (s.schedule && s.schedule->active()) {  // what a resume must apply again: the schedule, and its rate at this step
    char exact[40];
    std::snprintf(exact, sizeof exact, "%.17g", s.optimizer_steps > 0 ? s.schedule->at(s.optimizer_steps) : 0.0);
    scalar("lr.schedule", s.schedule->describe());
    scalar("lr.last", exact);
  }
  if (s.scaler) {
    const auto st = s.scaler->state();
    char exact[40];  // a number as text that reads back to the same double
    std::snprintf(exact, sizeof exact, "%.17g", st.scale);
    scalar("amp.scale", exact);
    scalar("amp.good", std::to_string(st.good));
    scalar("amp.skipped", std::to_string(st.skipped));
    scalar("amp.in_a_row", std::to_string(st.in_a_row));
  }
  // the loaders' positions: once when every rank's are the same (each reads its rows of one
  // global order: any layout resumes them), else each rank's (io.slicing: each reads its own
  // files; only the same ranks resume them)
  const bool same = std::all_of(loader_scalars.begin(), loader_scalars.end(), [&](const auto& q) { return q == loader_scalars[0]; });
  for (std::size_t r = 0; r < (same ? 1 : loader_scalars.size()); ++r)
    for (const auto& [k, v] : loader_scalars[r]) {
      EPL_CHECK(same || k != "loaders" || v == loader_scalars[0][0].second, "rank ", r, " watches ", v, " data loaders and rank 0 ",
                loader_scalars[0][0].second, "; every rank watches the same loaders");
      if (!same && k == "loaders" && r > 0) continue;  // one count for every rank (epl-checkpoint show printed it once a rank)
      scalar(same || k == "loaders" ? k : "rank" + std::to_string(r) + "." + k, v);
    }
  // what wrote it, for a reader's information: loading does not depend on it
  scalar("layout.world", std::to_string(s.world->size()));
  scalar("layout.data", std::to_string(s.data));
  scalar("layout.tensor", std::to_string(s.tensor));
  scalar("layout.pipeline", std::to_string(s.pipeline));
  scalar("layout.zero", std::to_string(s.zero));
  m.config = config_;
  m.given = given_;
  return m;
}

template <class Unused>
void BasicSerializer<Unused>::verify(const Reader& reader, const std::string& where, TrainerState& s) {
  const auto& m = reader.manifest();
  adopt_index_names(s, [&](const std::string& name) { return m.tensors.count(name) > 0; });
  check_same_run(m, where, s);
  const std::string* steps = m.scalar("optimizer.steps");
  const int slots = steps && *steps != "0" ? s.optimizer_slots : 0;
  std::set<std::string> read;
  for_each_piece(s, [&](const nn::Parameter& p, std::int64_t, std::int64_t, const Region&, std::int64_t) {
    const std::string& name = s.names.at(&p);
    for (int k = -1; k < slots; ++k) {
      const std::string tensor = k < 0 ? name : state_name(name, static_cast<std::size_t>(k));
      if (reader.has(tensor) && read.insert(tensor).second)  // restore() names one missing
        detail::check_finite(reader.whole(tensor), m.tensors.at(tensor).dtype, "checkpoint " + where, tensor,
                             "a NaN or infinite value, saved after training diverged or written by hand; resume from an earlier step's "
                             "checkpoint (move this one aside)",
                             k >= 0 && (s.nonnegative_slots >> k & 1u) != 0);
    }
    for (const auto& kept : s.policy_state)
      if (const std::string tensor = kept_name(name, kept.suffix); reader.has(tensor) && read.insert(tensor).second)
        detail::check_finite(reader.whole(tensor), m.tensors.at(tensor).dtype, "checkpoint " + where, tensor,
                             "a NaN or infinite value; resume from an earlier step's checkpoint (move this one aside)");
  });
}

template <class Unused>
void BasicSerializer<Unused>::restore(const Reader& reader, const std::string& where, TrainerState& s) {
  const auto& m = reader.manifest();  // verify() has named s as the checkpoint does and checked it is this run's
  auto scalar = [&](const std::string& name) -> std::int64_t {
    const std::string* v = m.scalar(name);
    EPL_CHECK(v != nullptr, "checkpoint ", where, " lacks its \"", name, "\" entry: the manifest is not one a save writes");
    std::int64_t x = 0;
    const auto r = std::from_chars(v->data(), v->data() + v->size(), x);
    EPL_CHECK(r.ec == std::errc() && r.ptr == v->data() + v->size() && x >= 0, "checkpoint ", where, ": \"", name, "\" = \"", *v,
              "\" is not a count");
    return x;
  };
  // the loaders first: a position that does not fit its loader is refused before any value changes
  restore_loaders(m, where, scalar, *s.world);
  // the values, and the optimizer state (none before the first update)
  const std::int64_t optimizer_steps = scalar("optimizer.steps");
  std::int64_t held = 0;
  for (const auto& r : s.regions) held += r.range.size();
  const auto& state = s.restore_optimizer(optimizer_steps, held, s.arena->dtype());
  std::vector<unsigned char> host;
  std::vector<bool> absent(s.policy_state.size(), false);
  auto fill = [&](const std::string& tensor, const nn::Parameter& p, std::int64_t b, std::int64_t e, const Tensor& to) {
    EPL_CHECK(reader.has(tensor), "checkpoint ", where, " holds no ", tensor, " although the optimizer had taken ", optimizer_steps,
              " steps: the manifest is not one a save writes");
    upload_piece(s, p, b, e, reader.whole(tensor), to, host);
  };
  for_each_piece(s, [&](const nn::Parameter& p, std::int64_t b, std::int64_t e, const Region& r, std::int64_t at) {
    fill(s.names.at(&p), p, b, e, r.values.slice(at, at + e - b));
    for (std::size_t k = 0; k < state.size(); ++k)
      fill(state_name(s.names.at(&p), k), p, b, e, state[k].slice(r.state_at + at, r.state_at + at + e - b));
    for (std::size_t k = 0; k < s.policy_state.size(); ++k) {
      const auto& kept = s.policy_state[k];
      const std::string tensor = kept_name(s.names.at(&p), kept.suffix);
      if (reader.has(tensor)) upload_piece(s, p, b, e, reader.whole(tensor), kept.buffer.slice(r.state_at + at, r.state_at + at + e - b), host);
      else absent[k] = true;
    }
  });
  // a policy's state the checkpoint lacks (saved without it) starts afresh, from the loaded values
  for (std::size_t k = 0; k < s.policy_state.size(); ++k)
    if (absent[k] && s.policy_state[k].absent) s.policy_state[k].absent();
  // the scalars
  *s.step = m.step;
  if (s.scaler && m.scalar("amp.scale")) {
    policy::LossScaler::State st;
    st.scale = std::strtod(m.scalar("amp.scale")->c_str(), nullptr);
    st.good = scalar("amp.good");
    st.skipped = scalar("amp.skipped");
    st.in_a_row = scalar("amp.in_a_row");
    s.scaler->restore(st);
  }
}

template <class Unused>
void BasicSerializer<Unused>::check_same_run(const Manifest& m, const std::string& where, const TrainerState& s) {
  std::set<std::string> ours;
  for (const auto& [p, name] : s.names) {
    ours.insert(name);
    const auto t = m.tensors.find(name);
    EPL_CHECK(t != m.tensors.end(), "checkpoint ", where, " holds no parameter ", name, " ", p->global_shape(),
              " of this model: it was saved from another model; resume with the model that saved it");
    EPL_CHECK(t->second.shape == p->global_shape() && t->second.dtype == s.arena->dtype(), "checkpoint ", where, " holds parameter ",
              name, " as ", name_of(t->second.dtype), " ", t->second.shape, " but this model's is ", name_of(s.arena->dtype()), " ",
              p->global_shape(), ": it was saved from another model; resume with the model that saved it");
  }
  for (const auto& [name, t] : m.tensors)
    EPL_CHECK(name.find('@') != std::string::npos || ours.count(name), "checkpoint ", where, " holds parameter ", name, " ",
              t.shape, ", which this model lacks: it was saved from another model; resume with the model that saved it");
  // what no shape shows: a head count, an eps (checkpoints before these lines have none to compare)
  for (const auto& [path, options] : s.layer_options) {
    const std::string* saved = m.scalar(layer_options_name(path));
    EPL_CHECK(!saved || *saved == options, "checkpoint ", where, " was saved from a model whose layer ", path.empty() ? "(the model)" : path,
              " has options ", *saved, ", and this model's has ", options, ": it was saved from another model; resume with the "
              "model that saved it, or start a new run (another checkpoint.dir)");
  }
  const std::string* optimizer = m.scalar("optimizer");
  EPL_CHECK(optimizer && *optimizer == s.optimizer, "checkpoint ", where, " was saved with optimizer ",
            optimizer ? *optimizer : std::string("(none named)"), " but this trainer's is ", s.optimizer,
            "; resume with the optimizer that saved it");
  // the learning-rate schedule: the same rule, and (a program's own function) the same rate at the saved step
  const std::string* schedule = m.scalar("lr.schedule");
  const std::string rule = s.schedule && s.schedule->active() ? s.schedule->describe() : "constant";
  EPL_CHECK((schedule ? *schedule : std::string("constant")) == rule, "checkpoint ", where, " was saved with the learning-rate "
            "schedule \"", schedule ? *schedule : std::string("constant"), "\" and this trainer's is \"", rule, "\"; resume with the "
            "same lr.* keys and optimizer lr, or the rates would jump");
  const std::string* last = m.scalar("lr.last");
  const std::string* steps = m.scalar("optimizer.steps");
  if (last && steps && s.schedule && s.schedule->custom) {
    std::int64_t n = 0;
    std::from_chars(steps->data(), steps->data() + steps->size(), n);
    char exact[40];
    std::snprintf(exact, sizeof exact, "%.17g", n > 0 ? s.schedule->at(n) : 0.0);
    EPL_CHECK(*last == exact, "checkpoint ", where, " was saved at optimizer step ", n, " with learning rate ", *last,
              ", and this trainer's TrainerOptions::lr_schedule gives ", exact, " for that step; resume with the same rule");
  }
  const std::string* seed = m.scalar("seed");
  EPL_CHECK(seed && *seed == std::to_string(s.seed), "checkpoint ", where, " was saved with TrainerOptions::seed = ",
            seed ? *seed : std::string("(none)"), " and this trainer has ", s.seed, ": dropout would draw other numbers than the "
            "saved run's; resume with the same seed");
}


}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
