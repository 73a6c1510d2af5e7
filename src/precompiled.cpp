// epl::precompiled: what every training program would otherwise compile for itself, compiled
// once — the CPU device's operations and kernels (device::Cpu, device::CpuF64), the type-erased
// models of the host communication backends (a world of one, thread ranks; MPI processes in
// precompiled_mpi.cpp), and the checkpoint serializer. A program
// linked with this library (the target defines EPL_PRECOMPILED for it) declares them
// `extern template` and instantiates only its own model's layers, strategies and trainer.
// docs/architecture.md, "What a program compiles".
#define EPL_PRECOMPILED_SOURCE
#include "epl/checkpoint/serializer.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/comm/threads/threads.hpp"
#include "epl/device/cpu/cpu.hpp"

namespace epl {
inline namespace v0 {
namespace device {
template class BasicCpu<float>;
template class BasicCpu<float, double>;
}  // namespace device
namespace comm {
template class detail::CommunicatorModel<SoloCommunicator, true>;
template class detail::CommunicatorModel<SoloCommunicator, false>;
template class detail::CommunicatorModel<ThreadCommunicator, true>;
template class detail::CommunicatorModel<ThreadCommunicator, false>;
}  // namespace comm
namespace checkpoint {
template class BasicSerializer<void>;
}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
