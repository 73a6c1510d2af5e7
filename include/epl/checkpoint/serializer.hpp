#pragma once
/// \file
/// \brief checkpoint::Serializer — a training run's whole state saved into a checkpoint directory
/// and read back, in any layout: the parameters and the optimizer's state (each rank writes what
/// it holds: its stages, its split parts, its ZeRO slices, one copy of what replicas share), the
/// step, the optimizer's step count, AMP's loss scale, the watched loaders' positions and the
/// configuration. The trainer lends it a TrainerState (views of its arena, optimizer and scaler)
/// for each save or load; the file format is checkpoint/checkpoint.hpp's.
///
/// This header declares what a Trainer holds and calls; checkpoint/serializer.ipp, included at its
/// end, defines the members over the I/O stack (files, CRC-32C, safetensors, locks). A program
/// linked with epl::precompiled takes them from that library and its translation units never
/// parse that stack (#38).
///
/// Saving and loading are collectives: every phase ends in an all-gather of every rank's outcome,
/// so a rank that fails (a full disk, a corrupt file) fails the operation on all of them with its
/// message instead of leaving the others in its next collective.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epl/checkpoint/index_names.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/config/config.hpp"
#include "epl/data/data.hpp"
#include "epl/nn/walk.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/amp.hpp"
#include "epl/reflect/type_name.hpp"

namespace epl {
inline namespace v0 {
namespace files {
class Folder;
}  // namespace files

namespace checkpoint {

// Defined in checkpoint/checkpoint.hpp, which the definitions include.
struct Manifest;
class Reader;
class DirectoryLock;

/// \brief A range of the arena a rank keeps values (and optimizer state) for, as one flat view,
/// and where its state starts in the optimizer's buffers: the whole arena, or a ZeRO slice.
struct Region {
  param::Range range;
  Tensor values;
  std::int64_t state_at = 0;
};

/// \brief What a trainer lends the serializer for one save or load.
struct TrainerState {
  comm::Communicator* world = nullptr;
  std::int64_t* step = nullptr;  ///< read by a save, set by a load
  const param::Arena* arena = nullptr;
  std::vector<Region> regions;   ///< this rank's values
  /// Whether this rank writes p's pieces: one copy of what replicas share.
  std::function<bool(const nn::Parameter&)> writes;
  /// Every parameter's name (its path in the model), materialized here or not.
  std::map<const nn::Parameter*, std::string> names;
  /// The same by the names checkpoints had before fields took their declared names (index_names).
  std::map<const nn::Parameter*, std::string> index_names;
  /// Each layer's hyper-parameters by path (nn::layer_options): saved, and compared on resume.
  std::vector<std::pair<std::string, std::string>> layer_options;
  std::string optimizer;                           ///< the optimizer's type, by name
  std::int64_t optimizer_steps = 0;
  const std::vector<Tensor>* optimizer_state = nullptr;  ///< kStateSlots buffers over the regions
  int optimizer_slots = 0;                         ///< the optimizer's kStateSlots
  unsigned nonnegative_slots = 0;                  ///< optim::nonnegative_slots: checked on load
  const optim::LrSchedule* schedule = nullptr;     ///< the learning-rate schedule, saved and checked on resume
  /// Restarts the optimizer at a saved step count with zeroed state of n elements; returns it.
  std::function<const std::vector<Tensor>&(std::int64_t steps, std::int64_t n, DType t)> restore_optimizer;
  policy::LossScaler* scaler = nullptr;            ///< AMP's, or null
  /// What the policies keep beside the optimizer's state (the EMA of the weights), laid out as a
  /// state slot: saved as <parameter>@<suffix>; a checkpoint without one calls its `absent`.
  std::vector<policy::SavedState> policy_state;
  std::uint64_t seed = 0;
  int data = 1, tensor = 1, pipeline = 1, zero = 0;  ///< the layout, for a reader's information
  std::function<void(const Tensor&, void*)> download;
  std::function<void(const void*, const Tensor&)> upload;
};

/// \brief What a model and its optimizer lend a TrainerState: every parameter's name (today's and
/// the index names), the optimizer's type, step count, state and schedule, and how to restart it
/// on device d at a saved step.
template <class Model, class U, class D>
void describe(TrainerState& s, Model& model, U& updater, const D& d) {
  nn::visit_parameters(model, [&](std::string_view path, nn::Parameter& p) { s.names[&p] = std::string(path); });
  s.index_names = index_names(model);
  s.layer_options = nn::layer_options(model);
  using O = std::remove_cvref_t<decltype(updater.optimizer())>;
  s.optimizer = std::string(reflect::type_name<O>());
  s.optimizer_steps = updater.steps();
  s.optimizer_state = &updater.state();
  s.optimizer_slots = O::kStateSlots;
  s.nonnegative_slots = optim::nonnegative_slots<O>();
  s.schedule = &updater.schedule();
  s.restore_optimizer = [&updater, &d](std::int64_t steps, std::int64_t n, DType t) -> const std::vector<Tensor>& {
    return updater.restore(d, steps, n, t);
  };
  s.download = [&d](const Tensor& t, void* h) { d.download(t, h); };
  s.upload = [&d](const void* host, const Tensor& t) { d.upload(host, t); };
}

/// \brief Saves and loads a trainer's state, and keeps what a run knows about its checkpoints:
/// checkpoint.dir and checkpoint.every, the directory's lock, the loaders whose positions are
/// saved, and what the run resumed from.
template <class Unused = void>
class BasicSerializer {
 public:
  BasicSerializer();
  BasicSerializer(BasicSerializer&&) noexcept;
  BasicSerializer& operator=(BasicSerializer&&) noexcept;
  ~BasicSerializer();

  /// \brief The configuration a run saves with, checkpoint.dir and checkpoint.every; `phase` is
  /// called on every rank at each phase of a save (where a test makes a save fail part-way).
  void configure(const Config& cfg, std::function<void(std::string_view)> phase);
  /// \brief checkpoint.dir checked (and, when the run saves, created and locked) now rather than
  /// at the first save, hours later; then the newest checkpoint in it, if any, loaded.
  void open(TrainerState& s);
  /// \brief Whether checkpoint.every asks for a save after `step`.
  [[nodiscard]] bool due(std::int64_t step) const noexcept { return every_ > 0 && step % every_ == 0; }
  [[nodiscard]] const std::string& dir() const noexcept { return dir_; }
  [[nodiscard]] const std::optional<std::filesystem::path>& resumed_from() const noexcept { return resumed_from_; }

  /// \brief Saves s into dir/step-N (see Trainer::save); returns the directory.
  std::filesystem::path save(const std::filesystem::path& dir, const TrainerState& s);
  /// \brief Loads the newest complete checkpoint in dir and returns its directory; nullopt,
  /// changing nothing, when dir holds none.
  std::optional<std::filesystem::path> resume(const std::filesystem::path& dir, TrainerState& s);
  /// \brief Loads checkpoint (a step-N directory a save wrote, by any layout) into s.
  void load(const std::filesystem::path& checkpoint, TrainerState& s);
  /// \brief Sets every parameter of s from a safetensors file whose tensors are named as the model
  /// names its parameters (what export_safetensors writes; PyTorch's save_file of a model of the
  /// same architecture). Strict, as PyTorch's load_state_dict(strict=True): each parameter present
  /// with its whole shape and the arena's dtype, nothing left over. The optimizer's state and the
  /// step are left as they are. Once every rank has read and checked its file, `agree` (if set) is
  /// given a fingerprint of the weights read (each tensor's name and bytes), before any rank loads
  /// them: the Trainer checks that the ranks read the same weights.
  void load_safetensors(const std::filesystem::path& file, TrainerState& s, const std::function<void(std::uint64_t)>& agree = {});

  /// \brief Makes loader's position part of the saved state and, when this run resumed, moves it
  /// to the saved position. Watch the same loaders in the same order in every run (watching one
  /// twice counts once).
  void watch(data::WindowLoader& loader);
  /// \brief Before a step: a resumed run that saved loader positions watches as many loaders.
  void before_step();

 private:
  void phase(std::string_view p) const;
  // A directory to save into or resume from: not empty, and not a checkpoint itself (an easy slip:
  // epl-checkpoint takes either).
  static void check_dir(const std::filesystem::path& dir);
  // Rank 0: dir exists, is this run's (its lock taken) and can be written.
  void take_dir(const std::filesystem::path& dir);
  // Rank 0: renames the finished directory `partial` to step directory `name`, replacing only a
  // step directory a save wrote.
  static void place(const files::Folder& folder, const std::string& partial, const std::string& name);
  // Rank 0, after a save (checkpoint.keep): removes the step directories a save completed beyond
  // the newest keep_ - 1 besides `saved`.
  void remove_older(const files::Folder& folder, const std::string& saved);
  // Rank 0, holding the lock: removes what saves that did not finish left behind.
  static void remove_unfinished(const files::Folder& folder);
  // The manifest's scalar that holds a layer's options: "layer." and its path.
  static std::string layer_options_name(const std::string& path) { return "layer." + path; }
  // Calls fn(parameter, its element range [b, e), the region, the offset of b in the region) for
  // every piece of a parameter that lies in one of this rank's regions.
  template <class Fn>
  static void for_each_piece(const TrainerState& s, Fn&& fn) {
    for (const auto& region : s.regions)
      for (auto* p : s.arena->parameters()) {
        const std::int64_t b = std::max(p->offset, region.range.begin), e = std::min(p->offset + p->numel(), region.range.end);
        if (b < e) fn(*p, b - p->offset, e - p->offset, region, b - region.range.begin);
      }
  }
  // Uploads elements [b, e) of p, from its whole tensor's bytes, into `to`.
  static void upload_piece(const TrainerState& s, const nn::Parameter& p, std::int64_t b, std::int64_t e,
                           const std::vector<unsigned char>& whole, const Tensor& to, std::vector<unsigned char>& host) {
    const std::size_t elem = size_of(s.arena->dtype());
    if (p.shard.whole()) return s.upload(whole.data() + static_cast<std::size_t>(b) * elem, to);  // a range of it
    host.resize(static_cast<std::size_t>(e - b) * elem);
    for (std::int64_t i = b; i < e; ++i)
      std::memcpy(host.data() + static_cast<std::size_t>(i - b) * elem, whole.data() + p.global_index(i) * elem, elem);
    s.upload(host.data(), to);
  }
  // Names s by the older index names when `has` finds all of those and not all of today's.
  template <class Has>
  static void adopt_index_names(TrainerState& s, Has&& has) {
    auto all = [&](const std::map<const nn::Parameter*, std::string>& names) {
      return std::all_of(names.begin(), names.end(), [&](const auto& n) { return has(n.second); });
    };
    if (!s.index_names.empty() && !all(s.names) && all(s.index_names)) s.names = s.index_names;
  }
  // Writes this rank's pieces into dir/rank-R.bin; returns them as a manifest of their own.
  std::string write_shard(const files::Folder& dir, const TrainerState& s) const;
  // Rank 0: the ranks' pieces and this run's scalars and configuration, as one manifest.
  Manifest merged_manifest(const std::vector<std::string>& parts, const TrainerState& s) const;
  // Reads, and so checks (checksums included), everything restore() will read on this rank,
  // changing nothing: a load then fails on every rank before any rank has changed its state.
  static void verify(const Reader& reader, const std::string& where, TrainerState& s);
  // This rank's part of the saved state, from reader (`where` names the checkpoint), after verify().
  void restore(const Reader& reader, const std::string& where, TrainerState& s);
  // The same model, optimizer and seed as the run that saved it.
  static void check_same_run(const Manifest& m, const std::string& where, const TrainerState& s);
  // The loaders' saved positions: one for all ranks, or each rank's (see merged_manifest).
  template <class Scalar>
  void restore_loaders(const Manifest& m, const std::string& where, Scalar&& scalar, comm::Communicator& world);

  std::string dir_;              // checkpoint.dir
  std::int64_t every_ = 0;       // checkpoint.every
  std::int64_t keep_ = 0;        // checkpoint.keep
  bool other_data_ = false;      // checkpoint.resume_other_data
  std::string announce_;         // rank 0: "resumed from ...", printed at the first step
  std::vector<std::pair<std::string, std::string>> config_;  // every key's value as text
  std::map<std::string, std::string, std::less<>> given_;   // the keys given, and where (Manifest::given)
  std::function<void(std::string_view)> phase_;
  std::vector<data::WindowLoader*> loaders_;                   // watched: their positions are saved
  std::vector<data::WindowLoader::Position> saved_positions_;  // a resumed run's, until the loaders are watched
  std::size_t saved_loaders_ = 0;                              // the loader positions the resumed checkpoint held
  std::optional<std::filesystem::path> resumed_from_;
  std::unique_ptr<DirectoryLock> lock_;  // rank 0: the directory this run saves into
  std::filesystem::path locked_path_;    // as given
  std::pair<std::uint64_t, std::uint64_t> locked_id_{};  // its device and inode
};

/// \brief The serializer of a trainer's state (a class template only so that a program linked with
/// epl::precompiled takes its compiled members from that library).
using Serializer = BasicSerializer<>;

#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)
extern template class BasicSerializer<void>;
#endif

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl

// The members' definitions: compiled into every program that uses the serializer, or, in a
// program linked with epl::precompiled (EPL_PRECOMPILED), once in that library.
#if !defined(EPL_PRECOMPILED) || defined(EPL_PRECOMPILED_SOURCE)
#include "epl/checkpoint/serializer.ipp"
#endif
