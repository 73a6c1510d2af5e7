// epl::precompiled: what every training program would otherwise compile for itself, compiled
// once — the CPU device's operations and kernels (device::Cpu, device::CpuF64: a source of their
// own, precompiled_device.cpp, which a parallel build compiles beside this one), the type-erased
// models of the host communication backends (a world of one, thread ranks; MPI processes in
// precompiled_mpi.cpp), and what stands on the file layer, Boost.CRC and fcntl: the checkpoint
// serializer, export_safetensors and the run's tracer. A program linked with this library (the target defines EPL_PRECOMPILED for it) declares them
// `extern template` and instantiates only its own model's layers, strategies and trainer.
// docs/architecture.md, "What a program compiles".
#define EPL_PRECOMPILED_SOURCE
#define EPL_PRECOMPILED_DEFINITIONS  // the one definition of each EPL_LINKED function (core/linked.hpp)
#include "epl/checkpoint/export.hpp"
#include "epl/checkpoint/serializer.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/comm/threads/threads.hpp"
#include "epl/device/cpu/cpu.hpp"
#include "epl/runtime/trace.hpp"
#include "epl/runtime/trainer.hpp"  // and model_free.hpp's list, defined here
#include "epl/tune/auto_plan.hpp"    // the planner's model-free bodies (EPL_LINKED)

#include <cstdio>
#include <cstdlib>
#include <string>

namespace epl {
inline namespace v0 {
namespace detail {
extern const int link_epl_precompiled_or_drop_EPL_PRECOMPILED = 1;  // what core/linked.hpp's check refers to
// This library is compiled for its build machine's instruction set (EPL_NATIVE: -march=native).
// Run on a CPU without it, a program would stop at its first kernel on an illegal instruction;
// it says why instead, before main.
[[gnu::used]] const bool kIsaChecked = [] {
  const std::string missing = cpu::missing_isa(cpu::compiled_isa(), cpu::isa());
  if (!missing.empty()) {
    std::fprintf(stderr,
                 "epl: epl::precompiled was compiled for %s, which this CPU lacks: it was built with -march=native "
                 "(EPL_NATIVE) on another machine; rebuild epl on this one, or configure it with -DEPL_NATIVE=OFF "
                 "-DCMAKE_CXX_FLAGS=-march=<the oldest CPU it must run on>\n",
                 missing.c_str());
    std::_Exit(2);
  }
  return true;
}();
}  // namespace detail
namespace comm {
template class detail::CommunicatorModel<SoloCommunicator, true>;
template class detail::CommunicatorModel<SoloCommunicator, false>;
template class detail::CommunicatorModel<ThreadCommunicator, true>;
template class detail::CommunicatorModel<ThreadCommunicator, false>;
}  // namespace comm
namespace checkpoint {
template class BasicSerializer<void>;
template std::size_t export_safetensors<void>(const std::filesystem::path&, const std::filesystem::path&, std::string_view);
}  // namespace checkpoint
template plan::Profile plan::detail::profile_units(const std::vector<strategy::Unit<nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>>>&,
                                                   nn::SoftmaxCrossEntropy&, const device::Cpu&, comm::Communicator&, int, const Tensor&,
                                                   const Tensor&, int, DType);
template plan::Profile plan::detail::profile_units(const std::vector<strategy::Unit<nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>>>&,
                                                   nn::SoftmaxCrossEntropy&, const device::Cpu&, comm::Communicator&, int, const Tensor&,
                                                   const Tensor&, int, DType);
template void write_trace<void>(comm::Communicator&, const Timeline&, const std::string&);
template class BasicTracer<void>;
}  // namespace v0
}  // namespace epl
