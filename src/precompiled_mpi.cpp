// epl::precompiled's part for MPI programs (compiled when epl is built with MPI): the type-erased
// model of the MPI backend, so an MPI program does not compile every collective of it itself.
#define EPL_PRECOMPILED_SOURCE
#include "epl/comm/mpi/mpi.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
template class detail::CommunicatorModel<MpiCommunicator, true>;
template class detail::CommunicatorModel<MpiCommunicator, false>;
}  // namespace comm
}  // namespace v0
}  // namespace epl
